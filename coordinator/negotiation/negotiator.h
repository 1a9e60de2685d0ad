#pragma once
// Negotiator: decides, for one job's ranks, when each named tensor is ready, whether the ranks
// agree on it, in which order every rank executes the ready ones, and which allreduces are
// fused together. Plain structs in and out: no threads, no clock of its own, no I/O.
//
// A tensor is ready once every rank has submitted it. Ready tensors join one global queue in
// the order they became ready; Poll() drains it. Compatible allreduces (same dtype, reduce op,
// scales and device class) are fused, in queue order, up to the fusion threshold. While a ready
// allreduce waits and other allreduces are still partially submitted, the queue is held up to
// the cycle time so they can join the same fused response; when nothing is partially
// submitted, holding could only add latency, so the queue is flushed at once.
//
// Groups (Request.group): a ready grouped tensor is held (GroupTable) until every tensor of
// its group is ready; then the group joins the queue contiguously and is never held back.
// Join (type kJoin, name kJoinTensorName): a joined rank counts as having submitted every
// tensor, so a tensor is ready once every rank that has not joined submitted it; such
// responses list the joined ranks and each tensor's element count. Allgather, alltoall,
// reducescatter, and broadcast from a joined root fail instead. Once every rank joined, one
// kJoin response (root: the last rank to join) completes the joins and join state resets.
//
// Thread contract: not thread-safe; the owning Job serialises every call.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/negotiation/group_table.h"
#include "coordinator/negotiation/response_cache.h"

namespace troika::coordinator {

struct NegotiatorOptions {
  // Largest fused allreduce, in bytes. 0 disables fusion. Default 64 MiB.
  int64_t fusion_threshold_bytes = int64_t{64} << 20;
  // Longest time a ready allreduce is held back to fuse with others. 0: never held.
  // Default 1 ms.
  absl::Duration cycle_time = absl::Milliseconds(1);
  // Response-cache entries (ResponseCache). 0 disables the cache. Default 1024.
  int cache_capacity = 1024;
  // Hostile-input limit: most tensors pending (submitted by some ranks, not all) at once
  // (RESOURCE_EXHAUSTED beyond). Default 65536. (Names: kMaxNameBytes, in CheckRequest.)
  int max_pending_tensors = 65536;
};

// Whether allreduce responses `a` and `b` may run as one fused allreduce (same dtype, op,
// scale factors, device, compression and joined ranks; neither an error).
bool Fusible(const Response& a, const Response& b);

// A tensor that became ready: when each rank submitted it, for straggler statistics and the
// timeline.
struct ReadyRecord {
  std::string name;
  CollectiveType type = CollectiveType::kAllreduce;
  absl::Time ready_at;
  std::vector<absl::Time> arrivals;  // by rank
  bool cached = false;               // a response-cache hit
  int64_t bytes = 0;                 // the tensor's bytes, as the first rank submitted it
};

// A tensor some ranks have submitted and others not yet.
struct PendingTensor {
  std::string name;
  absl::Time first_arrival;
  std::vector<int> missing_ranks;
};

class Negotiator {
 public:
  Negotiator(int size, NegotiatorOptions options);
  // Not copied or moved: it keeps an iterator into its own map.
  Negotiator(const Negotiator&) = delete;
  Negotiator& operator=(const Negotiator&) = delete;

  // Records `rank`'s request sent as cache id `id` alone, arrived at `now`: exactly as if it
  // had sent the request the id stands for. False (nothing recorded) if the id ended: the
  // rank must send the request in full (a CacheMiss). Errors as Submit's.
  //
  // While every rank of a tensor sends the same id, the tensor is negotiated from the cached
  // requests and response without a per-rank copy: what makes the cache pay at scale.
  absl::StatusOr<bool> SubmitCached(int rank, int32_t id, absl::Time now) {
    return SubmitCached(std::vector<int>{rank}, id, now);
  }
  // The same for several ranks that sent one id (an agent's compacted request): one lookup.
  absl::StatusOr<bool> SubmitCached(const std::vector<int>& ranks, int32_t id, absl::Time now);

  // Records one rank's request, arrived at `now`. Fails (and changes nothing) if the request
  // is malformed, still a cache id, or the rank already has a tensor of that name in flight.
  absl::Status Submit(TensorRequest request, absl::Time now);

  // Marks `rank` as gone for good: every pending tensor, and every tensor submitted later,
  // fails with a message naming it. `why`: "shut down", "exited with code 1".
  void RemoveRank(int rank, const std::string& why);

  // Responses due at `now`, in global order. `next_poll` is set to when a held queue becomes
  // due, or InfiniteFuture() if nothing is held.
  std::vector<Response> Poll(absl::Time now, absl::Time* next_poll);

