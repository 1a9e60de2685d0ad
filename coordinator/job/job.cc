// Job: its lock, and the hand-off of each call to its parts. What a change of membership
// means is MembershipPolicy's to decide (carried out in ApplyLocked); the transitions, and
// whom each one tells, are Lifecycle's; successors are made by Generations.

#include "coordinator/job/job.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {

Job::Job(std::string name, int size, JobOptions options, Scheduler& scheduler, Clock& clock,
         std::function<void()> on_done)
    : name_(std::move(name)),
      token_(options.token),
      size_(size),
      clock_(clock),
      kv_(scheduler),
      negotiation_(
          name_, size, options.negotiator,
          {.enabled = options.schedules, .buckets = options.schedule_buckets},
          [this](std::shared_ptr<const DownMessage> m) { sessions_.Broadcast(std::move(m)); }),
      hangs_(negotiation_, options.stall, options.deadlock_detection),
      stragglers_(name_, size, options.straggler_margin),
      telemetry_(name_, size, std::move(options.autotune), options.negotiator,
                 [this](const TuningParams& tuned) {
                   NegotiatorOptions options = negotiation_.options();
                   options.fusion_threshold_bytes = tuned.fusion_threshold_bytes;
                   options.cycle_time = tuned.cycle_time;
                   negotiation_.set_options(options);
                   SyncSettingsLocked();  // tuning may have ended
                 }),
      flush_timer_(
          scheduler, clock, mu_, JobTimer::Rearm::kKeepEarlier, [this] { return weak_from_this(); },
          [this] { FlushLocked(); }),
      stall_timer_(
          scheduler, clock, mu_, JobTimer::Rearm::kReplace, [this] { return weak_from_this(); },
          [this] {
            InspectStallsLocked();
            lifecycle_.MaybeDone();
          }),
      roster_(name_, size, options.epoch, scheduler),
      sessions_(name_, size, telemetry_.SettingsFor(negotiation_.options())),
      generations_(size, options, clock.Now()),
      lifecycle_(name_, roster_, sessions_, generations_, kv_, scheduler,
                 std::move(options.on_abort), std::move(on_done)),
      recorder_(name_, size, token_, roster_, negotiation_.sets(), generations_,
                std::move(options.on_record)),
      policy_(name_, size, lifecycle_, roster_, sessions_, generations_) {
  negotiation_.AddObserver(stragglers_);  // set 0's tensors
  negotiation_.AddObserver(metrics_);     // every set's
  negotiation_.AddObserver(telemetry_);   // set 0's; tunes negotiation_
}

Job::~Job() {
  std::lock_guard<std::mutex> lock(mu_);
  lifecycle_.FailWaiting(absl::CancelledError(absl::StrCat("job '", name_, "' was removed")));
}

// --- Forming: attaches and nodes ---

void Job::Attach(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
                 AttachCallback done, bool again) {
  std::unique_lock<std::mutex> lock(mu_);
  using Route = MembershipPolicy::AttachRoute::Kind;
  const MembershipPolicy::AttachRoute route = policy_.RouteAttach(ranks, again);
  if (route.kind == Route::kNextIncarnation) {
    std::shared_ptr<Job> next = NextIncarnationLocked();
    lock.unlock();
    return next->Attach(ranks, host, timeout, std::move(done), again);
  }
  if (route.kind != Route::kWait) {
    absl::StatusOr<std::vector<Membership>> answer =
        route.kind == Route::kAnswer ? absl::StatusOr<std::vector<Membership>>(roster_.Of(ranks))
                                     : route.refusal;
    lock.unlock();
    return done(std::move(answer));
  }
  lifecycle_.Reopen();  // a job that looked abandoned has ranks again
  std::weak_ptr<Job> weak = weak_from_this();
  // Callbacks run under the lock: they only finish RPCs and never call back into the job.
  roster_.Wait(ranks, host, timeout, std::move(done), [weak, timeout](uint64_t id) {
    if (auto job = weak.lock()) job->ExpireAttach(id, timeout);
  });
  if (!roster_.complete()) return;
  lifecycle_.Run();
  // A job formed anew takes over its record (--state_dir) once it runs: a restarted
  // coordinator resumes the incarnation in force.
  if (generations_.epoch() > 1 && min_size() == 0) recorder_.Save();
  TROIKA_LOG(INFO) << "job '" << name_ << "': all " << size_ << " ranks attached";
  roster_.Complete();
}

void Job::ExpireAttach(uint64_t id, absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!roster_.waiting(id) || lifecycle_.state() != State::kAttaching) return;
  Verdict verdict = policy_.AttachTimedOut(timeout);
  roster_.ClearHosts();
  ApplyLocked(std::move(verdict));
  lifecycle_.MaybeDone();
}

