// Job: its lock, and the hand-off of each call to its parts. What a change of membership
// means is MembershipPolicy's to decide (carried out in ApplyLocked); the transitions, and
// whom each one tells, are Lifecycle's; successors are Succession's.

#include "coordinator/job/job.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace troika::coordinator {

Job::Job(std::string name, int size, JobOptions options, Scheduler& scheduler, Clock& clock,
         std::function<void()> on_done)
    : name_(std::move(name)),
      token_(options.token),
      size_(size),
      clock_(clock),
      session_open_timeout_(options.session_open_timeout),
      kv_(scheduler),
      negotiation_(
          name_, size, options.negotiator,
          {.enabled = options.schedules, .buckets = options.schedule_buckets},
          [this](std::shared_ptr<const DownMessage> m) { sessions_.Broadcast(std::move(m)); }),
      flush_timer_(
          scheduler, clock, mu_, JobTimer::Rearm::kKeepEarlier, [this] { return weak_from_this(); },
          [this] { FlushLocked(); }),
      roster_(name_, size, options.epoch, scheduler),
      sessions_(name_, size, {}),
      generations_(size, options, clock.Now()),
      lifecycle_(name_, roster_, sessions_, generations_, kv_, scheduler,
                 std::move(options.on_abort), std::move(on_done)),
      inspection_(name_, size, options, negotiation_, roster_, sessions_, lifecycle_, scheduler,
                  clock, mu_, [this] { return weak_from_this(); }),
      recorder_(name_, size, token_, roster_, negotiation_.sets(), generations_,
                std::move(options.on_record)),
      policy_(name_, size, lifecycle_, roster_, sessions_, generations_),
      forming_(name_, size, roster_, generations_, lifecycle_, recorder_, policy_),
      succession_(name_, generations_, lifecycle_, roster_, sessions_, inspection_, clock),
      session_timer_(
          scheduler, clock, mu_, JobTimer::Rearm::kKeepEarlier, [this] { return weak_from_this(); },
          [this] {
            ApplyLocked(policy_.SessionsNotOpened(session_open_timeout_));
            lifecycle_.MaybeDone();
          }) {}

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
    std::shared_ptr<Job> next = succession_.NextIncarnation(shared_from_this());
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
  std::weak_ptr<Job> weak = weak_from_this();
  forming_.Wait(ranks, host, timeout, std::move(done), [weak, timeout](uint64_t id) {
    if (auto job = weak.lock()) job->ExpireAttach(id, timeout);
  });
  // Formed now: every node's agent opens its session next.
  if (lifecycle_.running() && !sessions_.all_connected()) {
    session_timer_.Arm(clock_.Now() + session_open_timeout_);
  }
}

void Job::ExpireAttach(uint64_t id, absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<Verdict> verdict = forming_.Expired(id, timeout)) ApplyLocked(*verdict);
  lifecycle_.MaybeDone();
}

void Job::RegisterNode(const std::string& host, int nproc, int node_rank, RegisterCallback done,
                       std::function<bool()> cancelled, std::string join_id) {
  std::unique_lock<std::mutex> lock(mu_);
  // The generation ended as the call came (the node's agent found it serving the job's name):
  // the node waits to join the next one, as the nodes waiting then were carried there.
  if (std::shared_ptr<Job> next = succession_.NextGeneration()) {
    lock.unlock();
    return next->RegisterNode(host, nproc, node_rank, std::move(done), std::move(cancelled),
                              std::move(join_id));
  }
  forming_.RegisterNode(host, nproc, node_rank, std::move(done), std::move(cancelled),
                        std::move(join_id));
}

// --- Sessions ---

absl::Status Job::OpenSession(const std::vector<int>& ranks, int64_t epoch,
                              session::SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sessions_.OpenFollower(sink, epoch)) return absl::OkStatus();
  RETURN_IF_ERROR(sessions_.CanOpen());
  const std::shared_ptr<const DownMessage>& abort = lifecycle_.abort_message();
  if (abort != nullptr && epoch == generations_.epoch()) {
    // The job was aborted before this node's session reached the coordinator (its agent
    // launched the ranks once they attached): the session hears the abort, with the exit that
    // caused it, as the sessions open then did, so that its agent ends the same way and with
    // the same exit code. A refusal would end it with a bare error (and exit code 1). The job
    // may have been reported done already (no session was open): it is done again, and
    // released, once this session closes. A generation that ended likewise: the session
    // hears the change, and its agent follows into the next generation.
    RETURN_IF_ERROR(sessions_.Open(ranks, sink, roster_.departed()));
    lifecycle_.Reopen();
    sink->Send(abort);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(policy_.AcceptsSession(epoch));
  return sessions_.Open(ranks, sink, roster_.departed());
}

