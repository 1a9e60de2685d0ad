#pragma once
// ContextImpl: what a troika::Context is made of — the membership, the control channel, the
// data-plane communicator, the tensor table, the executor and the controller — and the
// sequence that builds and tears them down. Create() takes the channel and transport as
// interfaces so tests can inject in-memory ones.
//
// Thread-safe (as Context).

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "libclient/control/control_channel.h"
#include "libclient/control/controller.h"
#include "libclient/execution/device_placement.h"
#include "libclient/execution/exec_stats.h"
#include "libclient/execution/executor.h"
#include "libclient/execution/output_pool.h"
#include "libclient/execution/process_set_table.h"
#include "libclient/execution/tensor_table.h"
#include "libclient/handles/step_clock.h"
#include "libclient/handles/wait_tracker.h"
#include "libclient/transport/transport.h"
#include "troika/troika.h"

namespace troika::internal {

// A reduction's op and scale factors, from `options`: the request of every reducing
// operation (Context's, and ContextImpl::AllreduceNow's).
inline void SetReduction(TensorRequest& r, const AllreduceOptions& options) {
  r.reduce_op = options.op;
  r.prescale = options.prescale;
  r.postscale = options.postscale;
}

class ContextImpl {
 public:
  static absl::StatusOr<std::unique_ptr<Context>> Create(
      const Options& options, std::unique_ptr<ControlChannel> channel,
      std::unique_ptr<transport::Transport> transport);
  ~ContextImpl();

  const Membership& membership() const { return membership_; }
  // Checks `request` and submits it, placed on `device` with `compression`
  // (DevicePlacement::Place); the handle
  // of an immediate error is already complete. `out_bytes` set: an allgather, alltoall or
  // reducescatter into the caller's `out` of that many bytes (Entry::caller_output), with
  // `owned_if_too_small` a larger result handle-owned (Entry::owned_if_too_small).
  // `wait`: returns once the operation finished; a scheduled collective this submission makes
  // ready runs on the calling thread if the executor thread is idle (Executor::RunInline).
  Handle Submit(TensorRequest request, const void* in, void* out, const Device& device = {},
                std::optional<Compression> compression = std::nullopt,
                std::optional<size_t> out_bytes = std::nullopt, bool wait = false,
                bool owned_if_too_small = false);
  // Context::Allreduce's path for a synchronous host allreduce of set 0 with both buffers
  // (AllreduceOptions::wait): runs it on this thread if the schedule in force takes it as its
  // next entry alone (Controller::RunNow) — checked already, as the negotiated request it
  // equals was — with no operation state unless it fails or goes back to be negotiated; its
  // request is built in an entry of this thread's whose name and shape keep their storage
  // (no copy of the name allocated). nullopt if not taken: Submit's path then.
  std::optional<Handle> AllreduceNow(const std::string& name, const void* in, void* out,
                                     DataType dtype, const std::vector<int64_t>& shape,
                                     const AllreduceOptions& options);
  // Checks every request and submits all of them in one batch, or none (every handle then
  // fails with the first error). Placed as Submit.
  std::vector<Handle> SubmitGroup(std::vector<Entry> entries, const Device& device,
                                  std::optional<Compression> compression);
  // A barrier of `process_set`: numbered per set, as every member calls the same barriers.
  std::string NextBarrierName(int process_set);
  // The next name of a set-0 barrier the coordinator interprets: AddProcessSet (`prefix`
  // kAddProcessSetPrefix), RemoveProcessSet, ElasticCommit; one sequence for all, as every
  // rank calls them in the same order.
  std::string NextControlName(const char* prefix) {
    return prefix + std::to_string(control_ops_++);
  }
  // The new set's id after a successful AddProcessSet handle.
  static int ProcessSetId(const Handle& handle);
  // Context::ProcessSetMember.
  absl::StatusOr<std::pair<int, int>> ProcessSetMember(int process_set) const;
  // Context::StartStep / EndStep / MarkStep: an ended step is also queued for the coordinator.
  void StartStep() { steps_->StartStep(); }
  StepTiming EndStep() { return Report(steps_->EndStep()); }
  StepTiming MarkStep() { return Report(steps_->MarkStep()); }
  absl::Status Shutdown();