void Job::RegisterNode(const std::string& host, int nproc, int node_rank, RegisterCallback done,
                       std::function<bool()> cancelled, std::string join_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = policy_.CheckNode(nproc); !s.ok()) return done(s);
  if (policy_.TakesBlocks()) {
    bool added = false;
    absl::StatusOr<NodeBlock> block = roster_.Reserve(host, nproc, node_rank, &added);
    if (added) recorder_.Save();
    // An elastic job's first generation out of blocks holds the node as joining instead.
    if (min_size() == 0 || !absl::IsResourceExhausted(block.status())) {
      return done(std::move(block));
    }
  }
  if (absl::Status s = policy_.CheckJoin(nproc, generations_.JoiningRanks()); !s.ok()) {
    return done(s);
  }
  TROIKA_LOG(INFO) << "job '" << name_ << "': " << nproc << (nproc == 1 ? " rank" : " ranks")
                   << " on " << host << " wait to join at the next commit";
  generations_.Join({host, nproc, std::move(done), std::move(cancelled), std::move(join_id)});
}

// --- Sessions ---

absl::Status Job::AcceptsSessionLocked(int64_t epoch) const {
  if (absl::Status s = lifecycle_.CheckRunning("no session can open"); !s.ok()) return s;
  if (epoch != generations_.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", name_, "' is at epoch ", generations_.epoch(), ", the session asked for ", epoch));
  }
  return absl::OkStatus();
}

absl::Status Job::OpenSession(const std::vector<int>& ranks, int64_t epoch,
                              session::SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CanOpen(); !s.ok()) return s;
  if (absl::Status s = AcceptsSessionLocked(epoch); !s.ok()) return s;
  return sessions_.Open(ranks, sink, roster_.departed());
}

absl::Status Job::ResumeSession(const std::vector<int>& ranks, int64_t epoch,
                                const SessionResume& resume, session::SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CanResume(resume); !s.ok()) return s;
  if (absl::Status s = AcceptsSessionLocked(epoch); !s.ok()) return s;
  if (absl::Status s = sessions_.Resume(ranks, resume, sink, roster_.departed()); !s.ok()) {
    return s;
  }
  if (std::optional<Sessions::Resumed> resumed = sessions_.Resync()) ResumedLocked(*resumed);
  return absl::OkStatus();
}

absl::Status Job::Replay(session::SessionSink* sink, int64_t first_seq,
                         std::vector<Response> responses) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sessions_.AwaitsReplay(sink)) {
    return absl::InvalidArgumentError("a session sent a replay no one asked it for");
  }
  if (!lifecycle_.running()) return absl::OkStatus();
  absl::StatusOr<Sessions::Resumed> resumed = sessions_.Replay(first_seq, responses);
  if (!resumed.ok()) {
    AbortLocked(AbortCause::kConnectionLost, std::string(resumed.status().message()));
    return absl::OkStatus();
  }
  ResumedLocked(*resumed);
  return absl::OkStatus();
}

void Job::ResumedLocked(const Sessions::Resumed& resumed) {
  // Ranks keep the ids the old coordinator gave them; they end up as misses, never as
  // another tensor's id. Likewise schedule ids: ranks may still run the old coordinator's
  // schedule, and what they say of it (ended, progress) must not be taken for a new one's.
  negotiation_.ReserveIdsThrough(resumed.max_cache_id, resumed.max_schedule_id);
}

absl::Status Job::Submit(session::SessionSink* sink, std::vector<TensorRequest> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lifecycle_.state() == State::kAborted) return absl::OkStatus();  // the session was told why
  if (sessions_.resyncing()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", name_, "' is resuming after a coordinator restart: requests wait for 'resumed'"));
  }
  absl::Time now = clock_.Now();
  auto owned = [&](int rank) {  // the message only on failure: no vector per request
    return sessions_.Owns(sink, rank) ? absl::OkStatus()
                                      : sessions_.CheckOwns(sink, {rank}, "a request");
  };
  auto misses = std::make_shared<DownMessage>();
  if (absl::Status s = negotiation_.Submit(std::move(requests), now, owned, *misses); !s.ok()) {
    return s;
  }
  if (!misses->misses.empty() || !misses->responses.empty()) sink->Send(std::move(misses));
  negotiation_.ReportReady(clock_.Now());
  FlushLocked();
  CheckDeadlockLocked();
  if (lifecycle_.state() == State::kAborted) return absl::OkStatus();
  // A tensor that became pending now can be reported no sooner than this; the timer re-arms
  // itself from the inspector's NextCheck, so one armed timer covers every pending tensor.
  if (!stall_timer_.armed()) stall_timer_.Arm(hangs_.FirstCheck(now));
  return absl::OkStatus();
}

