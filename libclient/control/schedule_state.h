#pragma once
// ScheduleState: this rank's side of steady-state schedules over its session (docs/protocol.md,
// Schedules) — where each submission goes, and what the sender owes the coordinator about
// schedules. ClientSchedule is one schedule; this is the rank's state across them.
//
// Every submission is numbered in the order it was submitted (NextOrder). With no schedule in
// force a submission is negotiated: Route() hands it back to be sent and records it as
// unanswered until its response comes down (Answered). While a schedule is in force:
//   - a submission it takes goes to the executor as a scheduled entry once its entry is ready;
//   - any other submission makes this rank deviate — it enters its next entry with a void vote
//     and tells the coordinator, so that every rank deviates — and is held;
//   - when an entry's vote was void the schedule has ended (Scheduled): what it had taken for
//     that entry and later, and what was held since this rank deviated, are negotiated again,
//     in the order submitted, after the coordinator is told of the end.
// A schedule that begins (Begin) takes over the unanswered requests it names, sent or not,
// and a join submitted after one of them (the coordinator drops both); an unanswered request
// it does not name is a deviation, as is a wait for a tensor whose entry this rank cannot enter
// yet (WaitDeviates), or being blocked in an entry for too long (BlockedTooLong).
//
// Thread contract: not thread-safe. The controller calls it under its lock; `enqueue` and
// `wake_sender` are called under that lock and must not call back.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/messages.h"
#include "libclient/control/client_schedule.h"
#include "libclient/execution/scheduled_step.h"
#include "libclient/handles/wait_tracker.h"

namespace troika::internal {

// A schedule's reports list the tensors submitted and not completed once one of them has
// waited this long (the coordinator's stall inspector sees them).
inline constexpr absl::Duration kScheduleStalling = absl::Seconds(1);
// The longest a rank waits in a scheduled collective before it ends the schedule (less with
// a short data-plane timeout: LimitWaits).
inline constexpr absl::Duration kMaxScheduledWait = absl::Seconds(30);

class ScheduleState {
 public:
  // `enqueue(schedule, step, wake)`: hands an entry to the executor
  // (Executor::EnqueueScheduled). `wake_sender`: this rank deviated and the sender must tell
  // the coordinator. `clock` must outlive this object.
  using EnqueueFn = std::function<void(int64_t schedule, ScheduledStep step, bool wake)>;
  ScheduleState(Clock& clock, EnqueueFn enqueue, std::function<void()> wake_sender);
  ScheduleState(const ScheduleState&) = delete;
  ScheduleState& operator=(const ScheduleState&) = delete;

  // The rank's wait tracker, whose count of completions seen (WaitTracker::Observations) is
  // recorded with each scheduled submission; null: none (counted as 0). Must outlive this.
  void TrackWaits(const WaitTracker* waits) { waits_ = waits; }
  // A schedule whose entry this rank has been blocked in for a quarter of the data plane's
  // timeout (at most kMaxScheduledWait: another rank is busy elsewhere, saving a checkpoint,
  // say) is BlockedTooLong, so that the wait goes on under negotiation, which has no limit,
  // instead of failing the job when the timeout strikes. Default: kMaxScheduledWait.
  void LimitWaits(absl::Duration data_timeout);

  // A schedule is in force (deviated from or not: until it ended).
  bool in_force() const { return schedule_.has_value(); }
  // A schedule is in force and this rank has not deviated: its progress is reported.
  bool reporting() const { return schedule_ && !schedule_->deviated(); }
  // A deviation or an end is to be told (TakeNotices).
  bool has_notices() const { return ended_schedule_ != 0 || deviated_schedule_ != 0; }

