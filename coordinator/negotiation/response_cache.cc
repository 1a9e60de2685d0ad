#include "coordinator/negotiation/response_cache.h"

#include <limits>
#include <utility>

namespace troika::coordinator {

ResponseCache::ResponseCache(int capacity) : capacity_(capacity < 0 ? 0 : capacity) {
  stats_.capacity = capacity_;
}

std::shared_ptr<const CachedTensor> ResponseCache::Find(int32_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    ++stats_.resends;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.tensor;
}

std::shared_ptr<const CachedTensor> ResponseCache::Peek(int32_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.tensor;
}

bool ResponseCache::Hit(int32_t id, const CachedTensor* tensor) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.tensor.get() != tensor) return false;
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return true;
}

ResponseCache::Assignment ResponseCache::Put(const std::vector<TensorRequest>& by_rank,
                                             const Response& agreed) {
  if (capacity_ == 0 || by_rank.empty() || by_rank.front().type == CollectiveType::kBarrier) {
    return {};
  }
  const std::string& name = by_rank.front().name;
  if (auto named = ids_.find(name); named != ids_.end()) {
    Entry& entry = entries_.at(named->second);
    if (entry.tensor->by_rank == by_rank) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, entry.lru);
      return {named->second, true};
    }
    End(named->second);  // changed: a new id replaces it
  }
  ++stats_.misses;
  // Ids are never reused, so a job that has used up all 2^31 - 1 of them (tensors whose
  // shapes change every step, for weeks) caches nothing new rather than wrapping around.
  if (next_id_ == std::numeric_limits<int32_t>::max()) return {};
  while (static_cast<int>(entries_.size()) >= capacity_) {
    ++stats_.evictions;
    End(lru_.back());
  }
  const int32_t id = next_id_++;
  lru_.push_front(id);
  entries_.emplace(id,
                   Entry{name, std::make_shared<const CachedTensor>(CachedTensor{by_rank, agreed}),
                         lru_.begin()});
  ids_[name] = id;
  return {id, false};
}

void ResponseCache::Erase(const std::string& name) {
  if (auto it = ids_.find(name); it != ids_.end()) End(it->second);
}

void ResponseCache::End(int32_t id) {
  auto it = entries_.find(id);
  ids_.erase(it->second.name);
  lru_.erase(it->second.lru);
  entries_.erase(it);
  ended_.push_back(id);
}

std::vector<int32_t> ResponseCache::TakeEnded() { return std::exchange(ended_, {}); }

CacheStats ResponseCache::stats() const {
  CacheStats out = stats_;
  out.entries = static_cast<int>(entries_.size());
  return out;
}

}  // namespace troika::coordinator