absl::Status Job::Goodbye(session::SessionSink* sink, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, ranks, "a goodbye"); !s.ok()) return s;
  for (int r : ranks) DepartLocked(r, "has shut down");
  FlushLocked();
  CheckDeadlockLocked();
  return absl::OkStatus();
}

absl::Status Job::ReportExit(session::SessionSink* sink, const RankExit& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, {exit.rank}, "an exit report"); !s.ok()) {
    return s;
  }
  ApplyLocked(policy_.Exit(exit));
  return absl::OkStatus();
}

absl::Status Job::ReportWaitState(session::SessionSink* sink, const WaitState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, {state.rank}, "a wait state"); !s.ok()) {
    return s;
  }
  if (!lifecycle_.running() || roster_.departed(state.rank)) return absl::OkStatus();
  hangs_.UpdateWaits(state.rank, state.waiting_for);
  CheckDeadlockLocked();
  return absl::OkStatus();
}

absl::Status Job::ReportExec(session::SessionSink* sink, const ExecReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, {report.rank}, "an execution report"); !s.ok()) {
    return s;
  }
  auto invalid = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(
        absl::StrCat("execution report of rank ", report.rank, ": ", s.message()));
  };
  if (absl::Status s = metrics_.OnSteps(report.steps); !s.ok()) return invalid(s);
  telemetry_.OnReport(report, clock_.Now());
  if (!report.schedule) return absl::OkStatus();
  bool waiting = false;
  if (absl::Status s = negotiation_.RecordScheduleProgress(
          report.rank, *report.schedule, report.sent_at + telemetry_.ClockOffset(report.rank),
          clock_.Now(), &waiting);
      !s.ok()) {
    return invalid(s);
  }
  if (waiting && !stall_timer_.armed()) stall_timer_.Arm(hangs_.NextCheck());
  return absl::OkStatus();
}

absl::Status Job::EndSchedule(session::SessionSink* sink, int64_t id,
                              const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, ranks, "a schedule's end"); !s.ok()) return s;
  negotiation_.schedules().End(id, ranks);
  return absl::OkStatus();
}

absl::Status Job::DeviateSchedule(session::SessionSink* sink, int64_t id,
                                  const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, ranks, "a schedule deviation"); !s.ok()) {
    return s;
  }
  negotiation_.schedules().Deviate(id, ranks);
  return absl::OkStatus();
}

void Job::CloseSession(session::SessionSink* sink, const absl::Status& ended) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyLocked(policy_.SessionClosed(sessions_.Close(sink), ended));
  lifecycle_.MaybeDone();
}

// --- Membership changes: MembershipPolicy's verdicts ---

void Job::ApplyLocked(Verdict verdict) {
  switch (verdict.kind) {
    case Verdict::Kind::kNone:
      return;
    case Verdict::Kind::kDepart:
      DepartLocked(verdict.rank, verdict.reason);
      FlushLocked();
      return CheckDeadlockLocked();
    case Verdict::Kind::kAbort:
      return AbortLocked(verdict.cause, verdict.reason, std::move(verdict.exit),
                         verdict.finished_too);
    case Verdict::Kind::kEndGeneration:
      return EndGenerationLocked(std::move(verdict.change), verdict.cause, verdict.reason,
                                 std::move(verdict.exit));
    case Verdict::Kind::kFailAttaches:
      TROIKA_LOG(WARNING) << verdict.reason;
      return roster_.FailWaiters(absl::DeadlineExceededError(verdict.reason));
    case Verdict::Kind::kLeftRankExited:
      return LeftRankExitedLocked(*verdict.exit);
  }
}

void Job::DepartLocked(int rank, const std::string& why) {
  if (!roster_.Depart(rank)) return;
  negotiation_.RemoveRank(rank, why);
  hangs_.Forget(rank);
  // A rank connecting a data plane (Init, AddProcessSet) waits for every member's address:
  // whatever is not set yet never will be.
  kv_.Close(absl::FailedPreconditionError(
      absl::StrCat("rank ", rank, " ", why, "; it will not connect to the other ranks")));
  lifecycle_.FinishIfAllDeparted();
}

void Job::Abort(AbortCause cause, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(cause, reason);
  lifecycle_.MaybeDone();
}

