#include "libclient/wait_tracker.h"

#include <set>
#include <utility>

namespace troika::internal {

uint64_t WaitTracker::Blocked(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t token = next_token_++;
  blocked_.emplace(token, name);
  ReportLocked();
  return token;
}

void WaitTracker::Unblocked(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  if (blocked_.erase(token) == 0) return;
  ReportLocked();
}

void WaitTracker::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = nullptr;
}

void WaitTracker::ReportLocked() {
  std::set<std::string> names;
  for (const auto& [token, name] : blocked_) names.insert(name);
  std::vector<std::string> now(names.begin(), names.end());
  if (now == reported_) return;
  reported_ = now;
  if (sink_) sink_(WaitState{rank_, std::move(now)});
}

}  // namespace troika::internal
