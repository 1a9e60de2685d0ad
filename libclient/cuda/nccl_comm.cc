#include "libclient/cuda/nccl_comm.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troika::cuda {

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(const NcclLibrary& nccl,
                                                           transport::Store& store,
                                                           const std::string& key, int rank,
                                                           int size, absl::Duration timeout,
                                                           const std::atomic<bool>& aborted) {
  const absl::Time deadline = absl::Now() + timeout;
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = nccl.GetUniqueId(&id); r != ncclSuccess) {
      return nccl.Error(r, "creating the NCCL unique id");
    }
    if (absl::Status s = store.Set(key, std::string(id.internal, sizeof(id.internal))); !s.ok()) {
      return s;
    }
  } else {
    absl::StatusOr<std::string> value = store.Get(key, timeout);
    if (!value.ok()) {
      return absl::Status(value.status().code(),
                          absl::StrCat("waiting for rank 0's NCCL id: ", value.status().message()));
    }
    if (value->size() != sizeof(id.internal)) {
      return absl::InternalError(absl::StrCat("NCCL id under '", key, "' has ", value->size(),
                                              " bytes, not ", sizeof(id.internal)));
    }
    std::copy(value->begin(), value->end(), id.internal);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t raw = nullptr;
  ncclResult_t result = nccl.CommInitRankConfig(&raw, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return nccl.Error(result,
                      absl::StrCat("creating the NCCL communicator of rank ", rank, "/", size));
  }
  std::unique_ptr<NcclComm> comm(new NcclComm(nccl, raw));
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t r = nccl.CommGetAsyncError(raw, &state); r != ncclSuccess) state = r;
    if (state == ncclSuccess) return comm;
    if (state != ncclInProgress) {
      return nccl.Error(state,
                        absl::StrCat("connecting the NCCL communicator of rank ", rank, "/", size));
    }
    if (aborted.load()) return absl::CancelledError("aborted while connecting NCCL");
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the NCCL communicator of ", size, " ranks did not connect within ",
                       absl::FormatDuration(timeout), " (a rank is missing or cannot be reached)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

NcclComm::~NcclComm() { Abort(); }

absl::Status NcclComm::Settle(ncclResult_t result, const std::string& what,
                              const std::atomic<bool>& aborted) {
  while (result == ncclInProgress) {
    if (aborted.load()) return absl::CancelledError(absl::StrCat(what, ": aborted"));
    std::this_thread::yield();
    if (ncclResult_t r = nccl_.CommGetAsyncError(comm_, &result); r != ncclSuccess) result = r;
  }
  return result == ncclSuccess ? absl::OkStatus() : nccl_.Error(result, what);
}

absl::Status NcclComm::AsyncError() {
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = nccl_.CommGetAsyncError(comm_, &state); r != ncclSuccess) state = r;
  if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
  return nccl_.Error(state, "NCCL communicator");
}

void NcclComm::Abort() {
  if (aborted_.exchange(true)) return;
  nccl_.CommAbort(comm_);
}

}  // namespace troika::cuda
