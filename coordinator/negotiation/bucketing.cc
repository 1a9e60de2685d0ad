#include "coordinator/negotiation/bucketing.h"

#include <cstddef>
#include <utility>

namespace troika::coordinator {

Bucketing::Bucketing(bool enabled, const Negotiator& whole_job)
    : enabled_(enabled), whole_job_(whole_job) {}

void Bucketing::Learn(const std::vector<std::string>& names, const std::set<int>& cut_after) {
  for (size_t n = 0; n < names.size(); ++n) {  // the last: with the next round's first
    std::pair<std::string, std::string> pair{names[n], names[(n + 1) % names.size()]};
    if (cut_after.count(static_cast<int>(n)) > 0) {
      joinable_.erase(pair);
      separable_.insert(std::move(pair));
    } else if (separable_.count(pair) == 0) {
      joinable_.insert(std::move(pair));
    }
  }
}

bool Bucketing::EndedYoung() { return ++young_ends_ == kMaxYoungEnds; }

bool Bucketing::AllJoinable(const Response& entry) const {
  for (size_t i = 0; i + 1 < entry.names.size(); ++i) {
    if (!Joinable(entry.names[i], entry.names[i + 1])) return false;
  }
  return true;
}

bool Bucketing::MayJoin(const Response& entry, const Response& next) const {
  return on() && Fusible(entry, next) && Joinable(entry.names.back(), next.names.front()) &&
         AllJoinable(entry) && AllJoinable(next);
}

int64_t Bucketing::Bytes(const Response& entry) const {
  int64_t bytes = 0;
  for (int32_t id : entry.cache_ids) bytes += whole_job_.CachedBytes(id);
  return bytes;
}

std::vector<Response> Bucketing::Bucket(std::vector<Response> period) const {
  if (!on()) return period;
  const int64_t limit = whole_job_.options().fusion_threshold_bytes;
  std::vector<Response> buckets;
  int64_t bytes = 0;
  bool open = false;  // buckets.back() may take more entries: its tensors are all joinable
  for (Response& entry : period) {
    const int64_t entry_bytes = Bytes(entry);
    // Fusible is an equivalence: the bucket's first entry stands for all of it.
    if (open && bytes + entry_bytes <= limit && Fusible(buckets.back(), entry) &&
        Joinable(buckets.back().names.back(), entry.names.front()) && AllJoinable(entry)) {
      Response& bucket = buckets.back();
      bucket.names.insert(bucket.names.end(), entry.names.begin(), entry.names.end());
      bucket.cache_ids.insert(bucket.cache_ids.end(), entry.cache_ids.begin(),
                              entry.cache_ids.end());
      bucket.elements.insert(bucket.elements.end(), entry.elements.begin(), entry.elements.end());
      bytes += entry_bytes;
      continue;
    }
    open = AllJoinable(entry);
    bytes = entry_bytes;
    buckets.push_back(std::move(entry));
  }
  return buckets;
}

size_t Bucketing::Fewest(const std::vector<Response>& period) const {
  const size_t k = period.size();
  // Every rotation's buckets end at a boundary no bucket may cross, and fusing greedily (each
  // bucket as long as it may be) fills each stretch between two such boundaries with the
  // fewest buckets: greedy fusion from one of them is the fewest of any rotation.
  for (size_t start = 0; start < k && on(); ++start) {
    if (MayJoin(period[(start + k - 1) % k], period[start])) continue;
    std::vector<Response> rotated(period.begin() + static_cast<std::ptrdiff_t>(start),
                                  period.end());
    rotated.insert(rotated.end(), period.begin(),
                   period.begin() + static_cast<std::ptrdiff_t>(start));
    return Bucket(std::move(rotated)).size();
  }
  // No such boundary (or no bucketing): rotations differ by where the threshold parts buckets
  // at most; the one given is taken as it is.
  return Bucket(period).size();
}

}  // namespace troika::coordinator
