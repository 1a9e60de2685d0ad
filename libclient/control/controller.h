#pragma once
// Controller: owns this rank's session with the coordinator. User threads submit operations;
// its sender thread batches their requests into as few messages as possible; its receiver
// thread hands the ordered responses to the executor and turns an abort, or a lost stream,
// into the failure of every pending and later operation. Requests the coordinator has cached
// go up as their cache ids (RequestCache).
//
// Steady-state schedules (docs/protocol.md, Schedules): where each submission goes while one
// is in force, and what the coordinator is told about it, is ScheduleState's; the controller
// feeds it what comes down, sends what it must tell and negotiates what it hands back.
//
// Thread contract: Submit() from any thread; Start() and Shutdown() once each, from the
// owner; the channel's Send/Goodbye belong to the sender thread, Receive to the receiver.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "libclient/control/control_channel.h"
#include "libclient/control/request_cache.h"
#include "libclient/control/schedule_state.h"
#include "libclient/execution/exec_stats.h"
#include "libclient/execution/executor.h"
#include "libclient/execution/tensor_table.h"
#include "libclient/handles/wait_tracker.h"

namespace troika::internal {

// How long an ended step waits, at most, before an ExecReport carries it up.
inline constexpr absl::Duration kStepReportInterval = absl::Seconds(1);

class Controller {
 public:
  // `on_failure` runs once when the session fails (abort, lost stream): the owner fails the
  // context (closing the table, aborting the executor).
  // `stats`: what the executor records, reported as ExecReports while the coordinator's
  // ClientSettings ask for them, and the step samples queued there (StepsQueued), reported
  // within kStepReportInterval and in a last report before goodbye. `peer`: what the channel
  // talks to ("troika-agent or coordinator at unix:/..."), for messages.
  Controller(int rank, std::string peer, ControlChannel& channel, TensorTable& table,
             Executor& executor, ExecStats& stats, std::function<void(absl::Status)> on_failure);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Before Start(): the rank's wait tracker, whose registrations by polling (which lapse when
  // the polls stop) the sender expires on time. Optional.
  void TrackWaits(std::shared_ptr<WaitTracker> waits);
  // Before Start(): the data plane's timeout. A schedule whose collective this rank has been
  // blocked in for a quarter of it (at most 30 s: another rank is busy elsewhere, saving a
  // checkpoint, say) ends, so that the wait goes on under negotiation, which has no limit,
  // instead of failing the job when the timeout strikes. Default: 300 s.
  void LimitScheduledWaits(absl::Duration data_timeout);
  void Start();
  // Records the entry and queues its request; an immediate error if the name is in flight
  // or the context has failed or shut down. `caller_waits`: the caller waits for the entry
  // at once and calls Executor::RunInline() first, so scheduled entries this makes ready are
  // queued without waking the executor thread.
  absl::Status Submit(Entry&& entry, bool caller_waits = false);
  // The fast path of a synchronous submission (ContextImpl::AllreduceNow): if the schedule in
  // force takes `entry` (a host tensor of set 0, without a state, checked) as the next entry,
  // alone, and the executor is idle, runs it on this thread — it never enters the table or the
  // executor's queue — and returns true (Executor::RunClaimed says what became of it, and
  // when `adopt` is called). False, with `entry` untouched, otherwise.
  bool RunNow(Entry& entry, const Executor::AdoptFn& adopt);
  // Submits every entry or none (the first error; entries already recorded are withdrawn),
  // with their requests queued together so they leave in one batch.
  absl::Status SubmitAll(std::vector<Entry> entries);
  // Queues `state` for the coordinator, after the requests submitted before it (and before
  // later ones). Dropped once sending stopped. Never blocks; any thread.
  void SendWaitState(WaitState state);
  // The first step sample since the last report was queued in `stats`: a report follows
  // within kStepReportInterval. Never blocks; any thread.
  void StepsQueued();
  // A rank about to shut down: ends a schedule in force (this rank votes void in its next
  // entry) and waits up to `timeout` for the entry to complete — the other ranks must enter
  // it too. False if it did not (the executor must then be aborted, not drained).
  bool LeaveSchedule(absl::Duration timeout);
  // Says goodbye, waits up to `grace` for the coordinator to end the stream, then stops both
  // threads. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  void SendLoop();
  // Waits (mu_ held in `lock`) until there is something to send or a report is due, or
  // `expire_waits` (when the wait tracker's next registration by polling lapses) passed, or a
  // new one began; returns whether a report is due. `next_report`, `next_steps`: when the
  // periodic report and the report of pending steps are due (InfiniteFuture: not scheduled);
  // advanced here.
  bool WaitForWork(std::unique_lock<std::mutex>& lock, absl::Time& next_report,
                   absl::Time& next_steps, absl::Time expire_waits);
  // Whether the held requests must leave now: the send cycle is off or over, or a wait, a
  // poll or the coordinator asked for them (mu_ held).
  bool OutboxDueLocked() const;
  // Sends `batch` (compressing cached requests in place), with each wait state in `waits`
  // before the request at its position.
  absl::Status SendBatch(std::vector<TensorRequest>& batch,
                         const std::vector<std::pair<size_t, WaitState>>& waits);
  void ReceiveLoop();
  // Sends an ExecReport as of `now` if anything changed since the last one or `progress`
  // (of a schedule) is not empty.
  absl::Status SendReport(absl::Time now, ScheduleProgress progress);
  // Hands `request` (the `order`-th submission) to schedules_, which gives it to the schedule
  // in force (`wake_executor`: as Executor::EnqueueScheduled's `wake`) or queues it here to be
  // negotiated; mu_ held. Returns whether the sender must be woken.
  bool QueueLocked(TensorRequest request, uint64_t order, bool wake_executor = true);
  // A schedule came down: this rank's unanswered requests that it names are its now.
  void BeginSchedule(Schedule schedule);
  // Requests the schedule took over leave the outbox, unsent (mu_ held).
  void WithdrawLocked(const std::vector<std::string>& names);
  // The executor finished entry `position` of schedule `id` (OnScheduled).
  void Scheduled(int64_t id, int64_t position, bool go);

