#pragma once
// Inspection: what the coordinator learns by watching one job, and what it does about it. It
// keeps the job's inspectors — HangDetector (stalls and deadlocks over what the negotiation has
// pending), StragglerMonitor, JobTelemetry (the timeline, the autotuner, the ranks' clock
// offsets and what they are told to report) and JobMetrics — feeds them the negotiation's
// events (as its observers) and the ranks' reports, and carries out their verdicts:
//  - a stall past the shutdown time, or every live rank blocked (a deadlock), aborts the job
//    (Lifecycle);
//  - a tuning step changes the negotiation's fusion threshold and cycle time;
//  - what the ranks must report, and their send cycle, go to every session (Sessions) when
//    they change.
// A timer inspects for stalls while tensors are pending.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock, and
// the stall timer fires under it. metrics() is thread-safe on its own.

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/messages.h"
#include "common/scheduler.h"
#include "coordinator/inspection/hang_detector.h"
#include "coordinator/inspection/job_metrics.h"
#include "coordinator/inspection/job_telemetry.h"
#include "coordinator/inspection/straggler_monitor.h"
#include "coordinator/job/job_info.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/job_timer.h"
#include "coordinator/job/lifecycle.h"
#include "coordinator/job/roster.h"
#include "coordinator/job/sessions.h"
#include "coordinator/negotiation/job_negotiation.h"

namespace troika::coordinator {

class Inspection {
 public:
  // `job` (its name) and `size` are the job's; `options` gives stall, deadlock_detection,
  // straggler_margin, autotune (moved out) and negotiator. The parts are the job's own and
  // outlive this; `mu` and `owner` (the job, weakly) are for the stall timer (JobTimer).
  // Sends the sessions their first settings.
  Inspection(const std::string& job, int size, JobOptions& options, JobNegotiation& negotiation,
             const Roster& roster, Sessions& sessions, Lifecycle& lifecycle, Scheduler& scheduler,
             Clock& clock, std::mutex& mu, std::function<std::weak_ptr<const void>()> owner);
  Inspection(const Inspection&) = delete;
  Inspection& operator=(const Inspection&) = delete;

  // Requests were submitted at `now` and negotiated: a deadlock they complete aborts the
  // job; tensors they left pending are inspected for stalls once they could be reported.
  void Submitted(absl::Time now);
  // Aborts a running job if every rank that did not leave is blocked on pending tensors.
  void CheckDeadlock();
  // `rank` left the job: what it waited for no longer counts.
  void Forget(int rank) { hangs_.Forget(rank); }
  // What a rank of a running job waits for (it has not left); completes a deadlock or not.
  void UpdateWaits(const WaitState& state);
  // A rank's execution report: its steps (metrics), phases and clock (telemetry), and its
  // progress through a schedule (the negotiation). INVALID_ARGUMENT naming the rank if the
  // report does not fit the job.
  absl::Status Report(const ExecReport& report);
  // Inspects pending tensors for stalls at the clock's now: logs newly stalled tensors, and
  // aborts the job when one is past the stall shutdown time. Re-arms the stall timer.
  void InspectStalls();

  // The Chrome-trace timeline (JobTelemetry); the ranks report their phases while it runs.
  absl::Status StartTimeline(const std::string& path, int64_t max_bytes);
  absl::StatusOr<TimelineInfo> StopTimeline();
  // A successor takes the timeline over (Succession); AdoptTimeline is its side.
  std::unique_ptr<Timeline> TakeTimeline() { return telemetry_.TakeTimeline(); }
  void AdoptTimeline(std::unique_ptr<Timeline> timeline);

  // Whether the autotuner, if any, has settled (a schedule takes what it settled on).
  bool TuningSettled() const;
  const JobMetrics& metrics() const { return metrics_; }
  // Fills `info`'s stragglers, autotune and timeline.
  void Describe(JobInfo& info) const;

 private:
  // Sends the ranks what they must do now (ClientSettings: the telemetry's reports and the
  // negotiator's cycle time as the send cycle) if that changed.
  void SyncSettings();
  void Abort(AbortCause cause, const std::string& reason);

  const std::string job_;
  const int size_;
  JobNegotiation& negotiation_;
  const Roster& roster_;
  Sessions& sessions_;
  Lifecycle& lifecycle_;
  Clock& clock_;
  JobMetrics metrics_;  // thread-safe on its own
  HangDetector hangs_;
  StragglerMonitor stragglers_;
  JobTelemetry telemetry_;
  JobTimer stall_timer_;  // the next stall inspection, while tensors are pending
};

}  // namespace troika::coordinator
