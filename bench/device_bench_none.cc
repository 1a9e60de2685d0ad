// troika-bench --device=cuda in a build without the GPU data plane.

#include "bench/device_bench.h"

namespace troika::bench {

absl::Status RunDeviceBenchmark(const DeviceBenchOptions&, std::FILE*) {
  return absl::UnimplementedError(
      "--device=cuda needs a build with the GPU data plane (CUDA and NCCL found at configure "
      "time; docs/gpu.md)");
}

}  // namespace troika::bench
