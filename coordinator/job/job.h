#pragma once
// Job: one training job on the coordinator, isolated from every other job. It keeps its lock
// and hands each call to its parts:
//  - Lifecycle: the job's state (attaching, running, finished, aborted), the transitions and
//    whom each tells, and when the job is done (its owner may drop it);
//  - Roster: nodes, attaches, memberships, departed ranks; Forming: how the job forms;
//  - Sessions: which session owns which rank, numbering, resume after a coordinator restart;
//  - Generations and Succession: an elastic job's next generation, or the incarnation that
//    ranks attaching again form (a fresh Job of the same name, one epoch on), and what each
//    inherits;
//  - MembershipPolicy: what a loss, an exit, a closed session, an attach timeout or a session
//    that never opened means, as a Verdict the job carries out (ApplyLocked; a JobTimer
//    checks the sessions once the job formed);
//  - JobNegotiation: every process set's negotiation and the schedules (a JobTimer flushes
//    it); Inspection: stalls, deadlocks, stragglers, telemetry and metrics;
//  - Recorder: the state record; and the key-value store.
// Responses of every process set go down one stream, in one order.
//
// Thread-safe: every public method locks the job. Created with std::make_shared (timers hold
// weak references).

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/messages.h"
#include "common/scheduler.h"
#include "common/session/session_handler.h"
#include "common/session/session_sink.h"
#include "coordinator/job/forming.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/inspection.h"
#include "coordinator/job/job_info.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/job_timer.h"
#include "coordinator/job/lifecycle.h"
#include "coordinator/job/membership_policy.h"
#include "coordinator/job/recorder.h"
#include "coordinator/job/roster.h"
#include "coordinator/job/sessions.h"
#include "coordinator/job/succession.h"
#include "coordinator/negotiation/job_negotiation.h"
#include "coordinator/state/kv_store.h"
#include "coordinator/state/secret.h"
#include "troika/v1/troika.pb.h"

namespace troika::coordinator {

class Job : public session::SessionHandler, public std::enable_shared_from_this<Job> {
 public:
  using State = Lifecycle::State;
  using AttachCallback = Roster::AttachCallback;
  using NodeBlock = coordinator::NodeBlock;
  using RegisterCallback = Generations::RegisterCallback;

  // `on_done` runs (on the scheduler's thread) once the job becomes done.
  Job(std::string name, int size, JobOptions options, Scheduler& scheduler, Clock& clock,
      std::function<void()> on_done);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& name() const { return name_; }
  // True iff `token` is this job's token. Thread-safe (immutable).
  bool TokenMatches(const std::string& token) const { return token_.Matches(token); }
  int size() const { return size_; }
  int64_t epoch() const { return generations_.epoch(); }
  int min_size() const { return generations_.min_size(); }
  int max_size() const { return generations_.max_size(); }
  KvStore& kv() { return kv_; }
  // The job that serves this one's name now (Succession::Serving), or null.
  std::shared_ptr<Job> successor() const;
  // From now on this job, and the successors it makes, move `lineage` on (JobLineage).
  void Track(const std::shared_ptr<JobLineage>& lineage);

  // Calls `done` with the memberships of `ranks` (all on `host`) once every rank of the job
  // attached (Forming::Wait), or with the refusal; never blocks. Ranks that left (or any, with
  // `again`) may attach to the next incarnation instead (MembershipPolicy::RouteAttach).
  void Attach(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
              AttachCallback done, bool again = false);

  // A block of `nproc` ranks for an agent's node, or a place among the nodes joining at the
  // next commit (Forming::RegisterNode); in the next generation's, once this one ended.
  void RegisterNode(const std::string& host, int nproc, int node_rank, RegisterCallback done,
                    std::function<bool()> cancelled = nullptr, std::string join_id = {});

  // The job's state record (StateStore), and a restarted coordinator's job made as it was:
  // its node blocks and process sets. Restore before anything else happens to the job;
  // INVALID_ARGUMENT if the record does not fit the job.
  v1::JobRecord Record() const;
  absl::Status Restore(const v1::JobRecord& record);

  // SessionHandler. Submit's errors are protocol violations by the peer. CloseSession: the
  // stream's ranks that did not say goodbye were lost, which aborts the job (or ends an
  // elastic job's generation, as a rank's failure does). ResumeSession: Sessions::Resume.
  absl::Status OpenSession(const std::vector<int>& ranks, int64_t epoch,
                           session::SessionSink* sink) override;
  absl::Status ResumeSession(const std::vector<int>& ranks, int64_t epoch,
                             const SessionResume& resume, session::SessionSink* sink) override;
  absl::Status Replay(session::SessionSink* sink, int64_t first_seq,
                      std::vector<Response> responses) override;
  absl::Status Submit(session::SessionSink* sink, std::vector<TensorRequest> requests) override;
  absl::Status Goodbye(session::SessionSink* sink, const std::vector<int>& ranks) override;
  absl::Status ReportExit(session::SessionSink* sink, const RankExit& exit) override;
  // Inspection::UpdateWaits, Inspection::Report.
  absl::Status ReportWaitState(session::SessionSink* sink, const WaitState& state) override;
  absl::Status ReportExec(session::SessionSink* sink, const ExecReport& report) override;
  absl::Status EndSchedule(session::SessionSink* sink, int64_t id,
                           const std::vector<int>& ranks) override;
  absl::Status DeviateSchedule(session::SessionSink* sink, int64_t id,
                               const std::vector<int>& ranks) override;
  void CloseSession(session::SessionSink* sink, const absl::Status& ended) override;
  // Said by the generation before (Succession::LostAfterEnd): `ranks` of this one lost their
  // node before they attached; an elastic generation that attaches goes on without them
  // (MembershipPolicy::LostBeforeAttach).
  void LoseBeforeAttach(const std::vector<int>& ranks, const std::string& reason);
  // The renumbering from generation `epoch` to this one, if this generation followed it: the
  // answer to an agent attaching for the generation just before (Sessions::ChangeFrom).
  std::optional<MembershipChange> ChangeFrom(int64_t epoch) const;

