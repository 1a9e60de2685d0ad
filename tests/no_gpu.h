#pragma once
// For the GPU tests' GTEST_SKIP: why this process cannot use a CUDA device, or "" if it can.

#include <cuda_runtime.h>

#include <string>

namespace troika::testing {

inline std::string NoGpu() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return "";
  return std::string("no CUDA device in this process (") +
         (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
         "): the GPU tests run only on a machine with an NVIDIA GPU";
}

}  // namespace troika::testing
