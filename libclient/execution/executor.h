#pragma once
// Executor: runs the coordinator's responses, in order, on the data plane, on a thread of its
// own — so the controller keeps negotiating the next tensors while bytes move.
//
// Thread contract: Enqueue() from the controller's receiver thread; Abort() from any thread;
// Stop() once, from the owner. The runner, the communicator's collective calls and the
// fusion buffer belong to whichever thread holds the turn: the executor thread, or a thread
// waiting for an operation that runs queued entries itself (RunInline), or its own entry,
// never queued (TryClaim, RunClaimed), while the executor thread sleeps. One holds it at a
// time; entries run in queue order either way.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/messages.h"
#include "libclient/execution/collective_runner.h"
#include "libclient/execution/device_plane.h"
#include "libclient/execution/exec_stats.h"
#include "libclient/execution/process_set_table.h"
#include "libclient/execution/scheduled_step.h"
#include "libclient/execution/tensor_table.h"
#include "libclient/execution/turn.h"
#include "libclient/handles/step_clock.h"
#include "libclient/transport/communicator.h"

namespace troika::internal {

class Executor {
 public:
  // `on_failure` is called (by the turn's holder) when the data plane fails; the owner
  // fails the whole context and returns the status the failed operation reports (the job's
  // abort reason when one arrives, rather than the transport's "connection reset").
  // `stats` receives allreduced bytes and, when asked for, each response's phases.
  // `steps` is told when the executor works on a response (communication time).
  // `comm`: process set 0's communicator. `sets`: the other process sets; a response of a set
  // runs on its communicator, and is skipped where this rank is not in it. `connect`
  // connects this rank's communicator to a new set (id, position in it, its size).
  // `device`: runs GPU responses (null: this build has no device plane, and the context
  // refuses GPU operations before they reach the coordinator).
  using ConnectFn = std::function<absl::StatusOr<std::unique_ptr<transport::Communicator>>(
      int id, int index, int size)>;
  Executor(TensorTable& table, transport::Communicator& comm, ProcessSetTable& sets,
           ConnectFn connect, OutputPool& outputs, ExecStats& stats, StepClock& steps,
           DevicePlane* device, std::function<absl::Status(absl::Status)> on_failure);
  ~Executor();  // Stop()
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Steady-state schedules: called by the turn's holder (no lock held) when an entry of
  // schedule `schedule` at `position` completed — `go`: its tensors are done (a GPU entry's:
  // issued on the device, whose plane completes them when it is done); else the
  // combined vote was void: the schedule ended there, the entry's tensors are back in the
  // table, and every later entry of the schedule queued here is dropped unexecuted. Set
  // before Start().
  using ScheduledFn = std::function<void(int64_t schedule, int64_t position, bool go)>;
  void OnScheduled(ScheduledFn fn) { on_scheduled_ = std::move(fn); }

  void Start();
  void Enqueue(std::vector<Response> responses);
  // Queues `step` of schedule `schedule`, after what is queued. `wake` false: the executor
  // thread is not woken for it — the caller is about to wait for it and calls RunInline(),
  // which runs it on the caller's thread or, if it cannot, wakes the executor thread.
  void EnqueueScheduled(int64_t schedule, ScheduledStep step, bool wake = true);
  // Called by a thread about to wait for an operation, with no lock held: while `done()` is
  // false, the executor thread is idle and the next queued entry is a scheduled host one, takes the
  // turn and runs it itself — no thread hand-off in the operation's path. Returns when
  // `done()` holds or it cannot go on; what is left queued is then the executor thread's
  // (woken if it must be).
  void RunInline(const std::function<bool()>& done);
  // The fast path of a thread that submits a scheduled host entry and waits for it: takes the
  // turn if the executor thread is idle and nothing is queued (false otherwise, or once
  // aborted or stopping). The caller then runs the entry itself (RunClaimed) — no queue, no
  // table. Takes no lock (one compare-and-swap: Turn); may be called under the controller's.
  bool TryClaim();
  // Gives an entry that has none the state it is then negotiated with (RunClaimed).
  using AdoptFn = std::function<std::shared_ptr<OpState>(const Entry& entry)>;
  // With the turn taken (TryClaim): runs `step` of schedule `schedule` on `entries`, the
  // caller's own host entries without states (a synchronous submission's: Controller::RunNow),
  // as the executor runs a queued entry with the table's; then gives the turn back, waking the
  // executor thread for what was queued meanwhile. Each entry's result is its `outcome` (the
  // run's failure, or its own), for the caller to report — unless the combined vote was void:
  // the schedule ended there, and each entry, with the state `adopt` gave it, went back into
  // the table to be negotiated (before the turn was given back); wait for that state instead.
  void RunClaimed(int64_t schedule, ScheduledStep step, absl::Span<Entry> entries,
                  const AdoptFn& adopt);
  // Unblocks a running transfer (every communicator is aborted) and drops queued responses.
  void Abort();
  // Runs what is queued unless aborted, then joins the thread; waits for operations issued on
  // the device. Idempotent.
  void Stop();

 private:
  struct Queued {
    std::shared_ptr<const Response> response;  // shared with the schedule that made it
    // When Enqueue() got it, where the queue phase starts; InfinitePast while phases are not
    // reported (Arrival()).
    absl::Time arrived;
    int64_t schedule = 0;  // non-zero: an entry of this schedule, at `position`
    int64_t position = 0;
    bool vote_void = false;
  };

  void Loop();
  // A queued entry's `arrived`: now, or InfinitePast while phases are not reported.
  absl::Time Arrival() const;
  // Runs one queued entry (the turn held); a scheduled one on `entries` if given (RunClaimed,
  // with its `adopt`), else on the table's.
  void Run(const Queued& queued, absl::Span<Entry> entries = {}, const AdoptFn* adopt = nullptr);
  void Execute(const Response& response);
  void ExecuteScheduled(const Queued& queued, absl::Span<Entry> entries, const AdoptFn* adopt);
  // After an AddProcessSet / RemoveProcessSet barrier (`entry`) succeeded: connects this
  // rank to the new set, or drops the removed one. A failure is a data-plane failure.
  absl::Status ApplyProcessSetControl(const Response& response, Entry& entry);
  // This rank has joined (Context::Join) and did not submit response.names[i]: an entry that
  // takes part with zeros and discards the result.
  static Entry JoinedStandIn(const Response& response, size_t i);
  // Issues a GPU response on the device plane; its states complete there.
  absl::Status LaunchOnDevice(const Response& response, std::vector<Entry>& entries);
  // Records what executing `queued` from `start` to now did in stats_: bytes, and phases
  // unless `start` is InfinitePast (not timed).
  void Record(const Queued& queued, absl::Time start);

  TensorTable& table_;
  transport::Communicator& comm_;
  ProcessSetTable& sets_;
  const ConnectFn connect_;
  ExecStats& stats_;
  StepClock& steps_;
  DevicePlane* const device_;
  const std::function<absl::Status(absl::Status)> on_failure_;
  CollectiveRunner runner_;  // the turn's holder only
  ScheduledFn on_scheduled_;
  int64_t ended_schedule_ = 0;  // the turn's holder only: the last schedule that ended

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;  // guarded by mu_
  bool stopping_ = false;     // guarded by mu_
  bool aborted_ = false;      // guarded by mu_
  // Who holds the turn; whether queue_ has entries and the executor closed (aborted_ or
  // stopping_), marked under mu_ with them.
  Turn turn_;
  std::thread thread_;
};

}  // namespace troika::internal
