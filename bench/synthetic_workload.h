#pragma once
// A synthetic training workload for the autotuner: allreduced bytes per second as a function
// of the negotiation parameters. Throughput peaks at a fusion threshold of 6 MiB (too small:
// per-response overhead; too large: no overlap with backprop), falls off as a Gaussian in
// log2(fusion) with a 1.25-octave width, prefers a ~2 ms cycle time mildly, and carries 1%
// deterministic "measurement noise". Shared by troika-autotune-bench and the autotuner's
// unit test, so the figures in docs/PERFORMANCE.md are the ones the test asserts on.

#include <cmath>
#include <cstdint>

#include "coordinator/tuning/autotuner.h"

namespace troika::bench {

inline double SyntheticWorkload(const coordinator::TuningParams& p) {
  constexpr double kMiB = 1 << 20;
  const double u = std::log2(static_cast<double>(p.fusion_threshold_bytes) / (6.0 * kMiB));
  const double v = std::log2(absl::ToDoubleMilliseconds(p.cycle_time) / 2.0);
  const double clean = (8e9 * std::exp(-u * u / (2 * 1.25 * 1.25)) + 0.5e9) * (1 - 0.01 * v * v);
  return clean * (1 + 0.01 * std::sin(12.9898 * u + 78.233 * v));
}

// The grid sweep it is compared with: 12 fusion thresholds (64 KiB .. 128 MiB, doubling) x 3
// cycle times (0.5, 2, 8 ms). Returns the best score; `evaluations` gets the grid's size.
inline double SyntheticGridBest(int* evaluations) {
  double best = 0;
  *evaluations = 0;
  for (int i = 0; i < 12; ++i) {
    for (absl::Duration cycle :
         {absl::Microseconds(500), absl::Milliseconds(2), absl::Milliseconds(8)}) {
      best = std::max(best, SyntheticWorkload({(int64_t{64} << 10) << i, cycle}));
      ++*evaluations;
    }
  }
  return best;
}

}  // namespace troika::bench
