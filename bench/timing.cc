#include "bench/timing.h"

#include <algorithm>
#include <cmath>

#include "common/status_macros.h"

namespace troika::bench {
namespace {

constexpr double kWarmupSeconds = 0.05;

absl::StatusOr<double> MeanSeconds(const std::function<absl::Status()>& iteration, int count) {
  const absl::Time start = absl::Now();
  for (int i = 0; i < count; ++i) RETURN_IF_ERROR(iteration());
  return absl::ToDoubleSeconds(absl::Now() - start) / count;
}

absl::StatusOr<double> SlowestRank(transport::Communicator& sync, double seconds) {
  RETURN_IF_ERROR(sync.Allreduce(&seconds, 1, DataType::kFloat64, ReduceOp::kMax));
  return seconds;
}

int Count(double wanted_seconds, double per_iteration, int max) {
  const double count = std::ceil(wanted_seconds / std::max(per_iteration, 1e-9));
  return static_cast<int>(std::clamp(count, 1.0, static_cast<double>(max)));
}

}  // namespace

absl::StatusOr<double> TimeIterations(transport::Communicator& sync,
                                      const std::function<absl::Status()>& iteration,
                                      const TimingOptions& options) {
  ASSIGN_OR_RETURN(double cold, MeanSeconds(iteration, 1));
  ASSIGN_OR_RETURN(cold, SlowestRank(sync, cold));
  ASSIGN_OR_RETURN(double warm, MeanSeconds(iteration, Count(kWarmupSeconds, cold, 1000)));
  ASSIGN_OR_RETURN(warm, SlowestRank(sync, warm));
  const int iterations = Count(absl::ToDoubleSeconds(options.target), warm, options.max_iterations);
  RETURN_IF_ERROR(sync.Barrier());
  return MeanSeconds(iteration, iterations);
}

}  // namespace troika::bench
