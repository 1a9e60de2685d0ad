#pragma once
// CUDA errors as absl::Status, and an owned CUDA event (the GPU data plane, docs/gpu.md).

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace troika::cuda {

// INTERNAL naming `what` and CUDA's reason.
inline absl::Status CudaError(cudaError_t e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": CUDA: ", cudaGetErrorString(e)));
}

#define TROIKA_CUDA_RETURN(call, what)                            \
  do {                                                            \
    if (cudaError_t troika_e = (call); troika_e != cudaSuccess) { \
      return ::troika::cuda::CudaError(troika_e, what);           \
    }                                                             \
  } while (0)

// A CUDA event, destroyed with its owner (cudaEventDestroy on a pending event is deferred by
// CUDA, never a hazard).
struct Event {
  cudaEvent_t event = nullptr;
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

}  // namespace troika::cuda
