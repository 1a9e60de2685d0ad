// troika-autotune-bench: the coordinator's autotuner against a grid sweep on a synthetic
// workload whose optimum a grid can find (bench/synthetic_workload.h): how close the tuner
// gets to the grid's best, with how many evaluations, over many seeds.

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/synthetic_workload.h"
#include "common/flags_usage.h"
#include "coordinator/tuning/autotuner.h"

ABSL_FLAG(int, seeds, 50, "tuner runs, one per seed");
ABSL_FLAG(int, budget, 15, "configurations the tuner evaluates (--autotune_max_samples)");
ABSL_FLAG(int, warmup, 3, "warm-up samples (--autotune_warmup_samples)");

int main(int argc, char** argv) {
  troika::ShowFlagsOf("bench/autotune_main.cc");
  absl::SetProgramUsageMessage(
      "The autotuner vs a grid sweep on a synthetic workload.\n"
      "Usage: troika-autotune-bench [--seeds 50] [--budget 15]");
  troika::HandleHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);
  using troika::coordinator::AutotuneOptions;
  using troika::coordinator::Autotuner;
  using troika::coordinator::TuningParams;

  int grid_evaluations = 0;
  const double grid_best = troika::bench::SyntheticGridBest(&grid_evaluations);
  std::vector<double> ratios;
  for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
    AutotuneOptions options;
    options.warmup_samples = absl::GetFlag(FLAGS_warmup);
    options.max_samples = absl::GetFlag(FLAGS_budget);
    options.seed = static_cast<uint64_t>(seed);
    // The coordinator's default start: 64 MiB, 1 ms — far from this workload's optimum.
    Autotuner tuner(options, TuningParams{int64_t{64} << 20, absl::Milliseconds(1)});
    while (!tuner.done()) tuner.AddSample(troika::bench::SyntheticWorkload(tuner.current()));
    ratios.push_back(tuner.best_score() / grid_best);
  }
  std::sort(ratios.begin(), ratios.end());
  const int within = static_cast<int>(
      std::count_if(ratios.begin(), ratios.end(), [](double r) { return r >= 0.85; }));
  std::printf("troika-autotune-bench: synthetic workload, optimum at fusion 6 MiB, cycle 2 ms\n");
  std::printf("grid sweep: %d evaluations, best %.4g B/s\n", grid_evaluations, grid_best);
  std::printf(
      "autotuner:  %d evaluations (+%d warm-up), %zu seeds: tuner best / grid best min %.3f, "
      "median %.3f, max %.3f; within 15%% of the grid: %d/%zu\n",
      absl::GetFlag(FLAGS_budget), absl::GetFlag(FLAGS_warmup), ratios.size(), ratios.front(),
      ratios[ratios.size() / 2], ratios.back(), within, ratios.size());
  return 0;
}