absl::Status Job::ResumeSession(const std::vector<int>& ranks, int64_t epoch,
                                const SessionResume& resume, session::SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(sessions_.CanResume(resume));
  RETURN_IF_ERROR(policy_.AcceptsSession(epoch));
  RETURN_IF_ERROR(sessions_.Resume(ranks, resume, sink, roster_.departed()));
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
    lifecycle_.Abort(AbortCause::kConnectionLost, std::string(resumed.status().message()),
                     std::nullopt, false);
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
  // Aborted, or a session of the generation before: the session was told why.
  if (lifecycle_.state() == State::kAborted || sessions_.Following(sink)) return absl::OkStatus();
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
  RETURN_IF_ERROR(negotiation_.Submit(std::move(requests), now, owned, *misses));
  if (!misses->misses.empty() || !misses->responses.empty()) sink->Send(std::move(misses));
  negotiation_.ReportReady(clock_.Now());
  FlushLocked();
  inspection_.Submitted(now);
  return absl::OkStatus();
}

template <typename F>
absl::Status Job::Owned(session::SessionSink* sink, const std::vector<int>& ranks, const char* what,
                        F then) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sessions_.Following(sink)) return absl::OkStatus();  // of the generation before
  RETURN_IF_ERROR(sessions_.CheckOwns(sink, ranks, what));
  if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
    then();
    return absl::OkStatus();
  } else {
    return then();
  }
}

absl::Status Job::Goodbye(session::SessionSink* sink, const std::vector<int>& ranks) {
  return Owned(sink, ranks, "a goodbye", [&] {
    for (int r : ranks) DepartLocked(r, "has shut down");
    FlushLocked();
    inspection_.CheckDeadlock();
  });
}

absl::Status Job::ReportExit(session::SessionSink* sink, const RankExit& exit) {
  return Owned(sink, {exit.rank}, "an exit report", [&] { ApplyLocked(policy_.Exit(exit)); });
}

absl::Status Job::ReportWaitState(session::SessionSink* sink, const WaitState& state) {
  return Owned(sink, {state.rank}, "a wait state", [&] { inspection_.UpdateWaits(state); });
}

absl::Status Job::ReportExec(session::SessionSink* sink, const ExecReport& report) {
  return Owned(sink, {report.rank}, "an execution report",
               [&] { return inspection_.Report(report); });
}

absl::Status Job::EndSchedule(session::SessionSink* sink, int64_t id,
                              const std::vector<int>& ranks) {
  return Owned(sink, ranks, "a schedule's end", [&] { negotiation_.schedules().End(id, ranks); });
}

absl::Status Job::DeviateSchedule(session::SessionSink* sink, int64_t id,
                                  const std::vector<int>& ranks) {
  return Owned(sink, ranks, "a schedule deviation",
               [&] { negotiation_.schedules().Deviate(id, ranks); });
}

void Job::CloseSession(session::SessionSink* sink, const absl::Status& ended) {
  std::lock_guard<std::mutex> lock(mu_);
  // A session of the generation before was never this job's: the job attaching (no node yet,
  // no session) is not abandoned for it.
  const bool follower = sessions_.Following(sink);
  std::vector<int> ranks = sessions_.Close(sink);
  ApplyLocked(policy_.SessionClosed(ranks, ended));
  // Its peer went away after this generation ended for another change (two nodes lost at
  // once, their sessions closing one after the other): the next generation, which counts on
  // these ranks, learns at once that they will not attach.
  std::erase_if(ranks, [this](int r) { return roster_.departed(r); });
  if (ended.ok() && sink->peer_lost() && !ranks.empty() && lifecycle_.over()) {
    succession_.LostAfterEnd(ranks, policy_.ConnectionLost(ranks));
  }
  if (!follower) lifecycle_.MaybeDone();
}

std::optional<MembershipChange> Job::ChangeFrom(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.ChangeFrom(epoch);
}

void Job::LoseBeforeAttach(const std::vector<int>& ranks, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyLocked(policy_.LostBeforeAttach(ranks, reason));
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
      return inspection_.CheckDeadlock();
    case Verdict::Kind::kAbort:
      lifecycle_.Abort(verdict.cause, verdict.reason, std::move(verdict.exit),
                       verdict.finished_too);
      return;
    case Verdict::Kind::kEndGeneration:
      return succession_.EndGeneration(shared_from_this(), std::move(verdict.change), verdict.cause,
                                       verdict.reason, std::move(verdict.exit));
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
  inspection_.Forget(rank);
  // A rank connecting a data plane (Init, AddProcessSet) waits for every member's address:
  // whatever is not set yet never will be.
  kv_.Close(absl::FailedPreconditionError(
      absl::StrCat("rank ", rank, " ", why, "; it will not connect to the other ranks")));
  lifecycle_.FinishIfAllDeparted();
}

