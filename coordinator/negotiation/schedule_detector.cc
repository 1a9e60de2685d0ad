#include "coordinator/negotiation/schedule_detector.h"

#include <algorithm>
#include <set>

namespace troika::coordinator {
namespace {

// A cache id's share of a run's sum: runs holding the same ids have the same sum, and runs
// holding others almost never do (SameSets checks the ids of runs whose sums match).
uint64_t Mix(int32_t id) {
  uint64_t x = static_cast<uint32_t>(id) + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

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
  sent_.clear();
  hash_before_.clear();
  hash_ = 0;
  observed_ = 0;
  distinct_from_ = 1;
  last_seen_.clear();
  period_responses_ = 0;
}

void ScheduleDetector::Observe(const Response& response, absl::Time sent) {
  if (!Schedulable(response)) return Reset(repeats_);
  period_responses_ = 0;
  // The exact period's length: how far back the response's last tensor was seen before.
  const int32_t last = response.cache_ids.back();
  auto seen = last_seen_.find(last);
  const int64_t before = seen == last_seen_.end() ? 0 : seen->second;
  for (int32_t id : response.cache_ids) {
    tensors_.push_back(id);
    sent_.push_back(sent);
    hash_before_.push_back(hash_);
    hash_ += Mix(id);
    int64_t& number = last_seen_[id];
    if (number != 0) distinct_from_ = std::max(distinct_from_, number + 1);
    number = ++observed_;
  }
  responses_.push_back(response);
  response_tensors_ += response.cache_ids.size();
  while (tensors_.size() > static_cast<size_t>(max_period_) * repeats_ + 1) {
    tensors_.pop_front();
    sent_.pop_front();
    hash_before_.pop_front();
  }
  while (response_tensors_ - responses_.front().cache_ids.size() >=
             static_cast<size_t>(max_period_) &&
         responses_.size() > 1) {
    response_tensors_ -= responses_.front().cache_ids.size();
    responses_.pop_front();
  }
  // Many distinct ids (a step that changes every time) are forgotten now and then.
  if (last_seen_.size() > static_cast<size_t>(max_period_) * 4) last_seen_.clear();
  int64_t n = ExactPeriod(before);
  if (n == 0) n = SetPeriod();
  if (n > 0) period_responses_ = ResponsesCovering(n);
}

int64_t ScheduleDetector::ExactPeriod(int64_t before) const {
  if (before == 0) return 0;
  const int64_t n = observed_ - before;
  if (n > max_period_ || static_cast<int64_t>(tensors_.size()) < n * repeats_) return 0;
  // The latest n * repeats_ tensors: `repeats_` copies of the latest n, each tensor once.
  const size_t size = tensors_.size();
  for (int64_t i = 0; i < n * (repeats_ - 1); ++i) {
    if (tensors_[size - 1 - i] != tensors_[size - 1 - i - n]) return 0;
  }
  std::set<int32_t> distinct(tensors_.end() - n, tensors_.end());
  return static_cast<int64_t>(distinct.size()) == n ? n : 0;
}

int64_t ScheduleDetector::SetPeriod() const {
  // Runs of the same n distinct tensors back to back: the tensor before the latest run is one
  // of its n, so n is the length of the longest run of distinct latest tensors.
  const int64_t n = observed_ - distinct_from_ + 1;
  if (n < 1 || n > max_period_ || static_cast<int64_t>(tensors_.size()) < n * repeats_) return 0;
  return SameSets(n) && StartsAtPauses(n) ? n : 0;
}

bool ScheduleDetector::SameSets(int64_t n) const {
  const int64_t size = static_cast<int64_t>(tensors_.size());
  auto sum = [&](int64_t begin, int64_t end) {
    return (end == size ? hash_ : hash_before_[end]) - hash_before_[begin];
  };
  const uint64_t latest = sum(size - n, size);
  for (int k = 2; k <= repeats_; ++k) {
    if (sum(size - k * n, size - (k - 1) * n) != latest) return false;
  }
  std::vector<int32_t> set(tensors_.end() - n, tensors_.end());
  std::ranges::sort(set);
  if (std::ranges::adjacent_find(set) != set.end()) return false;
  std::vector<int32_t> run;
  for (int k = 2; k <= repeats_; ++k) {
    run.assign(tensors_.end() - k * n, tensors_.end() - (k - 1) * n);
    std::ranges::sort(run);
    if (run != set) return false;
  }
  return true;
}

bool ScheduleDetector::StartsAtPauses(int64_t n) const {
  const int64_t size = static_cast<int64_t>(tensors_.size());
  for (int k = 1; k <= repeats_; ++k) {
    const int64_t begin = size - k * n;
    if (begin == 0) continue;  // the oldest run's pause is older than the tensors kept
    const absl::Duration pause = sent_[begin] - sent_[begin - 1];
    for (int64_t i = begin + 1; i < begin + n; ++i) {
      if (sent_[i] - sent_[i - 1] >= pause) return false;
    }
  }
  return true;
}

size_t ScheduleDetector::ResponsesCovering(int64_t n) const {
  size_t count = 0, covered = 0;
  for (auto it = responses_.rbegin(); it != responses_.rend() && covered < static_cast<size_t>(n);
       ++it) {
    covered += it->cache_ids.size();
    ++count;
  }
  return covered == static_cast<size_t>(n) ? count : 0;
}

std::optional<std::vector<Response>> ScheduleDetector::Period() const {
  if (period_responses_ == 0) return std::nullopt;
  return std::vector<Response>(responses_.end() - static_cast<int64_t>(period_responses_),
                               responses_.end());
}

}  // namespace troika::coordinator
