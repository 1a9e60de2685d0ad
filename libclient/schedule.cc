#include "libclient/schedule.h"

#include <algorithm>
#include <utility>

namespace troika::internal {

void SortBySubmission(std::vector<Submission>& submissions) {
  std::ranges::sort(submissions, {}, &Submission::first);
}

ClientSchedule::ClientSchedule(Schedule schedule,
                               const std::map<std::string, TensorRequest>& expected)
    : id_(schedule.id), entries_(std::move(schedule.entries)) {
  for (size_t e = 0; e < entries_.size(); ++e) {
    Response& entry = entries_[e];
    entry.elements.clear();
    for (const std::string& name : entry.names) {
      auto it = expected.find(name);
      if (it == expected.end()) {
        complete_ = false;
        entry.elements.push_back(0);
        continue;
      }
      entry.elements.push_back(it->second.ByteSize() /
                               static_cast<int64_t>(DataTypeSize(it->second.dtype)));
      slot_[name] = {e, tensors_, it->second};
      ++tensors_;
    }
  }
  if (entries_.empty()) complete_ = false;
}

bool ClientSchedule::Submit(const TensorRequest& request, uint64_t order, absl::Time now,
                            uint64_t observed) {
  if (deviated_ || request.process_set != 0) return false;
  auto slot = slot_.find(request.name);
  if (slot == slot_.end() || !(slot->second.request == request)) return false;
  const int64_t k = static_cast<int64_t>(entries_.size());
  const int64_t e = static_cast<int64_t>(slot->second.entry);
  // The name's first occurrence not entered yet (a name is in flight once, so its previous
  // occurrence was entered before it could be submitted again).
  int64_t position = next_ - next_ % k + e;
  if (position < next_) position += k;
  ++submitted_[position];
  const int tensor = slot->second.tensor;
  taken_[request.name] = {position, order, request, tensor, now};
  Round& round = rounds_[position / k];
  if (round.submitted.empty()) {
    round.submitted.resize(static_cast<size_t>(tensors_));
    round.observed.resize(static_cast<size_t>(tensors_));
    round.completed.resize(entries_.size());
  }
  round.submitted[static_cast<size_t>(tensor)] = now;
  round.observed[static_cast<size_t>(tensor)] = observed;
  return true;
}

ClientSchedule::Step ClientSchedule::MakeStep(int64_t position, bool vote_void) const {
  const int64_t k = static_cast<int64_t>(entries_.size());
  return {position, entries_[static_cast<size_t>(position % k)], vote_void};
}

std::vector<ClientSchedule::Step> ClientSchedule::TakeReady() {
  std::vector<Step> ready;
  if (deviated_) return ready;
  const int64_t k = static_cast<int64_t>(entries_.size());
  for (;;) {
    auto it = submitted_.find(next_);
    if (it == submitted_.end() ||
        it->second < entries_[static_cast<size_t>(next_ % k)].names.size()) {
      break;
    }
    submitted_.erase(it);
    ready.push_back(MakeStep(next_++, false));
  }
  return ready;
}

ClientSchedule::Step ClientSchedule::Deviate() {
  deviated_ = true;
  if (entries_.empty()) return {};
  return MakeStep(next_, true);
}

absl::Duration ClientSchedule::BlockedFor(absl::Time now) const {
  std::map<int64_t, absl::Time> entered;  // position -> its last submission
  for (const auto& [name, taken] : taken_) {
    if (taken.position >= next_) continue;
    auto [it, fresh] = entered.try_emplace(taken.position, taken.submitted);
    it->second = std::max(it->second, taken.submitted);
  }
  return entered.empty() ? absl::ZeroDuration() : now - entered.begin()->second;
}

bool ClientSchedule::WaitDeviates(const std::string& name) const {
  if (deviated_) return false;
  auto it = taken_.find(name);
  return it != taken_.end() && it->second.position >= next_;
}

void ClientSchedule::Completed(int64_t position, absl::Time now) {
  for (auto it = taken_.begin(); it != taken_.end();) {
    it = it->second.position == position ? taken_.erase(it) : std::next(it);
  }
  const int64_t k = static_cast<int64_t>(entries_.size());
  auto it = rounds_.find(position / k);
  if (it == rounds_.end()) return;
  Round& round = it->second;
  round.completed[static_cast<size_t>(position % k)] = now;
  if (++round.entries_completed < entries_.size()) return;
  // Rounds complete in order, and a report's rounds are consecutive: once one does not fit,
  // it and those after it are left out until the next report.
  const int64_t done = static_cast<int64_t>(done_completed_.size() / entries_.size());
  if (done == 0) first_round_ = it->first;
  if (it->first == first_round_ + done &&
      done_submitted_.size() + round.submitted.size() <= kMaxReportedTensors) {
    done_submitted_.insert(done_submitted_.end(), round.submitted.begin(), round.submitted.end());
    done_completed_.insert(done_completed_.end(), round.completed.begin(), round.completed.end());
    for (size_t n = 0; n + 1 < round.observed.size(); ++n) {
      if (round.observed[n] != round.observed[n + 1]) {
        done_cut_after_.insert(static_cast<int32_t>(n));
      }
    }
    // The last tensor of the round before and this round's first.
    if (tail_round_ == it->first - 1 && tail_observed_ != round.observed.front()) {
      done_cut_after_.insert(tensors_ - 1);
    }
  }
  tail_round_ = it->first;
  tail_observed_ = round.observed.back();
  rounds_.erase(it);
}

std::vector<Submission> ClientSchedule::Ended(int64_t position) {
  deviated_ = true;
  std::vector<Submission> back;
  for (auto& [name, taken] : taken_) {
    if (taken.position >= position) back.emplace_back(taken.order, std::move(taken.request));
  }
  taken_.clear();
  submitted_.clear();
  rounds_.clear();
  SortBySubmission(back);
  return back;
}

ScheduleProgress ClientSchedule::TakeProgress(absl::Time now, absl::Duration stalling) {
  ScheduleProgress progress;
  progress.schedule = id_;
  progress.first_round = first_round_;
  progress.submitted_ago.reserve(done_submitted_.size());
  for (absl::Time t : done_submitted_) progress.submitted_ago.push_back(now - t);
  progress.completed_ago.reserve(done_completed_.size());
  for (absl::Time t : done_completed_) progress.completed_ago.push_back(now - t);
  done_submitted_.clear();
  done_completed_.clear();
  progress.cut_after.assign(done_cut_after_.begin(), done_cut_after_.end());
  done_cut_after_.clear();
  const int64_t k = static_cast<int64_t>(entries_.size());
  const bool stalled = std::ranges::any_of(
      taken_, [&](const auto& taken) { return now - taken.second.submitted >= stalling; });
  if (stalled) {
    for (const auto& [name, taken] : taken_) {
      progress.waiting.push_back({taken.tensor, taken.position / k, now - taken.submitted});
    }
  }
  return progress;
}

}  // namespace troika::internal