  const int rank_;
  const std::string peer_;
  ControlChannel& channel_;
  TensorTable& table_;
  Executor& executor_;
  ExecStats& stats_;
  const std::function<void(absl::Status)> on_failure_;
  RequestCache cache_;                  // thread-safe
  std::shared_ptr<WaitTracker> waits_;  // set before Start(); may be null

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TensorRequest> outbox_;  // guarded by mu_
  // Guarded by mu_: wait states to send, each with the outbox_ position it goes before.
  std::vector<std::pair<size_t, WaitState>> wait_states_;
  bool stop_sending_ = false;      // guarded by mu_
  bool stream_closed_ = false;     // guarded by mu_
  bool shutting_down_ = false;     // guarded by mu_
  bool settings_changed_ = false;  // guarded by mu_
  bool steps_queued_ = false;      // guarded by mu_; StepsQueued() since the sender looked
  bool polls_registered_ = false;  // guarded by mu_; a registration by polling began since
  // The send cycle (ClientSettings.send_cycle_us, the job's cycle time): requests are held
  // up to this long after the oldest was queued, so that those submitted close together leave
  // in one message; a thread waiting for (or polling) an op sends them at once (flush_).
  // Zero (until the coordinator says otherwise): each is sent as soon as the sender wakes.
  absl::Duration send_cycle_ = absl::ZeroDuration();  // guarded by mu_
  absl::Time held_since_ = absl::InfiniteFuture();    // guarded by mu_; oldest in outbox_
  bool flush_ = false;                                // guarded by mu_
  // Steady-state schedules; guarded by mu_. Entries go to executor_; a deviation wakes the
  // sender.
  ScheduleState schedules_;
  std::thread sender_;
  std::thread receiver_;
};

}  // namespace troika::internal
