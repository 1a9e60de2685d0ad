#include "coordinator/job/inspection.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {

Inspection::Inspection(const std::string& job, int size, JobOptions& options,
                       JobNegotiation& negotiation, const Roster& roster, Sessions& sessions,
                       Lifecycle& lifecycle, Scheduler& scheduler, Clock& clock, std::mutex& mu,
                       std::function<std::weak_ptr<const void>()> owner)
    : job_(job),
      size_(size),
      negotiation_(negotiation),
      roster_(roster),
      sessions_(sessions),
      lifecycle_(lifecycle),
      clock_(clock),
      hangs_(negotiation, options.stall, options.deadlock_detection),
      stragglers_(job, size, options.straggler_margin),
      telemetry_(job, size, std::move(options.autotune), options.negotiator,
                 [this](const TuningParams& tuned) {
                   NegotiatorOptions next = negotiation_.options();
                   next.fusion_threshold_bytes = tuned.fusion_threshold_bytes;
                   next.cycle_time = tuned.cycle_time;
                   negotiation_.set_options(next);
                   SyncSettings();  // tuning may have ended
                 }),
      stall_timer_(scheduler, clock, mu, JobTimer::Rearm::kReplace, std::move(owner), [this] {
        InspectStalls();
        lifecycle_.MaybeDone();
      }) {
  negotiation_.AddObserver(stragglers_);  // set 0's tensors
  negotiation_.AddObserver(metrics_);     // every set's
  negotiation_.AddObserver(telemetry_);   // set 0's; tunes the negotiation
  SyncSettings();
}

void Inspection::Abort(AbortCause cause, const std::string& reason) {
  lifecycle_.Abort(cause, reason, std::nullopt, /*finished_too=*/false);
}

void Inspection::Submitted(absl::Time now) {
  CheckDeadlock();
  if (!lifecycle_.running()) return;
  // A tensor that became pending now can be reported no sooner than this; the timer re-arms
  // itself from the inspector's NextCheck, so one armed timer covers every pending tensor.
  if (!stall_timer_.armed()) stall_timer_.Arm(hangs_.FirstCheck(now));
}

void Inspection::CheckDeadlock() {
  if (!lifecycle_.running()) return;
  if (std::optional<std::string> deadlock = hangs_.Deadlock(roster_.departed(), size_)) {
    Abort(AbortCause::kDeadlock, *deadlock);
  }
}

void Inspection::UpdateWaits(const WaitState& state) {
  if (!lifecycle_.running() || roster_.departed(state.rank)) return;
  hangs_.UpdateWaits(state.rank, state.waiting_for);
  CheckDeadlock();
}

absl::Status Inspection::Report(const ExecReport& report) {
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

void Inspection::InspectStalls() {
  if (!lifecycle_.running()) return;
  const HangDetector::Stalls stalls = hangs_.InspectStalls(clock_.Now());
  if (stalls.abort) return Abort(AbortCause::kStall, *stalls.abort);
  if (stalls.warning) TROIKA_LOG(WARNING) << "job '" << job_ << "': " << *stalls.warning;
  // A timer that finds nothing pending does not re-arm, so an idle job wakes at most once more.
  stall_timer_.Arm(stalls.next_check);
}

absl::Status Inspection::StartTimeline(const std::string& path, int64_t max_bytes) {
  if (absl::Status s = lifecycle_.CheckNotOver(""); !s.ok()) return s;
  if (absl::Status s = telemetry_.StartTimeline(path, max_bytes, clock_.Now()); !s.ok()) return s;
  TROIKA_LOG(INFO) << "job '" << job_ << "': writing a timeline to " << path;
  SyncSettings();
  return absl::OkStatus();
}

absl::StatusOr<TimelineInfo> Inspection::StopTimeline() {
  absl::StatusOr<TimelineInfo> info = telemetry_.StopTimeline();
  SyncSettings();
  return info;
}

void Inspection::AdoptTimeline(std::unique_ptr<Timeline> timeline) {
  if (!timeline) return;
  telemetry_.AdoptTimeline(std::move(timeline));
  SyncSettings();  // the ranks report their phases
}

bool Inspection::TuningSettled() const {
  const AutotuneInfo tuning = telemetry_.autotune_info();
  return !tuning.enabled || tuning.done;
}

void Inspection::Describe(JobInfo& info) const {
  info.stragglers = stragglers_.Snapshot();
  info.stragglers.straggling = stragglers_.Stragglers();
  info.autotune = telemetry_.autotune_info();
  info.timeline = telemetry_.timeline_info();
}

void Inspection::SyncSettings() {
  sessions_.UpdateSettings(telemetry_.SettingsFor(negotiation_.options()));
}

}  // namespace troika::coordinator
