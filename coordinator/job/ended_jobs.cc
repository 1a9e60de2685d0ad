#include "coordinator/job/ended_jobs.h"

#include <algorithm>
#include <utility>

namespace troika::coordinator {

void EndedJobs::Remember(const std::string& name, Secret token, absl::Status status,
                         absl::Time now) {
  if (capacity_ == 0) return;
  DropExpired(now);
  ended_.erase(name);
  if (ended_.size() >= capacity_) {
    auto oldest = std::min_element(ended_.begin(), ended_.end(), [](const auto& a, const auto& b) {
      return a.second.released < b.second.released;
    });
    ended_.erase(oldest);
  }
  ended_.emplace(name, Ended{std::move(token), std::move(status), now});
}

std::optional<absl::Status> EndedJobs::Lookup(const std::string& name, const std::string& token,
                                              absl::Time now) {
  DropExpired(now);
  auto it = ended_.find(name);
  if (it == ended_.end() || !it->second.token.Matches(token)) return std::nullopt;
  return it->second.status;
}

void EndedJobs::DropExpired(absl::Time now) {
  std::erase_if(ended_, [&](const auto& entry) { return now - entry.second.released >= ttl_; });
}

}  // namespace troika::coordinator
