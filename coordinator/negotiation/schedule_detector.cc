#include "coordinator/negotiation/schedule_detector.h"

#include <algorithm>
#include <set>

namespace troika::coordinator {

bool ScheduleDetector::Schedulable(const Response& r) {
  return r.type == CollectiveType::kAllreduce && r.process_set == 0 && !r.is_error() &&
         r.ids_known && !r.cache_ids.empty() && r.cache_ids.size() == r.names.size() &&
         r.joined_ranks.empty();
}

void ScheduleDetector::Reset(int repeats) {
  repeats_ = std::max(repeats, 2);
  responses_.clear();
  response_tensors_ = 0;
  tensors_.clear();
  observed_ = 0;
  last_seen_.clear();
  period_responses_ = 0;
}

void ScheduleDetector::Observe(const Response& response) {
  if (!Schedulable(response)) return Reset(repeats_);
  period_responses_ = 0;
  // The period's length: how far back the response's last tensor was seen before.
  const int32_t last = response.cache_ids.back();
  auto seen = last_seen_.find(last);
  const int64_t before = seen == last_seen_.end() ? 0 : seen->second;
  for (int32_t id : response.cache_ids) {
    tensors_.push_back(id);
    last_seen_[id] = ++observed_;
  }
  responses_.push_back(response);
  response_tensors_ += response.cache_ids.size();
  while (tensors_.size() > static_cast<size_t>(max_period_) * repeats_) tensors_.pop_front();
  while (response_tensors_ - responses_.front().cache_ids.size() >=
             static_cast<size_t>(max_period_) &&
         responses_.size() > 1) {
    response_tensors_ -= responses_.front().cache_ids.size();
    responses_.pop_front();
  }
  // Many distinct ids (a step that changes every time) are forgotten now and then.
  if (last_seen_.size() > static_cast<size_t>(max_period_) * 4) last_seen_.clear();
  if (before == 0) return;
  const int64_t n = observed_ - before;
  if (n > max_period_ || static_cast<int64_t>(tensors_.size()) < n * repeats_) return;
  // The latest n * repeats_ tensors: `repeats_` copies of the latest n, each tensor once.
  const size_t size = tensors_.size();
  for (int64_t i = 0; i < n * (repeats_ - 1); ++i) {
    if (tensors_[size - 1 - i] != tensors_[size - 1 - i - n]) return;
  }
  std::set<int32_t> distinct(tensors_.end() - n, tensors_.end());
  if (static_cast<int64_t>(distinct.size()) != n) return;
  // The latest responses holding exactly those n tensors.
  size_t count = 0, covered = 0;
  for (auto it = responses_.rbegin(); it != responses_.rend() && covered < static_cast<size_t>(n);
       ++it) {
    covered += it->cache_ids.size();
    ++count;
  }
  if (covered == static_cast<size_t>(n)) period_responses_ = count;
}

std::optional<std::vector<Response>> ScheduleDetector::Period() const {
  if (period_responses_ == 0) return std::nullopt;
  return std::vector<Response>(responses_.end() - static_cast<int64_t>(period_responses_),
                               responses_.end());
}

}  // namespace troika::coordinator
