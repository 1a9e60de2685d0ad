#pragma once
// OpState: the shared completion record behind a Handle, and Entry: one submitted operation
// as the client tracks it until it is executed.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/messages.h"

namespace troika::internal {

class StepClock;
class WaitTracker;

// Thread-safe. Completed exactly once; later Complete() calls are ignored.
struct OpState {
  // Completes the operation; wakes waiters; finishes it on `step_clock` if set. Returns false
  // if it was already complete.
  bool Complete(absl::Status status) { return Finish(std::move(status), false); }
  // Completes it with its submission's refusal (a failed `status`): the operation never ran
  // (Handle::Refusal).
  bool Refuse(absl::Status status) { return Finish(std::move(status), true); }
  // Takes `buffer` (at least `bytes` bytes) as the handle-owned result; returns it.
  uint8_t* SetOutput(std::shared_ptr<uint8_t> buffer, size_t bytes);

  std::mutex mu;
  std::condition_variable cv;
  // Written under mu, after `status`; read under mu, or without it to find an operation done
  // (a Wait of one reads its final status without the lock).
  std::atomic<bool> done{false};
  absl::Status status;   // guarded by mu; final once done
  bool refused = false;  // guarded by mu: completed by Refuse; final once done
  // Written by the executor before Complete(); read by the caller after done.
  std::shared_ptr<uint8_t> output;  // from the context's OutputPool
  size_t output_bytes = 0;
  std::vector<int64_t> output_shape;
  std::vector<int64_t> received_splits;
  int joined_last_rank = -1;  // a completed join: the last rank to join
  int process_set_id = -1;    // a completed AddProcessSet: the new set's id
  // GPU operations (Handle::WaitOnStream): set, under mu and with cv notified, once the
  // operation is issued on the device; makes a stream wait for its completion event.
  std::function<void(void* stream)> stream_waiter;  // guarded by mu
  bool on_device = false;  // set before the handle is returned; constant after
  // Set before the handle is returned; constant after. A waiter blocked for longer than
  // kBlockedAfter reports `name` to `tracker` (libclient/handles/wait_tracker.h), if it still
  // lives.
  std::string name;
  std::weak_ptr<WaitTracker> tracker;
  // Handle::Poll of the op while not done (guarded by mu): the op's id with `tracker`
  // (WaitTracker::Polled; 0 until first polled) and when the tracker was last told.
  uint64_t poll_id = 0;
  absl::Time poll_noticed = absl::InfinitePast();
  // Set (after StepClock::OpStarted) before the operation is submitted, so whatever completes
  // it sees it; constant after. The one completion calls its OpFinished().
  std::shared_ptr<StepClock> step_clock;
  // Handle::OnDone callbacks registered before completion (guarded by mu); Complete() runs
  // them, outside mu, on the completing thread.
  std::vector<std::function<void(const absl::Status&)>> on_done;

 private:
  bool Finish(absl::Status status, bool refusal);
};

// One operation submitted on this rank and not yet executed — or, on a rank that has joined
// (Context::Join), a stand-in for a tensor it did not submit: no input (it contributes
// zeros), no output and no state (the result is discarded).
struct Entry {
  TensorRequest request;
  const void* in = nullptr;  // caller-owned input
  void* out = nullptr;       // caller-owned output (allreduce, broadcast; caller_output) or null
  std::shared_ptr<OpState> state;
  // Allgather, alltoall, reducescatter into a caller's buffer (Context::AllgatherInto etc.):
  // `out` (null only if out_bytes is 0) holds out_bytes bytes. Otherwise the result is
  // handle-owned.
  bool caller_output = false;
  size_t out_bytes = 0;
  // With caller_output (allgather, alltoall): a result larger than out_bytes goes to a
  // handle-owned buffer, the operation succeeding (OpOptions::handle_owned_if_too_small),
  // instead of failing this rank's handle with OUT_OF_RANGE.
  bool owned_if_too_small = false;
  // Set while executing, after which the collective itself may still succeed: this rank's own
  // failure (its caller's output buffer too small for the result), the handle's outcome
  // instead of OK. The rank took part in the collective all the same.
  absl::Status outcome{};
  // GPU entries (request.device kGpu): the CUDA device, and what to wait for before reading
  // `in` (troika::Device): `ready`, the caller's ready_event or its ready_stream marked at
  // submission (DevicePlane::MarkStream); else `ready_stream`, to be marked when issued.
  int device = -1;
  std::shared_ptr<void> ready = nullptr;
  void* ready_stream = nullptr;
};

}  // namespace troika::internal
