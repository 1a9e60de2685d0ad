#pragma once
// ProcessSets: the process sets of one job other than set 0 (the whole job, which the Job's
// own Negotiator serves). Each set has its own Negotiator, created with the set's size, so
// its tensors have their own namespace and order. Requests are routed by
// TensorRequest.process_set and their rank translated from global to the position in the
// set; what the sets report (pending tensors, departed ranks) names global ranks again.
//
// Sets are added and removed by set-0 barriers with reserved names (kAddProcessSetPrefix,
// kRemoveProcessSetPrefix): Record() keeps what each rank passed, and Apply() — called on the
// barrier's response, in stream order — checks that every rank passed the same thing and
// adds or removes the set (docs/protocol.md, Process sets).
//
// Limitations: sets other than 0 have no response cache (cache_capacity 0), no join, and no
// straggler statistics or telemetry; their tensors do count in the job's metrics.
//
// Thread contract: not thread-safe; the owning Job serialises every call.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator {

class ProcessSets {
 public:
  // `size`: ranks in the job. Sets are created with `options` minus the response cache.
  ProcessSets(int size, NegotiatorOptions options);

  // Whether `request` is an AddProcessSet / RemoveProcessSet barrier (set 0, reserved name).
  static bool IsControl(const TensorRequest& request);
  // Remembers what a control request's rank passed, for Apply().
  void Record(const TensorRequest& request);
  // `response` is the set-0 response of a control barrier: if every rank passed the same
  // valid thing, adds the set (response->root: its id) or removes it; else sets
  // response->error. A removed set's unfinished tensors fail; their responses are appended to
  // `out` (before the barrier's own response, which the caller then appends).
  void Apply(Response* response, const std::set<int>& departed, std::vector<Response>* out);

  // Submits `request` (process_set != 0) to its set, translating its rank. A request for an
  // unknown set, from a non-member, or a join, yields an error response for its tensor in
  // `rejected` instead; an error status is a protocol violation.
  absl::Status Submit(TensorRequest request, absl::Time now, std::optional<Response>* rejected);

  // `rank` (global) left for good: it is removed from every set it belongs to.
  void RemoveRank(int rank, const std::string& why);

  // Every set's due responses, tagged with their set. `next_poll`: the earliest time a held
  // queue is due (InfiniteFuture if none). `records` and `allreduce_bytes` receive what the
  // sets' negotiators report for metrics (Negotiator::TakeReadyRecords,
  // TakeAllreduceResponseBytes).
  std::vector<Response> Poll(absl::Time now, absl::Time* next_poll,
                             std::vector<ReadyRecord>* records,
                             std::vector<int64_t>* allreduce_bytes);

  // Every set's pending tensors, named by ProcessSetTensorName, missing ranks global.
  std::vector<PendingTensor> Pending() const;
  bool has_pending() const;
  int count() const { return static_cast<int>(sets_.size()); }
  // The global ranks of set `id`, or nullptr if there is none.
  const std::vector<int>* ranks(int id) const;
  // Every set's ranks by id, and the id the next set gets (the job's state record).
  std::map<int, std::vector<int>> Definitions() const;
  int next_id() const { return next_id_; }
  // A restarted coordinator's job: the sets it had. Call before anything is submitted.
  void Restore(const std::map<int, std::vector<int>>& sets, int next_id);

 private:
  struct Set {
    std::vector<int> ranks;  // global, ascending
    std::unique_ptr<Negotiator> negotiator;
  };

  // Error text if `lists` (rank -> what it passed) disagree or are invalid for an add.
  std::optional<std::string> CheckAdd(const std::map<int, std::vector<int>>& lists) const;
  void Add(Response* response, std::vector<int> ranks, const std::set<int>& departed);
  void Remove(Response* response, int id, std::vector<Response>* out);

  const int size_;
  const NegotiatorOptions options_;
  std::map<int, Set> sets_;
  int next_id_ = 1;
  // Control barrier name -> rank -> what that rank passed.
  std::map<std::string, std::map<int, std::vector<int>>> control_;
};

}  // namespace troika::coordinator