  // Tensors some ranks submitted and others (not joined) not yet, and grouped tensors held
  // for the rest of their group (missing: the ranks their group's pending tensors miss).
  // Joins waiting for the other ranks are not pending: waiting for them is the point.
  std::vector<PendingTensor> Pending() const;
  bool has_pending() const { return !pending_.empty() || !groups_.empty(); }

  // Every tensor that became ready (all ranks submitted) since the last call, in the order
  // they became ready. The owner drains this after Submit() to feed its straggler statistics
  // and timeline; tensors failed for departed ranks are not included.
  std::vector<ReadyRecord> TakeReadyRecords() { return std::exchange(ready_records_, {}); }
  // The bytes of every allreduce response Poll() returned since the last call (fused or not),
  // for the fusion-fill metric.
  std::vector<int64_t> TakeAllreduceResponseBytes() {
    return std::exchange(allreduce_response_bytes_, {});
  }

  // Cache ids that ended since the last call. Send them with the responses of the same Poll
  // (ranks apply them after those responses).
  std::vector<int32_t> TakeEndedCacheIds() { return cache_.TakeEnded(); }
  CacheStats cache_stats() const { return cache_.stats(); }
  // The bytes of the tensor cache id `id` stands for (as rank 0 submitted it); 0 if unknown.
  int64_t CachedBytes(int32_t id) const {
    std::shared_ptr<const CachedTensor> tensor = cache_.Peek(id);
    return tensor && !tensor->by_rank.empty() ? tensor->by_rank.front().ByteSize() : 0;
  }
  // See ResponseCache::ReserveIdsThrough (coordinator restart).
  void ReserveCacheIdsThrough(int32_t id) { cache_.ReserveIdsThrough(id); }

  bool idle() const { return pending_.empty() && ready_.empty() && groups_.empty(); }
  const NegotiatorOptions& options() const { return options_; }
  // Fusion threshold and cycle time take effect at the next Poll; the cache keeps the
  // capacity it was created with.
  void set_options(const NegotiatorOptions& options) { options_ = options; }

 private:
  struct Partial {
    // By rank; present[r] says which are real. Empty while `cached` stands for them.
    std::vector<TensorRequest> by_rank;
    // Non-null: every rank present sent cache id `cached_id`, which stands for this.
    std::shared_ptr<const CachedTensor> cached;
    int32_t cached_id = 0;
    std::vector<bool> present;
    std::vector<absl::Time> arrival;  // by rank, where present
    int count = 0;
    absl::Time first_arrival;
    std::string group;  // as the first submission said; "" if not grouped
    int group_size = 0;
  };
  using Ready = ReadyTensor;

  // The pending tensor `request` (of `request.rank`) arrives at `now`: marks the rank present
  // (by_rank left to the caller). Errors as Submit's; nothing changes then.
  absl::StatusOr<std::map<std::string, Partial>::iterator> Arrive(const TensorRequest& request,
                                                                  absl::Time now);
  // After Arrive: releases, completes or fails the tensor as the arrival allows.
  void Settle(std::map<std::string, Partial>::iterator it, int rank, bool join, absl::Time now);
  // Erases a pending tensor (every erase goes through here: last_arrival_ stays valid).
  void ErasePending(std::map<std::string, Partial>::iterator it);
  // Fills by_rank (from `cached` while it stands for the ranks).
  void Materialize(Partial& partial) const;
  const TensorRequest& RequestOf(const Partial& partial, int rank) const {
    return partial.cached ? partial.cached->by_rank[rank] : partial.by_rank[rank];
  }
  // Whether `rank` has joined (Context::Join) and not every rank has yet.
  bool Joined(int rank) const;
  // Every rank submitted `partial` or has joined.
  bool Complete(const Partial& partial) const;
  // A join arrived (the join partial is `join`): completes the joins, or releases the tensors
  // that no longer wait for anyone.
  void OnJoin(std::map<std::string, Partial>::iterator join, int rank, absl::Time now);
  void MakeReady(Partial partial, absl::Time now);
  // Queues `ready`, or holds it in its group.
  void Enqueue(const Partial& partial, Ready ready);
  void FailWithDepartedRanks(const std::string& name, absl::Time now);
  bool ShouldHold(absl::Time now, absl::Time* due) const;
  std::vector<Response> Fuse();

  const int size_;
  NegotiatorOptions options_;
  std::map<std::string, Partial> pending_;
  std::map<std::string, Partial>::iterator last_arrival_;  // pending_.end(): none
  std::deque<Ready> ready_;
  GroupTable groups_;
  std::map<int, std::string> departed_;            // rank -> why
  std::vector<ReadyRecord> ready_records_;         // see TakeReadyRecords()
  std::vector<int64_t> allreduce_response_bytes_;  // see TakeAllreduceResponseBytes()
  ResponseCache cache_;
};

}  // namespace troika::coordinator
