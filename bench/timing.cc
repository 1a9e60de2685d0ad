#include "bench/timing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench/report.h"
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

// Runs `iteration` cold, then warm for about kWarmupSeconds; the slowest rank's warm mean.
absl::StatusOr<double> WarmUp(transport::Communicator& sync,
                              const std::function<absl::Status()>& iteration) {
  ASSIGN_OR_RETURN(double cold, MeanSeconds(iteration, 1));
  ASSIGN_OR_RETURN(cold, SlowestRank(sync, cold));
  ASSIGN_OR_RETURN(double warm, MeanSeconds(iteration, Count(kWarmupSeconds, cold, 1000)));
  return SlowestRank(sync, warm);
}

}  // namespace

absl::StatusOr<double> TimeIterations(transport::Communicator& sync,
                                      const std::function<absl::Status()>& iteration,
                                      const TimingOptions& options) {
  ASSIGN_OR_RETURN(double warm, WarmUp(sync, iteration));
  const int iterations = Count(absl::ToDoubleSeconds(options.target), warm, options.max_iterations);
  RETURN_IF_ERROR(sync.Barrier());
  return MeanSeconds(iteration, iterations);
}

absl::StatusOr<std::pair<double, double>> TimeInterleaved(transport::Communicator& sync,
                                                          const std::function<absl::Status()>& a,
                                                          const std::function<absl::Status()>& b,
                                                          const TimingOptions& options) {
  constexpr double kBlockSeconds = 0.01;
  ASSIGN_OR_RETURN(double warm_a, WarmUp(sync, a));
  ASSIGN_OR_RETURN(double warm_b, WarmUp(sync, b));
  const int count_a = Count(kBlockSeconds, warm_a, options.max_iterations);
  const int count_b = Count(kBlockSeconds, warm_b, options.max_iterations);
  const int blocks = std::max(5, Count(absl::ToDoubleSeconds(options.target),
                                       std::max(count_a * warm_a, count_b * warm_b), 1000));
  std::vector<double> means_a, means_b;
  for (int i = 0; i < blocks; ++i) {
    RETURN_IF_ERROR(sync.Barrier());
    ASSIGN_OR_RETURN(double mean_a, MeanSeconds(a, count_a));
    RETURN_IF_ERROR(sync.Barrier());
    ASSIGN_OR_RETURN(double mean_b, MeanSeconds(b, count_b));
    means_a.push_back(mean_a);
    means_b.push_back(mean_b);
  }
  return std::make_pair(Median(std::move(means_a)), Median(std::move(means_b)));
}

}  // namespace troika::bench