void Job::Abort(AbortCause cause, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  lifecycle_.Abort(cause, reason, std::nullopt, false);
  lifecycle_.MaybeDone();
}

void Job::Detach(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  lifecycle_.Detach(reason);
}

// --- Successors: generations (elastic) and incarnations (formed anew) ---

void Job::LeftRankExitedLocked(const RankExit& exit) {
  generations_.LeftRankExited(exit);
  const std::shared_ptr<Job> next = generations_.successor();
  // The next incarnation failed already (another rank that left will not attach again): that
  // is the cause, which its ranks were told; this rank's exit followed.
  if (next && next->state() == State::kAborted) return;
  ApplyLocked(policy_.LeftRankExited(exit));
  // An incarnation formed anew numbers its ranks as this one did (one made later learns it
  // when it is made); an elastic generation renumbers them, and this rank is not among them.
  if (next && generations_.forms_again()) next->RankGone(exit);
}

void Job::RankGone(const RankExit& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyLocked(policy_.RankGone(exit));
  lifecycle_.MaybeDone();
}

void Job::Inherit(Succession::Inheritance inheritance) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [rank, exit] : succession_.Inherit(std::move(inheritance))) {
    ApplyLocked(policy_.RankGone(exit));
  }
}

void Job::Track(const std::shared_ptr<JobLineage>& lineage) {
  std::lock_guard<std::mutex> lock(mu_);
  generations_.Track(lineage);
}

std::shared_ptr<Job> Job::successor() const {
  std::lock_guard<std::mutex> lock(mu_);
  return succession_.Serving();  // lock order: an incarnation, then its successor
}

absl::Status Job::Drain(const std::string& host) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!generations_.elastic()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' is not elastic: a node cannot leave it"));
  }
  if (!lifecycle_.running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' is not running: a node leaves at a commit"));
  }
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    const std::string* from = roster_.host(r);
    if (from != nullptr && *from == host && !roster_.departed(r)) ranks.push_back(r);
  }
  if (ranks.empty()) {
    return absl::NotFoundError(absl::StrCat("no rank of job '", name_, "' (generation ",
                                            generations_.epoch(), ") runs on ", host));
  }
  const int left = size_ - static_cast<int>(roster_.departed().size()) -
                   generations_.DrainingRanks(host) - static_cast<int>(ranks.size());
  if (left < generations_.min_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' would go on with ", left, left == 1 ? " rank" : " ranks",
                     " without ", host, ", below its minimum of ", generations_.min_size()));
  }
  TROIKA_LOG(INFO) << "job '" << name_ << "': " << FormatRanks(ranks) << " on " << host
                   << " leave at the next commit";
  generations_.Drain(host, std::move(ranks));
  return absl::OkStatus();
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
  if (admit) return succession_.AdmitJoiners(shared_from_this());
  flush_timer_.Arm(next);
}

bool Job::CanTakeScheduleLocked() const {
  if (!lifecycle_.running() || sessions_.resyncing() || !roster_.departed().empty()) {
    return false;
  }
  // The autotuner changes fusion while it samples: schedule what it settled on.
  return inspection_.TuningSettled() && sessions_.all_connected();
}

// --- Inspection ---

void Job::InspectStalls() {
  std::lock_guard<std::mutex> lock(mu_);
  inspection_.InspectStalls();
  lifecycle_.MaybeDone();
}

absl::Status Job::StartTimeline(const std::string& path, int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return inspection_.StartTimeline(path, max_bytes);
}

absl::StatusOr<TimelineInfo> Job::StopTimeline() {
  std::lock_guard<std::mutex> lock(mu_);
  return inspection_.StopTimeline();
}

// --- State ---

JobInfo Job::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_.Now();
  JobInfo info;
  info.name = name_;
  info.size = size_;
  info.state = JobStateName(lifecycle_.state());
  info.abort_reason = lifecycle_.abort_reason();
  generations_.Describe(info, now);
  info.ranks = roster_.Describe();
  for (RankInfo& rank : info.ranks) rank.connected = sessions_.connected(rank.rank);
  for (const PendingTensor& tensor : negotiation_.Pending()) {
    info.pending.push_back({tensor.name, now - tensor.first_arrival, tensor.missing_ranks});
  }
  inspection_.Describe(info);
  info.negotiation = negotiation_.options();
  info.cache = negotiation_.cache_stats();
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
