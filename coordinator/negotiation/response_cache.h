#pragma once
// ResponseCache: the coordinator's half of the response cache. When a tensor becomes ready
// and the ranks agree on it, it gets a cache id (sent down with its response); each rank
// records the request it submitted under that id and, while its request stays the same, sends
// the id alone. The coordinator keeps every rank's request per id, so an id resolves to exactly
// what the rank would have sent.
//
// The coordinator alone decides what an id means and when it ends, so ranks can never
// disagree: an id ends when its tensor becomes ready with different requests (a new id
// replaces it), when its tensor fails agreement, or when it is the least recently used entry
// and the cache is full. Ended ids are reported (TakeEnded) so ranks stop using them; a rank
// that sent one before it learned of the end gets a CacheMiss and sends the request in full.
// Ids are never reused; once they run out (2^31 - 1 of them) nothing new is cached.
//
// Plain state, no threads, no clock. Not thread-safe (the Negotiator owns it).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/messages.h"

namespace troika::coordinator {

struct CacheStats {
  int capacity = 0;
  int entries = 0;
  int64_t hits = 0;       // tensors ready with the same requests as their entry
  int64_t misses = 0;     // tensors ready with new or changed requests
  int64_t evictions = 0;  // entries dropped because the cache was full
  int64_t resends = 0;    // requests sent as an id that had ended (CacheMiss)
};

// What an id stands for: every rank's request and the response they agreed on (without
// cache ids). Immutable once cached; shared with the tensors negotiated from it.
struct CachedTensor {
  std::vector<TensorRequest> by_rank;
  Response response;
};

class ResponseCache {
 public:
  // `capacity`: most entries kept. 0 disables the cache (Put assigns nothing).
  explicit ResponseCache(int capacity);

  // What `id` stands for, or nullptr if the id is unknown or ended (then counted as a resend).
  // Marks the entry recently used.
  std::shared_ptr<const CachedTensor> Find(int32_t id);
  // What `id` stands for, or nullptr; counts and marks nothing.
  std::shared_ptr<const CachedTensor> Peek(int32_t id) const;
  // Every rank sent `id` again and `tensor` (from Find) became ready from those ids alone: a
  // hit if `id` still stands for `tensor`; false (nothing counted) if it ended meanwhile.
  bool Hit(int32_t id, const CachedTensor* tensor);

  struct Assignment {
    int32_t id = 0;    // 0: not cached
    bool hit = false;  // the id was assigned before, so every rank knows it
  };
  // `by_rank` (every rank's request for one tensor, ranks agreeing on `agreed`) became ready.
  // Barriers are not cached: their names are single-use.
  Assignment Put(const std::vector<TensorRequest>& by_rank, const Response& agreed = {});
  // The tensor `name` failed agreement: its entry, if any, ends.
  void Erase(const std::string& name);
  // Ids that ended since the last call, in the order they ended.
  std::vector<int32_t> TakeEnded();
  // Ids up to `id` were handed out by an earlier coordinator (ranks may still hold them):
  // new ids start above it.
  void ReserveIdsThrough(int32_t id) {
    // At the last id the cache caches nothing new (see Put).
    next_id_ = std::max(next_id_, id < std::numeric_limits<int32_t>::max() ? id + 1 : id);
  }

  CacheStats stats() const;

 private:
  struct Entry {
    std::string name;
    std::shared_ptr<const CachedTensor> tensor;
    std::list<int32_t>::iterator lru;  // position in lru_
  };

  void End(int32_t id);

  const int capacity_;
  int32_t next_id_ = 1;
  std::unordered_map<int32_t, Entry> entries_;
  std::map<std::string, int32_t> ids_;  // name -> id
  std::list<int32_t> lru_;              // most recently used first
  std::vector<int32_t> ended_;
  CacheStats stats_;
};

}  // namespace troika::coordinator
