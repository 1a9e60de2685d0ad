#pragma once
// NcclComm: one non-blocking NCCL communicator of a group of ranks, bootstrapped through the
// job's key-value store (rank 0 publishes its ncclUniqueId). Non-blocking so that set-up and
// every call can be abandoned: an abort flag is checked while a call is in progress, and
// Abort() (ncclCommAbort) works from any thread (docs/gpu.md). NCCL is called through an
// NcclLibrary (loaded at run time), which must outlive the communicator.

#include <nccl.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libclient/cuda/nccl_library.h"
#include "libclient/transport/store.h"

namespace troika::cuda {

class NcclComm {
 public:
  // Creates this rank's communicator on the current CUDA device. `key` names the group's id
  // in `store`, unique per group and per rebuild. Fails after `timeout`, or at once when
  // `aborted` becomes true.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(const NcclLibrary& nccl,
                                                          transport::Store& store,
                                                          const std::string& key, int rank,
                                                          int size, absl::Duration timeout,
                                                          const std::atomic<bool>& aborted);
  ~NcclComm();  // Abort(): by then every operation issued on it has finished or failed
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  const NcclLibrary& nccl() const { return nccl_; }

  // A non-blocking communicator may answer ncclInProgress: waits until the call took effect
  // (or `aborted`). Returns the call's outcome.
  absl::Status Settle(ncclResult_t result, const std::string& what,
                      const std::atomic<bool>& aborted);
  // An error NCCL detected after the fact (a peer vanished, a network failure), or OK.
  absl::Status AsyncError();
  // ncclCommAbort, once: operations in progress on the device end. Thread-safe.
  void Abort();

 private:
  NcclComm(const NcclLibrary& nccl, ncclComm_t comm) : nccl_(nccl), comm_(comm) {}
  const NcclLibrary& nccl_;
  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
};

}  // namespace troika::cuda
