#pragma once
// DevicePlane: executes GPU responses (tensors in CUDA device memory) on the device — NCCL
// communicators, a device fusion buffer, batched pack/unpack kernels, a stream of its own and a
// finisher thread that completes the handles when the device is done (docs/gpu.md).
//
// Core code knows only this interface. Which implementation exists is decided at link time:
// libclient/cuda/ when the build found CUDA and NCCL, libclient/execution/device_plane_none.cc
// otherwise; there is no #if anywhere.
//
// Thread contract: Launch() and DropGroup() from the executor thread; CheckDevice() and
// MarkStream() from any submitting thread; Abort() from any thread; Stop() once, from the owner,
// after the executor stopped.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "libclient/handles/op_state.h"
#include "libclient/transport/store.h"

namespace troika::internal {

// The ranks a response runs among: process set `set` (0: the whole job), this rank's
// position in it and its size.
struct DeviceGroup {
  int set = 0;
  int rank = 0;
  int size = 1;
};

struct DevicePlaneOptions {
  // Bootstraps communicators (NCCL unique ids); keys start with `store_prefix`.
  transport::Store* store = nullptr;
  std::string store_prefix = "gpu/0/";
  // Upper bound for a communicator's set-up.
  absl::Duration timeout = absl::Seconds(300);
  // Called (on the finisher thread) when the device or a communicator fails asynchronously;
  // returns the status to fail the in-flight operations with (see Executor's on_failure).
  std::function<absl::Status(absl::Status)> on_failure;
  // The NCCL to load at the first GPU operation (Options::nccl_library); empty: search.
  std::string nccl_library;
};

class DevicePlane {
 public:
  virtual ~DevicePlane() = default;

  // OK if `ordinal` is a usable CUDA device of this process; FAILED_PRECONDITION otherwise,
  // with the reason.
  virtual absl::Status CheckDevice(int ordinal) = 0;
  // Marks the work queued so far on `stream` (a cudaStream_t of device `ordinal`, not null):
  // the returned cudaEvent_t, recorded there, for Entry::ready. Null if the calling thread's
  // current device is another (its device is never changed): Entry::ready_stream then.
  virtual absl::StatusOr<std::shared_ptr<void>> MarkStream(int ordinal, void* stream) = 0;

  // Issues `response` (device kGpu) for this rank's `entries` (parallel to response.names;
  // joined-rank stand-ins have no input, output or state) among `group`, and returns without
  // waiting for the device. The entries' states complete later, on the finisher thread —
  // or, on a non-OK return (a data-plane failure), not at all: the caller completes them.
  virtual absl::Status Launch(const Response& response, const DeviceGroup& group,
                              std::vector<Entry>& entries) = 0;

  // Process set `set` was removed: its communicator is released.
  virtual void DropGroup(int set) = 0;

  // Aborts every communicator (ncclCommAbort): issued and later operations fail. Idempotent.
  virtual void Abort() = 0;
  // Waits for issued operations to finish (or fail) and completes them; releases the device.
  virtual void Stop() = 0;
};

// The device plane of this build, or UNIMPLEMENTED naming why there is none (libtroika built
// without CUDA/NCCL).
absl::StatusOr<std::unique_ptr<DevicePlane>> CreateDevicePlane(DevicePlaneOptions options);

}  // namespace troika::internal
