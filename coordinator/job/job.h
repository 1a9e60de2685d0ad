#pragma once
// Job: one training job on the coordinator, isolated from every other job. It keeps its lock
// and hands each call to its parts: Lifecycle (the job's state, the transitions and whom each
// tells, when the job is done), Roster (nodes, attaches, memberships, departed ranks),
// Sessions (which session owns which rank, numbering, resume), Generations (survivors,
// joining nodes, successors), MembershipPolicy (what a loss, an exit, a closed session or an
// attach timeout means: a Verdict the job carries out), Recorder (the state record),
// JobNegotiation (every process set's negotiation and the schedules; its observers:
// JobMetrics, StragglerMonitor, JobTelemetry), HangDetector (stalls, deadlocks), two JobTimers
// (the flush, the stall checks) and the key-value store. Responses of every process set go
// down one stream, in one order.
//
// Lifecycle (lifecycle.h): kAttaching until every rank attached, then kRunning; kFinished
// once every rank said goodbye; kAborted when a session is lost or Abort() is called (every
// session is sent the reason). A job is done — and its owner may drop it — once it is
// finished or aborted and no session or attach is open, or when every attach timed out.
//
// Successors (generations.h, membership_policy.h): an elastic job's next generation, or, for
// a job that is not elastic, its next incarnation: ranks that shut down (goodbye) and attach
// again form the job anew, a fresh Job of the same name, size, token and node blocks, one
// epoch on (init → shutdown → init, as with Horovod's Gloo controller).
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
#include "coordinator/inspection/hang_detector.h"
#include "coordinator/inspection/job_metrics.h"
#include "coordinator/inspection/job_telemetry.h"
#include "coordinator/inspection/straggler_monitor.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/job_info.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/job_timer.h"
#include "coordinator/job/lifecycle.h"
#include "coordinator/job/membership_policy.h"
#include "coordinator/job/recorder.h"
#include "coordinator/job/roster.h"
#include "coordinator/job/sessions.h"
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
  // The generation that replaced this one once an elastic job lost ranks, or the incarnation
  // formed by ranks attaching again (JobOptions); null before, and while that incarnation
  // still attaches and this one runs (this one's ranks still use the job's key-value store).
  // The job's owner serves the successor under the job's name.
  std::shared_ptr<Job> successor() const;
  // From now on this job, and the successors it makes, move `lineage` on (JobLineage).
  void Track(const std::shared_ptr<JobLineage>& lineage);

  // Calls `done` with the memberships of `ranks` (all on `host`) once every rank of the job
  // attached; or, when the first waiting attach times out, fails every waiting attach with
  // DEADLINE_EXCEEDED naming the missing ranks. Never blocks. In a job that runs or finished
  // and is not elastic, ranks that said goodbye (or any, with `again`) attach to the job's
  // next incarnation instead, made by the first of them (MembershipPolicy::RouteAttach).
  void Attach(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
              AttachCallback done, bool again = false);

  // Reserves `nproc` consecutive ranks for an agent's node: block `node_rank`, or the lowest
  // free block if -1. The same host asking again for its block gets it again (a restarted
  // agent). An elastic job that has no block left, or runs, holds the node as joining
  // instead, up to its maximum: `done` comes when the job's next commit admits it (its block
  // in the next generation; docs/elastic.md), or with the error that ended the job first. A
  // joining node whose `cancelled` (may be null) turns true is not admitted; one with a
  // `join_id` is named in the MembershipChange that admits it. `done` may run under the job's
  // lock (it must only finish an RPC), exactly once.
  void RegisterNode(const std::string& host, int nproc, int node_rank, RegisterCallback done,
                    std::function<bool()> cancelled = nullptr, std::string join_id = {});

  // The job's state record (StateStore), and a restarted coordinator's job made as it was:
  // its node blocks and process sets. Restore before anything else happens to the job;
  // INVALID_ARGUMENT if the record does not fit the job.
  v1::JobRecord Record() const;
  absl::Status Restore(const v1::JobRecord& record);

  // SessionHandler. Submit's errors are protocol violations by the peer. CloseSession: the
  // stream's ranks that did not say goodbye were lost, which aborts the job (or ends an
  // elastic job's generation, as a rank's failure does).
  absl::Status OpenSession(const std::vector<int>& ranks, int64_t epoch,
                           session::SessionSink* sink) override;
  // Coordinator restart (docs/protocol.md): every session of a restarted job resumes. Once
  // every rank's session did, the sessions that missed responses another one received get
  // them (asked of that one with a replay request), then every session is told `resumed` and
  // sends again what got no response. Until then nothing is negotiated. A job whose sessions
  // are new takes no resumed one, and the other way round (FAILED_PRECONDITION).
  absl::Status ResumeSession(const std::vector<int>& ranks, int64_t epoch,
                             const SessionResume& resume, session::SessionSink* sink) override;
  absl::Status Replay(session::SessionSink* sink, int64_t first_seq,
                      std::vector<Response> responses) override;
  absl::Status Submit(session::SessionSink* sink, std::vector<TensorRequest> requests) override;
  absl::Status Goodbye(session::SessionSink* sink, const std::vector<int>& ranks) override;
  absl::Status ReportExit(session::SessionSink* sink, const RankExit& exit) override;
  // Records what the rank waits for and aborts the job if that completes a deadlock.
  absl::Status ReportWaitState(session::SessionSink* sink, const WaitState& state) override;
  // Feeds the timeline and the autotuner.
  absl::Status ReportExec(session::SessionSink* sink, const ExecReport& report) override;
  // The session's `ranks` stopped executing schedule `id`; their requests are negotiated again.
  absl::Status EndSchedule(session::SessionSink* sink, int64_t id,
                           const std::vector<int>& ranks) override;
  // The session's `ranks` deviated from schedule `id`: tells every session (once per schedule).
  absl::Status DeviateSchedule(session::SessionSink* sink, int64_t id,
                               const std::vector<int>& ranks) override;
  void CloseSession(session::SessionSink* sink, const absl::Status& ended) override;

  // Sends `reason` to every session; pending and later work fails. Idempotent.
  void Abort(AbortCause cause, const std::string& reason);
  // The coordinator stops but keeps its jobs for a restarted one (--state_dir): every session
  // ends with UNAVAILABLE `reason` (agents reconnect and resume), waiting attaches and
  // key-value waits fail with it, and the job is never done (its record stays).
  void Detach(const std::string& reason);

  // Inspects pending tensors for stalls at the clock's now: logs newly stalled tensors, and
  // aborts the job when one is past the stall shutdown time. A scheduler timer calls this
  // while tensors are pending; tests with a fake clock call it by hand.
  void InspectStalls();

  // Writes a Chrome-trace timeline of the job to `path` (JobTelemetry) until StopTimeline.
  // The ranks are told to report their execution phases meanwhile.
  absl::Status StartTimeline(const std::string& path, int64_t max_bytes);
  absl::StatusOr<TimelineInfo> StopTimeline();

  // The job's accumulated metrics (steps, tensors by collective, fusion fill). Thread-safe.
  JobMetricsSnapshot MetricsSnapshot() const { return metrics_.Snapshot(); }

  // Per-rank lateness of the tensors negotiated so far, for display.
  coordinator::StragglerSnapshot StragglerSnapshot() const;

  // A consistent snapshot of the job for operators (troikactl), taken under the job lock at
  // the clock's now.
  JobInfo Describe() const;

  State state() const;
  bool done() const;
  // Why the job was aborted (without the "job 'x' aborted: " prefix); empty unless aborted.
  std::string abort_reason() const;

 private:
  friend class Generations;  // hands a successor the joining nodes (AdoptJoiners)
  // Whether a session may bind at `epoch` (the job runs, at that epoch, not detached).
  absl::Status AcceptsSessionLocked(int64_t epoch) const;
  // Sessions::Resync and Replay's outcome: every session resumed through `resumed.through`.
  void ResumedLocked(const Sessions::Resumed& resumed);
  // Carries out what MembershipPolicy decided.
  void ApplyLocked(Verdict verdict);
  // `rank` left for good (`why`: "has shut down", ...): its tensors fail, key-value waits for
  // what is not set yet fail, and the job finishes once every rank left.
  void DepartLocked(int rank, const std::string& why);
  // The attach of `waiter` timed out (MembershipPolicy::AttachTimedOut).
  void ExpireAttach(uint64_t waiter, absl::Duration timeout);
  // Lifecycle::Abort; a next incarnation forming ends with this one.
  void AbortLocked(AbortCause cause, const std::string& reason,
                   std::optional<RankExit> exit = std::nullopt, bool finished_too = false);
  // Successors (Generations makes them). Ends this generation for `change` once its successor
  // is made; the joining nodes and the timeline go on there. At a commit, the joining nodes'
  // ranks come after every other rank (AdmitJoinersLocked).
  void EndGenerationLocked(MembershipChange change, std::optional<AbortCause> cause,
                           const std::string& reason, std::optional<RankExit> exit);
  void AdmitJoinersLocked();
  // The next incarnation, made on first use with this one's node blocks, timeline and the
  // exits of ranks that left; told when another of them exits (RankGone, under its own lock).
  std::shared_ptr<Job> NextIncarnationLocked();
  void LeftRankExitedLocked(const RankExit& exit);
  void RankGone(const RankExit& exit);
  // What a successor takes over from the job before it (each locks the successor).
  void AdoptJoiners(std::vector<Generations::Joiner> joiners);
  void AdoptTimeline(std::unique_ptr<Timeline> timeline);
  void AdoptIncarnation(std::map<int, std::string> nodes, std::unique_ptr<Timeline> timeline,
                        const std::map<int, RankExit>& left_exits);
  // Polls the negotiation and sends what became ready; cuts a generation at a commit.
  void FlushLocked();
  // Whether the job can take a steady-state schedule now: it runs, every rank is in session
  // and none left, no resync, and the autotuner (if any) settled.
  bool CanTakeScheduleLocked() const;
  // Inspection's verdicts: a stall past the shutdown time, or every live rank blocked on
  // pending tensors (a deadlock), aborts the job.
  void InspectStallsLocked();
  void CheckDeadlockLocked();
  // Sends the ranks what they must do now (ClientSettings: the telemetry's reports and the
  // negotiator's cycle time as the send cycle) if that changed.
  void SyncSettingsLocked();

  // Constant after construction.
  const std::string name_;
  const Secret token_;
  const int size_;
  Clock& clock_;
  KvStore kv_;          // thread-safe on its own
  JobMetrics metrics_;  // thread-safe on its own

  mutable std::mutex mu_;
  // Guarded by mu_. Every process set's negotiation and the schedules; it tells the
  // stragglers, the metrics and the telemetry what became ready (NegotiationObserver).
  JobNegotiation negotiation_;
  HangDetector hangs_;  // stalls and deadlocks, over what negotiation_ has pending
  StragglerMonitor stragglers_;
  JobTelemetry telemetry_;
  JobTimer flush_timer_;  // the negotiation's next deadline
  JobTimer stall_timer_;  // the next stall inspection, while tensors are pending
  // The job's parts (after the negotiator and the telemetry: the sessions start with the
  // settings those give).
  Roster roster_;
  Sessions sessions_;
  Generations generations_;
  Lifecycle lifecycle_;  // after the parts it tells
  Recorder recorder_;    // after the parts it records
  MembershipPolicy policy_;
};

}  // namespace troika::coordinator