  // The number of the next submission.
  uint64_t NextOrder() { return next_order_++; }
  // A new submission's fast path: the index of the tensor the schedule in force takes
  // `request` as, or -1 (then Route it). A tensor matched must be taken (Take) before the
  // caller's lock is released, its table entry made first.
  int Match(const TensorRequest& request) const;
  // Takes tensor `tensor` (Match) as the next submission; entries it makes ready go to the
  // executor, `wake` as EnqueueScheduled's.
  void Take(int tensor, bool wake);
  // The fast path of a caller that waits for its submission: whether tensor `tensor` (Match)
  // is alone in its entry and that entry is the next to run, so that the caller may run it
  // itself (TakeToRun; it must hold the executor's turn, and nothing be queued there).
  bool RunsAlone(int tensor) const { return schedule_->EntersAlone(tensor); }
  // Takes tensor `tensor` (RunsAlone) as the next submission, as Take, and returns its entry,
  // to be run by the caller, with the schedule's id; entries ready after it go to the
  // executor, unwoken (they run after the caller's).
  std::pair<int64_t, ScheduledStep> TakeToRun(int tensor);
  // Submission `order`: the schedule in force takes it (entries it makes ready go to the
  // executor, `wake` as EnqueueScheduled's) or this rank deviates and holds it — nullopt both;
  // with no schedule in force it is recorded as unanswered and returned, to be sent.
  std::optional<TensorRequest> Route(TensorRequest request, uint64_t order, bool wake = true);
  // Responses to these requests came down: they are answered.
  void Answered(const std::vector<Response>& responses);

  // `schedule` came down; `expected`: RequestCache::Expected(schedule). The names of the
  // unanswered requests it took over (the caller withdraws those not sent yet; the cache
  // forgets them). INTERNAL if a schedule is in force (the coordinator publishes one only
  // once every rank ended the last) or it names a cache id this rank does not know; nothing
  // changed then.
  absl::StatusOr<std::vector<std::string>> Begin(
      Schedule schedule, const std::map<std::string, TensorRequest>& expected);
  // The executor finished entry `position` of schedule `id` (Executor::OnScheduled). `go`:
  // its tensors are done. Void: the schedule ended there; returns what to negotiate now, in
  // the order submitted (for each, Route it again). Nothing if `id` is not in force, or `go`.
  std::optional<std::vector<Submission>> Scheduled(int64_t id, int64_t position, bool go);

  // This rank deviates from the schedule in force, if any and it has not: its next entry is
  // entered with a void vote. `tell`: the sender tells the coordinator (wake_sender), so
  // that every rank deviates; false: the coordinator told this rank to (EndOrdered).
  void Deviate(bool tell = true);
  // The coordinator ended schedule `id`: deviates without telling, if it is in force.
  void EndOrdered(int64_t id);
  // A thread waits for tensor `name`: whether that must end the schedule in force (its entry,
  // or an earlier one, still misses this rank's tensors, so waiting would never end).
  bool WaitDeviates(const std::string& name) const;
  // This rank has been blocked in an entry of the schedule in force for the limit or longer
  // (LimitWaits): it must deviate.
  bool BlockedTooLong() const;

  // What the sender tells the coordinator now, in this order: the deviation, the progress (in
  // an ExecReport, as of `at`), the end.
  struct Notices {
    int64_t deviated = 0;  // the schedule this rank deviated from (0: none)
    ScheduleProgress progress;
    absl::Time at;      // when `progress` is as of: the end's time, else now
    int64_t ended = 0;  // the schedule that ended (0: none)
  };
  // Takes the notices due: an ended schedule's last progress; else, when `report_due`, the
  // progress of the schedule in force, if this rank has not deviated from it.
  Notices TakeNotices(bool report_due);
  // Shutting down: the last progress of a schedule that ended and was not reported, and its
  // time.
  std::pair<ScheduleProgress, absl::Time> TakeEndedProgress();

 private:
  // The schedule in force's entries ready to run go to the executor.
  void EnqueueReady(bool wake);
  uint64_t Observed() const { return waits_ ? waits_->Observations() : 0; }

  // Constant after construction (TrackWaits and LimitWaits before use).
  Clock& clock_;
  const EnqueueFn enqueue_;
  const std::function<void()> wake_sender_;
  const WaitTracker* waits_ = nullptr;
  absl::Duration wait_limit_ = kMaxScheduledWait;

  uint64_t next_order_ = 0;
  // The requests negotiated and not answered yet, by table key (TensorTable::Key).
  std::map<std::string, Submission> unanswered_;
  std::optional<ClientSchedule> schedule_;
  // Submissions since this rank deviated, negotiated once the schedule has ended.
  std::vector<Submission> held_;
  int64_t ended_schedule_ = 0;       // to tell, after its progress (0: none)
  int64_t deviated_schedule_ = 0;    // to tell before anything else (0: none)
  ScheduleProgress ended_progress_;  // the ended schedule's last progress, told before it
  absl::Time ended_at_;              // ... as of this time
};

}  // namespace troika::internal