void Job::AbortLocked(AbortCause cause, const std::string& reason, std::optional<RankExit> exit,
                      bool finished_too) {
  if (!lifecycle_.Abort(cause, reason, std::move(exit), finished_too)) return;
  // A next incarnation forming (ranks attaching again) ends with this one. (An elastic job's
  // successor begins as its generation ends, never by an abort.)
  if (generations_.forms_again() && generations_.successor()) {
    generations_.successor()->Abort(cause, reason);
  }
}

void Job::Detach(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  lifecycle_.Detach(reason);
}

// --- Successors: generations (elastic) and incarnations (formed anew) ---

void Job::EndGenerationLocked(MembershipChange change, std::optional<AbortCause> cause,
                              const std::string& reason, std::optional<RankExit> exit) {
  // The generation ends as an abort does (every session told, attaches and key-value waits
  // failed), but the job goes on: the owner serves the successor under its name from now on.
  std::shared_ptr<Job> successor =
      generations_.NextGenerationOf(shared_from_this(), change, cause, reason);
  const int size = change.size;
  lifecycle_.EndGeneration(std::move(change), reason, std::move(exit));
  if (std::unique_ptr<Timeline> timeline = telemetry_.TakeTimeline()) {
    timeline->MembershipChange(clock_.Now(), lifecycle_.abort_reason(), size);
    successor->AdoptTimeline(std::move(timeline));
  }
}

void Job::AdmitJoinersLocked() {
  Generations::Admission admission = generations_.Admit(roster_.departed());
  const int size = admission.change.size;
  const int64_t epoch = admission.change.epoch;
  EndGenerationLocked(std::move(admission.change), std::nullopt, admission.reason, std::nullopt);
  for (size_t i = 0; i < admission.joiners.size(); ++i) {
    admission.joiners[i].done(NodeBlock{admission.first_ranks[i], -1, size, epoch});
  }
}

std::shared_ptr<Job> Job::NextIncarnationLocked() {
  bool made = false;
  std::shared_ptr<Job> next = generations_.NextIncarnationOf(shared_from_this(), &made);
  if (!made) return next;
  TROIKA_LOG(INFO) << "job '" << name_ << "': ranks attach again; it forms anew (epoch "
                   << generations_.epoch() + 1 << ")";
  // Lock order: an incarnation, then its successor (which never calls back).
  next->AdoptIncarnation(roster_.nodes(), telemetry_.TakeTimeline(), generations_.left_exits());
  return next;
}

void Job::LeftRankExitedLocked(const RankExit& exit) {
  generations_.LeftRankExited(exit);
  const std::shared_ptr<Job> next = generations_.successor();
  // The next incarnation failed already (another rank that left will not attach again): that
  // is the cause, which its ranks were told; this rank's exit followed.
  if (next && next->state() == State::kAborted) return;
  ApplyLocked(policy_.LeftRankExited(exit));
  if (next) next->RankGone(exit);  // one made later learns it when it is made
}

void Job::RankGone(const RankExit& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyLocked(policy_.RankGone(exit));
  lifecycle_.MaybeDone();
}

void Job::AdoptJoiners(std::vector<Generations::Joiner> joiners) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Generations::Joiner& joiner : joiners) generations_.Join(std::move(joiner));
}

void Job::AdoptTimeline(std::unique_ptr<Timeline> timeline) {
  std::lock_guard<std::mutex> lock(mu_);
  telemetry_.AdoptTimeline(std::move(timeline));
  SyncSettingsLocked();  // the ranks report their phases
}

void Job::AdoptIncarnation(std::map<int, std::string> nodes, std::unique_ptr<Timeline> timeline,
                           const std::map<int, RankExit>& left_exits) {
  std::lock_guard<std::mutex> lock(mu_);
  roster_.AddNodes(nodes);  // a restarted agent gets its block back (saved as it runs)
  if (timeline) {
    telemetry_.AdoptTimeline(std::move(timeline));
    SyncSettingsLocked();
  }
  for (const auto& [rank, exit] : left_exits) ApplyLocked(policy_.RankGone(exit));
}

void Job::Track(const std::shared_ptr<JobLineage>& lineage) {
  std::lock_guard<std::mutex> lock(mu_);
  generations_.Track(lineage);
}

std::shared_ptr<Job> Job::successor() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A next incarnation still attaching while this one runs (some ranks have not shut down
  // yet) does not serve the job's name yet: the ranks that run still use this one's
  // key-value store. Attaches reach it through this one (Attach). Lock order: an
  // incarnation, then its successor.
  const std::shared_ptr<Job>& successor = generations_.successor();
  if (successor && lifecycle_.running() && successor->state() == State::kAttaching) {
    return nullptr;
  }
  return successor;
}

// --- Negotiation ---