 private:
  ContextImpl() = default;
  absl::Status Start(const Options& options);
  // Fails every pending and later operation with `status`; first call wins. Any thread.
  void Fail(const absl::Status& status);
  // The data plane failed with `status`. A dead peer usually breaks the connections a moment
  // before the coordinator's abort names it; waits briefly for that reason, fails the
  // context, and returns the status to report.
  absl::Status FailFromDataPlane(const absl::Status& status);
  std::shared_ptr<OpState> NewState(std::string name) const;
  // AllreduceNow's entry on the calling thread (`busy` while it runs). Not inlined: a library's
  // thread_local costs a lookup each time its address is taken, which the compiler repeats
  // after every call it makes.
  struct ThreadEntry {
    Entry entry;
    bool busy = false;
  };
  [[gnu::noinline]] static ThreadEntry& ThisThreadEntry();
  // The state of every submission AllreduceNow ran that succeeded: done, OK; never changed.
  static std::shared_ptr<OpState> Succeeded();
  // A caller about to wait for `state`, accepted: runs the scheduled entries it waits for on
  // this thread while the executor thread is idle (Executor::RunInline).
  void RunUntilDone(OpState& state);
  // Counts `state` in flight on steps_ until it completes; before it can complete.
  void StartOp(OpState& state) const;
  // Queues `step` (if any) for the coordinator; its timing, zero if none.
  StepTiming Report(const std::optional<StepSample>& step);
  // FAILED_PRECONDITION while this rank's join (Context::Join) is in flight.
  absl::Status CheckNotJoined() const;
  // CheckRequest against the size of the request's process set; FAILED_PRECONDITION if this
  // rank is not in that set.
  absl::Status CheckInSet(const TensorRequest& request) const;
  // INVALID_ARGUMENT, naming the op and tensor, for a null buffer the operation would touch:
  // the input of a tensor with elements (except on a broadcast's non-root, which never reads
  // it), the output of an allreduce or broadcast with elements, a caller's output buffer
  // (Entry::caller_output) that is null with a nonzero size. After placing it and CheckInSet
  // (the device, shape and set are valid).
  absl::Status CheckBuffers(const Entry& entry) const;

  Membership membership_;
  std::unique_ptr<ControlChannel> channel_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Communicator> communicator_;  // process set 0
  transport::CommunicatorSpec data_spec_;                  // communicator_'s; the base of the sets'
  std::unique_ptr<ProcessSetTable> process_sets_;
  TensorTable table_;
  ExecStats stats_;  // what the executor records for the coordinator
  // Splits step time; shared with the op states, which finish their op on it. The real clock:
  // tests of the split inject a fake one into StepClock itself.
  std::shared_ptr<StepClock> steps_ = std::make_shared<StepClock>(Clock::Real());
  // Recycled result buffers; shared with the handles that hold them.
  std::shared_ptr<OutputPool> outputs_ = OutputPool::Create(size_t{512} << 20);
  // Where operations run; owns the device plane, which runs GPU operations (none, with the
  // reason, when this build has none). Before executor_, which uses the plane.
  std::unique_ptr<DevicePlacement> placement_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Controller> controller_;
  // What this rank's threads are blocked on; the op states hold weak references.
  std::shared_ptr<WaitTracker> waits_;
  std::mutex barriers_mu_;
  std::map<int, uint64_t> barriers_;  // by process set; guarded by barriers_mu_
  std::atomic<uint64_t> control_ops_{0};
  mutable std::mutex join_mu_;
  std::shared_ptr<OpState> join_;  // guarded by join_mu_; the latest join, done or not
  // Set with join_ (under join_mu_); cleared, under it, by the first check that finds it done.
  mutable std::atomic<bool> join_in_flight_{false};
  std::mutex fail_mu_;
  std::condition_variable fail_cv_;
  absl::Status failure_;  // guarded by fail_mu_; the first failure
  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // guarded by shutdown_mu_
};

}  // namespace troika::internal
