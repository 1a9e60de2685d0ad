#pragma once
// ProcessSets: every process set of one job, set 0 (the whole job) included, each negotiated
// on its own: each set has its own Negotiator, created with the set's size, so its tensors
// have their own namespace and order. Set 0 holds every rank and has the response cache (its
// requests may be cache ids, SubmitCached); the others are added while the job runs and have
// none. Requests are routed by TensorRequest.process_set and their rank translated from
// global to the position in the set; what the sets report (pending tensors, departed ranks)
// names global ranks again.
//
// Sets are added and removed by set-0 barriers with reserved names (kAddProcessSetPrefix,
// kRemoveProcessSetPrefix): Submit records what each rank passed (Record), and Poll applies
// the barrier's response in stream order (Apply): it checks that every rank passed the same
// thing and adds or removes the set (docs/protocol.md, Process sets).
//
// Limitations: sets other than 0 have no response cache (cache_capacity 0) and no join.
//
// Thread contract: not thread-safe; the owning job serialises every call.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator {

class ProcessSets {
 public:
  // `size`: ranks in the job. Set 0 is created with `options`, the others with `options`
  // minus the response cache.
  ProcessSets(int size, NegotiatorOptions options);
  ProcessSets(const ProcessSets&) = delete;
  ProcessSets& operator=(const ProcessSets&) = delete;

  // Whether `request` is an AddProcessSet / RemoveProcessSet barrier (set 0, reserved name).
  static bool IsControl(const TensorRequest& request);
  // Remembers what a control request's rank passed, for Apply().
  void Record(const TensorRequest& request);
  // `response` is the set-0 response of a control barrier: if every rank passed the same
  // valid thing, adds the set (response->root: its id) or removes it; else sets
  // response->error. A removed set's unfinished tensors fail; their responses are appended to
  // `out` (before the barrier's own response, which the caller then appends).
  void Apply(Response* response, const std::set<int>& departed, std::vector<Response>* out);

  // Submits `request` to its set, translating its rank; a control barrier is recorded first.
  // A request for an unknown set, from a non-member, or a join outside set 0, yields an error
  // response for its tensor in `rejected` instead; an error status is a protocol violation
  // (a cache id, or process set ranks, outside set 0; anything Negotiator::Submit refuses).
  absl::Status Submit(TensorRequest request, absl::Time now, std::optional<Response>* rejected);
  // Set 0: `ranks` sent cache id `id` alone (Negotiator::SubmitCached).
  absl::StatusOr<bool> SubmitCached(const std::vector<int>& ranks, int32_t id, absl::Time now) {
    return whole_job().SubmitCached(ranks, id, now);
  }

  // `rank` (global) left for good: it is removed from every set it belongs to.
  void RemoveRank(int rank, const std::string& why);

  // Every set's due responses in the job's one order, tagged with their set: the other sets'
  // first, then set 0's, each control barrier among them applied (Apply, `departed`: the
  // ranks that left) — so a set removed by a set-0 response has had its last responses.
  // `next_poll`: the earliest time a held queue is due (InfiniteFuture if none).
  // `allreduce_bytes` receives the bytes of every allreduce response polled
  // (Negotiator::TakeAllreduceResponseBytes), the other sets' first.
  std::vector<Response> Poll(absl::Time now, const std::set<int>& departed, absl::Time* next_poll,
                             std::vector<int64_t>* allreduce_bytes);
  // Every set's tensors that became ready since the last call (Negotiator::TakeReadyRecords),
  // by set; sets with none are left out.
  std::map<int, std::vector<ReadyRecord>> TakeReadyRecords();

  // Every set's pending tensors, set 0's first; the other sets' named by
  // ProcessSetTensorName; missing ranks global.
  std::vector<PendingTensor> Pending() const;
  bool has_pending() const;
  // Set 0's negotiator: the whole job's, with the response cache.
  Negotiator& whole_job() { return *sets_.begin()->second.negotiator; }
  const Negotiator& whole_job() const { return *sets_.begin()->second.negotiator; }
  // The sets other than 0.
  int count() const { return static_cast<int>(sets_.size()) - 1; }
  // The global ranks of set `id`, or nullptr if there is none.
  const std::vector<int>* ranks(int id) const;
  // Every set's ranks by id (set 0 left out), and the id the next set gets (the job's state
  // record).
  std::map<int, std::vector<int>> Definitions() const;
  int next_id() const { return next_id_; }
  // A restarted coordinator's job: the sets it had (ids above 0). Call before anything is
  // submitted.
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
  const NegotiatorOptions options_;  // of the sets other than 0
  std::map<int, Set> sets_;          // by id; set 0 first, always there
  int next_id_ = 1;
  // Control barrier name -> rank -> what that rank passed.
  std::map<std::string, std::map<int, std::vector<int>>> control_;
};

}  // namespace troika::coordinator
