#pragma once
// Timing one workload on every rank, nccl-tests style: warm up, agree on an iteration count,
// start together, and time a loop of back-to-back iterations.

#include <functional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libclient/transport/communicator.h"

namespace troika::bench {

struct TimingOptions {
  // Aim for a timed loop about this long. Default 0.3 s.
  absl::Duration target = absl::Milliseconds(300);
  // At most this many timed iterations. Default 100000.
  int max_iterations = 100000;
};

// Every rank calls this at the same point with the same kind of `iteration`. Runs one
// iteration cold, then warm-up iterations (about 50 ms), then a timed loop sized for
// `options.target`. The warm-up and timed iteration counts are derived from the slowest
// rank's estimates, agreed over `sync` (a raw communicator, used identically for every
// workload), so all ranks issue the same collectives. Returns this rank's mean seconds per
// timed iteration; the caller takes the maximum over ranks. Blocks.
absl::StatusOr<double> TimeIterations(transport::Communicator& sync,
                                      const std::function<absl::Status()>& iteration,
                                      const TimingOptions& options);

// Two implementations of one workload side by side, for a ratio that this (noisy, shared)
// machine's slow drifts cannot skew: after TimeIterations' warm-up of each, alternates timed
// blocks of `a` and `b` (about 10 ms each, each starting with every rank at a barrier of
// `sync`) for about `options.target` each. Returns this rank's median block mean of `a` and
// of `b`, seconds per iteration. Every rank calls it at the same point; blocks.
absl::StatusOr<std::pair<double, double>> TimeInterleaved(transport::Communicator& sync,
                                                          const std::function<absl::Status()>& a,
                                                          const std::function<absl::Status()>& b,
                                                          const TimingOptions& options);

}  // namespace troika::bench
