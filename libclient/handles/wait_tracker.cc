#include "libclient/handles/wait_tracker.h"

#include <algorithm>
#include <set>
#include <utility>

namespace troika::internal {

uint64_t WaitTracker::Blocked(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t token = next_token_++;
  blocked_.emplace(token, name);
  ReportLocked();
  // Checked again: a steady-state schedule may have arrived since the wait began.
  if (flush_) flush_(name);
  return token;
}

std::vector<std::string> WaitTracker::BlockedNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [token, name] : blocked_) names.push_back(name);
  return names;
}

void WaitTracker::Unblocked(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.erase(token) != 0) return;  // never registered: nothing was sent
  if (blocked_.erase(token) == 0) return;
  ReportLocked();
}

uint64_t WaitTracker::BlockedFrom(const std::string& name, absl::Time since) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t token = next_token_++;
  waiting_.emplace(token, std::make_pair(name, since));
  if (wake_) wake_();
  return token;
}

void WaitTracker::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = nullptr;
  wake_ = nullptr;
  flush_ = nullptr;
}

void WaitTracker::Waiting(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (flush_) flush_(name);
}

void WaitTracker::SetFlush(std::function<void(const std::string&)> flush) {
  std::lock_guard<std::mutex> lock(mu_);
  flush_ = std::move(flush);
}

void WaitTracker::Polled(uint64_t op, const std::string& name, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, first] = polls_.try_emplace(op);
  PollRun& run = it->second;
  if (first) {
    run.name = name;
    run.since = run.last = now;
  } else if (now - run.last >= kPollLease) {
    // The polls stopped for longer than the lease: a new run (Expire had not noticed yet).
    run.since = now;
    if (run.blocked) {
      run.blocked = false;
      ReportLocked();
    }
  }
  run.last = std::max(run.last, now);  // concurrent pollers may arrive out of order
  if (!run.blocked && run.last - run.since >= kBlockedAfter) {
    run.blocked = true;
    ReportLocked();
    if (wake_) wake_();
  }
}

void WaitTracker::PollEnded(uint64_t op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = polls_.find(op);
  if (it == polls_.end()) return;
  const bool blocked = it->second.blocked;
  polls_.erase(it);
  if (blocked) ReportLocked();
}

absl::Time WaitTracker::Expire(absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  bool lapsed = false;
  absl::Time next = absl::InfiniteFuture();
  for (auto it = polls_.begin(); it != polls_.end();) {
    if (now - it->second.last >= kPollLease) {
      lapsed |= it->second.blocked;
      it = polls_.erase(it);
      continue;
    }
    if (it->second.blocked) next = std::min(next, it->second.last + kPollLease);
    ++it;
  }
  bool registered = false;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const auto& [name, since] = it->second;
    if (now - since >= kBlockedAfter) {
      blocked_.emplace(it->first, name);
      registered = true;
      if (flush_) flush_(name);  // as Blocked: a schedule may have arrived since
      it = waiting_.erase(it);
      continue;
    }
    next = std::min(next, since + kBlockedAfter);
    ++it;
  }
  if (lapsed || registered) ReportLocked();
  return next;
}

void WaitTracker::SetWake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = std::move(wake);
}

void WaitTracker::ReportLocked() {
  std::set<std::string> names;
  for (const auto& [token, name] : blocked_) names.insert(name);
  for (const auto& [op, run] : polls_) {
    if (run.blocked) names.insert(run.name);
  }
  std::vector<std::string> now(names.begin(), names.end());
  if (now == reported_) return;
  reported_ = now;
  if (sink_) sink_(WaitState{rank_, std::move(now)});
}

}  // namespace troika::internal
