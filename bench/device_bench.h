#pragma once
// troika-bench --device=cuda: the GPU data plane against the device's own limits, measured in
// one run — pack+unpack bandwidth of the batched copy kernels as a fraction of the device's
// device-to-device copy bandwidth, and the per-op cost of a small allreduce through Troika
// against a raw ncclAllReduce (docs/PERFORMANCE.md). Built without the GPU data plane, it
// fails with the reason.

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace troika::bench {

struct DeviceBenchOptions {
  std::string coordinator;  // host:port of a running coordinator
  std::string job;
  int repeat = 1;  // measure this many times and report medians
};

absl::Status RunDeviceBenchmark(const DeviceBenchOptions& options, std::FILE* out);

}  // namespace troika::bench
