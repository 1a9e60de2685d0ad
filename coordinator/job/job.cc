// Job: the hand-off of each session call to the job's parts, and the flush. The transitions
// themselves, and whom each one tells, are Lifecycle's; what leads to them besides the calls
// here: forming (job_attach.cc), a generation ending (job_elastic.cc), forming anew
// (job_incarnation.cc), stalls and deadlocks (job_inspection.cc); Describe() in job_info.cc.

#include "coordinator/job/job.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {

Job::Job(std::string name, int size, JobOptions options, Scheduler& scheduler, Clock& clock,
         std::function<void()> on_done)
    : name_(std::move(name)),
      token_(options.token),
      size_(size),
      scheduler_(scheduler),
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
      roster_(name_, size, options.epoch, scheduler),
      sessions_(name_, size, CurrentSettings()),
      generations_(size, options, clock.Now()),
      lifecycle_(name_, roster_, sessions_, generations_, kv_, scheduler,
                 std::move(options.on_abort), std::move(on_done)),
      recorder_(name_, size, token_, roster_, negotiation_.sets(), generations_,
                std::move(options.on_record)) {
  negotiation_.AddObserver(stragglers_);  // set 0's tensors
  negotiation_.AddObserver(metrics_);     // every set's
  negotiation_.AddObserver(telemetry_);   // set 0's; tunes negotiation_
}

Job::~Job() {
  std::lock_guard<std::mutex> lock(mu_);
  if (flush_timer_) scheduler_.Cancel(flush_timer_);
  if (stall_timer_) scheduler_.Cancel(stall_timer_);
  const absl::Status removed = absl::CancelledError(absl::StrCat("job '", name_, "' was removed"));
  lifecycle_.FailWaiting(removed);
}

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
  if (stall_timer_ == 0 && negotiation_.has_pending()) {
    const absl::Duration first = hangs_.FirstDeadline();
    if (first != absl::InfiniteDuration()) ArmStallTimerLocked(now + first);
  }
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

absl::Status Job::ReportExit(session::SessionSink* sink, const RankExit& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = sessions_.CheckOwns(sink, {exit.rank}, "an exit report"); !s.ok()) {
    return s;
  }
  ReportExitLocked(exit);
  return absl::OkStatus();
}

void Job::ReportExitLocked(const RankExit& exit) {
  if (roster_.departed(exit.rank)) {
    // It had left cleanly. Whether it can still attach again matters to a job that is not
    // elastic (job_incarnation.cc).
    if (generations_.forms_again()) LeftRankExitedLocked(exit);
    return;
  }
  if (exit.exit_code == 0 && exit.signal == 0) {
    // Its agent saw it exit cleanly without ever joining: it leaves, and the ranks waiting
    // for it to connect fail at once, naming it (a job of processes that never use Troika
    // just finishes).
    DepartLocked(exit.rank, absl::StrCat(exit.host.empty() ? "" : "on ", exit.host,
                                         exit.host.empty() ? "" : " ",
                                         "exited with code 0 before joining the job"));
    FlushLocked();
    CheckDeadlockLocked();
    return;
  }
  LoseRanksLocked({exit.rank}, AbortCause::kRankExit, DescribeRankExit(exit), exit);
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
  if (absl::Status s = metrics_.OnSteps(report.steps); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("execution report of rank ", report.rank, ": ", s.message()));
  }
  telemetry_.OnReport(report, clock_.Now());
  if (!report.schedule) return absl::OkStatus();
  bool waiting = false;
  absl::Status s = negotiation_.RecordScheduleProgress(
      report.rank, *report.schedule, report.sent_at + telemetry_.ClockOffset(report.rank),
      clock_.Now(), &waiting);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("execution report of rank ", report.rank, ": ", s.message()));
  }
  if (stall_timer_ == 0 && waiting) {
    const absl::Time next = hangs_.NextCheck();
    if (next != absl::InfiniteFuture()) ArmStallTimerLocked(next);
  }
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

ClientSettings Job::CurrentSettings() const {
  ClientSettings settings = telemetry_.settings();
  const int64_t cycle_us = absl::ToInt64Microseconds(negotiation_.options().cycle_time);
  settings.send_cycle_us = static_cast<int>(std::clamp<int64_t>(cycle_us, 0, 60'000'000));
  return settings;
}

void Job::SyncSettingsLocked() { sessions_.UpdateSettings(CurrentSettings()); }

void Job::CloseSession(session::SessionSink* sink, const absl::Status& ended) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> lost;
  for (int r : sessions_.Close(sink)) {
    if (!roster_.departed(r)) lost.push_back(r);
  }
  if (!lost.empty() && lifecycle_.running() && !lifecycle_.detached()) {
    if (ended.ok()) {
      LoseRanksLocked(lost, AbortCause::kConnectionLost,
                      absl::StrCat(FormatRanks(lost), " lost the connection to the coordinator"));
    } else {
      AbortLocked(AbortCause::kProtocolError,
                  absl::StrCat("the coordinator ended the session of ", FormatRanks(lost), ": ",
                               ended.message()));
    }
  }
  lifecycle_.MaybeDone();
}

void Job::Abort(AbortCause cause, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(cause, reason);
  lifecycle_.MaybeDone();
}

void Job::Detach(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  lifecycle_.Detach(reason);
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

v1::JobRecord Job::Record() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorder_.Record();
}

absl::Status Job::Restore(const v1::JobRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  return recorder_.Restore(record);
}

void Job::FlushLocked() {
  const absl::Time now = clock_.Now();
  absl::Time next;
  std::vector<Response> responses = negotiation_.Poll(now, roster_.departed(), &next);
  recorder_.SaveIfSetsChanged();
  const bool admit = AdmitsAtCommitLocked() && generations_.CutAtCommit(responses);
  if (!responses.empty()) {
    negotiation_.Sending(responses);
    auto down = std::make_shared<DownMessage>();
    down->responses = std::move(responses);
    // Every id ends while making some tensor ready, so it goes with that tensor's response.
    down->evicted_cache_ids = negotiation_.TakeEndedCacheIds();
    sessions_.BroadcastResponses(std::move(down));
    generations_.Sending(now);
    if (!admit) negotiation_.MaybePublishSchedule([this] { return CanTakeScheduleLocked(); });
  }
  if (admit) return AdmitJoinersLocked();
  if (next != absl::InfiniteFuture()) ArmTimerLocked(next);
}

bool Job::CanTakeScheduleLocked() const {
  if (!lifecycle_.running() || sessions_.resyncing() || !roster_.departed().empty()) {
    return false;
  }
  // The autotuner changes fusion while it samples: schedule what it settled on.
  const AutotuneInfo tuning = telemetry_.autotune_info();
  return (!tuning.enabled || tuning.done) && sessions_.all_connected();
}

void Job::ArmTimerLocked(absl::Time due) {
  if (flush_timer_ != 0 && flush_due_ <= due) return;
  if (flush_timer_ != 0) scheduler_.Cancel(flush_timer_);
  flush_due_ = due;
  std::weak_ptr<Job> weak = weak_from_this();
  // The scheduler runs on real time; the clock may be a fake one in tests, which then call
  // the flush by hand, so only the offset from now matters here.
  flush_timer_ = scheduler_.RunAfter(due - clock_.Now(), [weak] {
    auto job = weak.lock();
    if (!job) return;
    std::lock_guard<std::mutex> lock(job->mu_);
    job->flush_timer_ = 0;
    job->flush_due_ = absl::InfiniteFuture();
    job->FlushLocked();
  });
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
