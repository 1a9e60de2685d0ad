#pragma once
// RunBenchmark: N ranks as threads of this process. Each rank connects (a) a raw Gloo
// communicator, bootstrapped through an in-process store, and (b) a Troika Context attached
// to `coordinator`; then every rank measures the same schedule of workloads on both.
//
// Thread contract: RunBenchmark blocks until every rank thread has finished. `on_kind_done`
// runs on rank 0's thread (the other ranks may already be measuring the next kind; they wait
// for rank 0 at their next collective, outside any timed loop).

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/timing.h"
#include "bench/workloads.h"

namespace troika::bench {

struct BenchOptions {
  // Ranks (threads). Default 4.
  int ranks = 4;
  // What to measure, in this order.
  std::vector<Kind> kinds;
  // Requested sizes for the collectives (rounded per kind by EffectiveBytes).
  std::vector<size_t> sizes;
  // kManySmall: `small_tensors` allreduces of `small_tensor_bytes` each per iteration.
  int small_tensors = 256;
  size_t small_tensor_bytes = 16 * 1024;
  // Each kind's sizes are measured `repeat` times; results keep every repeat. Default 1.
  int repeat = 1;
  TimingOptions timing;
  // Troika's allreduce and latency ops wait with AllreduceOptions::wait (false:
  // Allreduce(...).Wait(), handing the collective to the executor thread). Default true.
  bool wait = true;
  // The data plane of both sides: "gloo" (TCP over loopback) or "shm" (shared memory).
  // Default "gloo".
  std::string transport = "gloo";
  // Coordinator address ("127.0.0.1:port") and job name for the Troika contexts.
  std::string coordinator;
  std::string job;
};

struct Measurement {
  Kind kind = Kind::kAllreduce;
  size_t bytes = 0;  // one tensor's bytes for kManySmall
  int tensors = 1;   // > 1 only for kManySmall
  // One entry per repeat: the maximum over ranks of the mean seconds per iteration.
  std::vector<double> raw_seconds;
  std::vector<double> troika_seconds;
};

// Per kind (in options.kinds order), the rows to measure (times still empty).
std::vector<std::vector<Measurement>> MeasurementSchedule(const BenchOptions& options);

using KindDone = std::function<void(Kind kind, const std::vector<Measurement>& rows)>;

// Fails with the first rank's error; on any error every rank's communicator and context are
// torn down so that no rank hangs.
absl::Status RunBenchmark(const BenchOptions& options, const KindDone& on_kind_done);

}  // namespace troika::bench
