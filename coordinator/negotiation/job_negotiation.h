#pragma once
// JobNegotiation: a job's negotiation as one part — every process set's negotiator (set 0
// with the response cache, ProcessSets) and the steady-state schedules (Schedules) — behind
// the calls a job's sessions make. It takes a session's requests (cache ids, control barriers
// and the schedule's drops handled here), hands back the responses due in the job's one
// order, and tells its observers (NegotiationObserver) what happened: the tensors that became
// ready, the allreduce bytes polled, the responses about to be sent.
//
// The job keeps what is not negotiation's: which session owns which rank (Submit's `check`),
// the ranks that left (Poll's `departed`), when the job can take a schedule
// (MaybePublishSchedule's `job_ready`), and the sending itself (`broadcast`, and the job's
// numbering of responses).
//
// Thread contract: not thread-safe; the owning job serialises every call, under its lock
// (observers and `broadcast` run under it too).

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/negotiation/negotiation_observer.h"
#include "coordinator/negotiation/negotiator.h"
#include "coordinator/negotiation/process_sets.h"
#include "coordinator/negotiation/schedules.h"

namespace troika::coordinator {

class JobNegotiation {
 public:
  // `job`: its name, for the log. `size`: its ranks. `broadcast` sends a message to every
  // session of the job (schedules are announced and revoked through it).
  JobNegotiation(std::string job, int size, const NegotiatorOptions& options,
                 ScheduleOptions schedules, Schedules::Broadcast broadcast);
  JobNegotiation(const JobNegotiation&) = delete;
  JobNegotiation& operator=(const JobNegotiation&) = delete;

  // From now on `observer` (which outlives this) is told what happens, after those added
  // before it (schedule detection first).
  void AddObserver(NegotiationObserver& observer) { observers_.push_back(&observer); }

  // One session's `requests`, in order, arrived at `now`. `check(rank)`: OK if the session
  // may submit for `rank`; its error is returned as is (requests before it stay submitted).
  // A request the schedule in force drops is skipped; ranks sending one cache id in a row
  // (an agent's compacted request) go in together. Ids that ended come back in
  // `misses.misses`, and requests a set rejected for their tensor alone in
  // `misses.responses`, for the session only. Any other error is a protocol violation.
  absl::Status Submit(std::vector<TensorRequest> requests, absl::Time now,
                      absl::FunctionRef<absl::Status(int rank)> check, DownMessage& misses);

  // Tells the observers, at `now`, the tensors of every set that became ready since the last
  // call (tensors become ready only as requests arrive: call after Submit, before polling,
  // so that parameters tuned on them apply to the poll). Set 0 is told even of none: the
  // autotuner ends a sample on a rank's report as well as on tensors.
  void ReportReady(absl::Time now);
  // Every set's responses due at `now`, in the job's one order (ProcessSets::Poll;
  // `departed`: the ranks that left); the observers are told their allreduce bytes.
  // `next_poll`: when a held queue is due (InfiniteFuture if none).
  std::vector<Response> Poll(absl::Time now, const std::set<int>& departed, absl::Time* next_poll);
  // `responses` (from Poll, perhaps cut) are about to be sent at `now`: the observers are told.
  void Sending(const std::vector<Response>& responses, absl::Time now);
  // Set 0's cache ids that ended since the last call; sent with the responses of the same
  // Poll (ranks apply them after those responses).
  std::vector<int32_t> TakeEndedCacheIds() { return sets_.whole_job().TakeEndedCacheIds(); }

  // Publishes a schedule if the detector found one, negotiation is idle (set 0 has nothing
  // pending or queued, no other set anything pending), and `job_ready()` (asked last) says
  // the job can take one now. Call after responses were sent.
  void MaybePublishSchedule(absl::FunctionRef<bool()> job_ready);
  // A rank's progress report in a schedule (Schedules::Progress): the rounds every rank has
  // now reported are told to the observers as set 0's ready tensors (at `now`) and allreduce
  // bytes. Sets `*waiting`: the rank waits for some of the schedule's tensors.
  absl::Status RecordScheduleProgress(int rank, const ScheduleProgress& progress,
                                      absl::Time sent_at, absl::Time now, bool* waiting);
  Schedules& schedules() { return schedules_; }
  const Schedules& schedules() const { return schedules_; }

  // `rank` left for good (`why`: "has shut down", ...): it leaves the schedule, and its
  // tensors in every set fail.
  void RemoveRank(int rank, const std::string& why);

  // Pending tensors of every set (ProcessSets::Pending), and the schedule's that some ranks
  // report waiting for (Schedules::Pending).
  std::vector<PendingTensor> Pending() const;
  // The same without the schedule's: what requests alone say is pending.
  std::vector<PendingTensor> NegotiatedPending() const { return sets_.Pending(); }
  bool has_pending() const { return sets_.has_pending(); }

  // Set 0's options; set_options changes its fusion threshold and cycle time (the autotuner).
  const NegotiatorOptions& options() const { return sets_.whole_job().options(); }
  void set_options(const NegotiatorOptions& options) { sets_.whole_job().set_options(options); }
  CacheStats cache_stats() const { return sets_.whole_job().cache_stats(); }
  // A restarted coordinator's job: ids up to these were handed out by the one before (ranks
  // keep them; they end up as misses, never as another tensor's or schedule's).
  void ReserveIdsThrough(int32_t cache_id, int64_t schedule_id);

  // The process sets (definitions, restore; the job's state record).
  ProcessSets& sets() { return sets_; }
  const ProcessSets& sets() const { return sets_; }

 private:
  void TellReady(int set, const std::vector<ReadyRecord>& records, absl::Time now);
  void TellAllreduceBytes(const std::vector<int64_t>& bytes);

  ProcessSets sets_;
  Schedules schedules_;
  std::vector<NegotiationObserver*> observers_;
};

}  // namespace troika::coordinator