void Job::FlushLocked() {
  const absl::Time now = clock_.Now();
  absl::Time next;
  std::vector<Response> responses = negotiation_.Poll(now, roster_.departed(), &next);
  recorder_.SaveIfSetsChanged();
  const bool admits = lifecycle_.running() && !sessions_.resyncing() && !lifecycle_.detached();
  const bool admit = admits && generations_.CutAtCommit(responses);
  if (!responses.empty()) {
    negotiation_.Sending(responses, now);
    auto down = std::make_shared<DownMessage>();
    down->responses = std::move(responses);
    // Every id ends while making some tensor ready, so it goes with that tensor's response.
    down->evicted_cache_ids = negotiation_.TakeEndedCacheIds();
    sessions_.BroadcastResponses(std::move(down));
    generations_.Sending(now);
    if (!admit) negotiation_.MaybePublishSchedule([this] { return CanTakeScheduleLocked(); });
  }
  if (admit) return AdmitJoinersLocked();
  flush_timer_.Arm(next);
}

bool Job::CanTakeScheduleLocked() const {
  if (!lifecycle_.running() || sessions_.resyncing() || !roster_.departed().empty()) {
    return false;
  }
  // The autotuner changes fusion while it samples: schedule what it settled on.
  const AutotuneInfo tuning = telemetry_.autotune_info();
  return (!tuning.enabled || tuning.done) && sessions_.all_connected();
}

// --- Inspection ---

void Job::InspectStalls() {
  std::lock_guard<std::mutex> lock(mu_);
  InspectStallsLocked();
  lifecycle_.MaybeDone();
}

void Job::InspectStallsLocked() {
  if (!lifecycle_.running()) return;
  const HangDetector::Stalls stalls = hangs_.InspectStalls(clock_.Now());
  if (stalls.abort) return AbortLocked(AbortCause::kStall, *stalls.abort);
  if (stalls.warning) TROIKA_LOG(WARNING) << "job '" << name_ << "': " << *stalls.warning;
  // A timer that finds nothing pending does not re-arm, so an idle job wakes at most once more.
  stall_timer_.Arm(stalls.next_check);
}

void Job::CheckDeadlockLocked() {
  if (!lifecycle_.running()) return;
  if (std::optional<std::string> deadlock = hangs_.Deadlock(roster_.departed(), size_)) {
    AbortLocked(AbortCause::kDeadlock, *deadlock);
  }
}

absl::Status Job::StartTimeline(const std::string& path, int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = lifecycle_.CheckNotOver(""); !s.ok()) return s;
  if (absl::Status s = telemetry_.StartTimeline(path, max_bytes, clock_.Now()); !s.ok()) return s;
  TROIKA_LOG(INFO) << "job '" << name_ << "': writing a timeline to " << path;
  SyncSettingsLocked();
  return absl::OkStatus();
}

absl::StatusOr<TimelineInfo> Job::StopTimeline() {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<TimelineInfo> info = telemetry_.StopTimeline();
  SyncSettingsLocked();
  return info;
}

void Job::SyncSettingsLocked() {
  sessions_.UpdateSettings(telemetry_.SettingsFor(negotiation_.options()));
}

StragglerSnapshot Job::StragglerSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stragglers_.Snapshot();
}

// --- State ---

JobInfo Job::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_.Now();
  JobInfo info;
  info.name = name_;
  info.size = size_;
  info.state = JobStateName(lifecycle_.state());
  info.epoch = generations_.epoch();
  info.min_size = min_size();
  info.max_size = generations_.max_size();
  info.generation_cause = generations_.cause();
  info.abort_reason = lifecycle_.abort_reason();
  info.age = now - generations_.created_at();
  info.ranks = roster_.Describe();
  for (RankInfo& rank : info.ranks) rank.connected = sessions_.connected(rank.rank);
  for (const PendingTensor& tensor : negotiation_.Pending()) {
    info.pending.push_back({tensor.name, now - tensor.first_arrival, tensor.missing_ranks});
  }
  info.stragglers = stragglers_.Snapshot();
  info.stragglers.straggling = stragglers_.Stragglers();
  info.negotiation = negotiation_.options();
  info.cache = negotiation_.cache_stats();
  info.autotune = telemetry_.autotune_info();
  info.timeline = telemetry_.timeline_info();
  info.schedules = negotiation_.schedules().Info();
  return info;
}

v1::JobRecord Job::Record() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorder_.Record();
}

absl::Status Job::Restore(const v1::JobRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  return recorder_.Restore(record);
}

Job::State Job::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lifecycle_.state();
}

std::string Job::abort_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lifecycle_.abort_reason();
}

bool Job::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lifecycle_.done();
}

}  // namespace troika::coordinator