  // An elastic job's node leaves at the next commit (troikarun's host discovery no longer
  // lists `host`): the commit barrier ends the generation, and `host`'s ranks have no place in
  // the next one — every rank has just committed, so nothing is lost. Idempotent until then.
  // FAILED_PRECONDITION for a job that is not elastic or not running, or that would be left
  // below its minimum; NOT_FOUND when no rank of this generation attached from `host`.
  absl::Status Drain(const std::string& host);

  // Sends `reason` to every session; pending and later work fails. Idempotent.
  void Abort(AbortCause cause, const std::string& reason);
  // The coordinator stops but keeps the job for a restarted one (Lifecycle::Detach).
  void Detach(const std::string& reason);

  // Inspection::InspectStalls: a timer calls it while tensors are pending; tests with a fake
  // clock call it by hand.
  void InspectStalls();

  // Writes a Chrome-trace timeline of the job to `path` (JobTelemetry) until StopTimeline.
  // The ranks are told to report their execution phases meanwhile.
  absl::Status StartTimeline(const std::string& path, int64_t max_bytes);
  absl::StatusOr<TimelineInfo> StopTimeline();

  // The job's accumulated metrics (steps, tensors by collective, fusion fill). Thread-safe.
  JobMetricsSnapshot MetricsSnapshot() const { return inspection_.metrics().Snapshot(); }

  // A consistent snapshot of the job for operators (troikactl), taken under the job lock at
  // the clock's now.
  JobInfo Describe() const;

  State state() const;
  bool done() const;
  // Why the job was aborted (without the "job 'x' aborted: " prefix); empty unless aborted.
  std::string abort_reason() const;

 private:
  friend class Succession;  // hands a successor what it inherits (Inherit)

  // Under the lock: runs `then` (returning a Status, or nothing for OK) once `sink`'s session
  // owns every one of `ranks`, else fails naming `what` (Sessions::CheckOwns).
  template <typename F>
  absl::Status Owned(session::SessionSink* sink, const std::vector<int>& ranks, const char* what,
                     F then);
  // Sessions::Resync and Replay's outcome: every session resumed through `resumed.through`.
  void ResumedLocked(const Sessions::Resumed& resumed);
  // Carries out what MembershipPolicy decided.
  void ApplyLocked(Verdict verdict);
  // `rank` left for good (`why`: "has shut down", ...): its tensors fail, key-value waits for
  // what is not set yet fail, and the job finishes once every rank left.
  void DepartLocked(int rank, const std::string& why);
  // The attach of `waiter` timed out (MembershipPolicy::AttachTimedOut).
  void ExpireAttach(uint64_t waiter, absl::Duration timeout);
  // A rank that left this incarnation exited: the next incarnation, if any, is told
  // (RankGone, under its own lock).
  void LeftRankExitedLocked(const RankExit& exit);
  void RankGone(const RankExit& exit);
  // Takes over what the job before this one hands over (Succession::Inherit).
  void Inherit(Succession::Inheritance inheritance);
  // Polls the negotiation and sends what became ready; cuts a generation at a commit.
  void FlushLocked();
  // Whether the job can take a steady-state schedule now: it runs, every rank is in session
  // and none left, no resync, and the autotuner (if any) settled.
  bool CanTakeScheduleLocked() const;

  // Constant after construction.
  const std::string name_;
  const Secret token_;
  const int size_;
  Clock& clock_;
  const absl::Duration session_open_timeout_;
  KvStore kv_;  // thread-safe on its own

  mutable std::mutex mu_;
  // Guarded by mu_. Every process set's negotiation and the schedules; it tells the
  // inspection what became ready (NegotiationObserver).
  JobNegotiation negotiation_;
  JobTimer flush_timer_;  // the negotiation's next deadline
  // The job's parts.
  Roster roster_;
  Sessions sessions_;
  Generations generations_;
  Lifecycle lifecycle_;    // after the parts it tells
  Inspection inspection_;  // after the parts it tells (it sends the sessions their settings)
  Recorder recorder_;      // after the parts it records
  MembershipPolicy policy_;
  Forming forming_;
  Succession succession_;
  // Armed once the job formed: the ranks whose session has not opened by then are lost.
  JobTimer session_timer_;
};

}  // namespace troika::coordinator
