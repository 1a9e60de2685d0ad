#include "coordinator/tuning/autotuner.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/synthetic_workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
const TuningParams kStart{64 * kMiB, absl::Milliseconds(1)};

AutotuneOptions Options(int warmup, int budget) {
  AutotuneOptions options;
  options.warmup_samples = warmup;
  options.max_samples = budget;
  return options;
}

// The synthetic workload of troika-autotune-bench (bench/synthetic_workload.h).
double Workload(const TuningParams& p) { return bench::SyntheticWorkload(p); }

TEST(AutotunerTest, WarmupSamplesDoNotCountOrChangeParameters) {
  Autotuner tuner(Options(/*warmup=*/3, /*budget=*/5), kStart);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tuner.warmup_left(), 3 - i);
    EXPECT_FALSE(tuner.AddSample(1e12));  // a huge warm-up score must not become the best
    EXPECT_EQ(tuner.current(), kStart);
    EXPECT_EQ(tuner.evaluations(), 0);
  }
  EXPECT_EQ(tuner.csv_rows().size(), 1u);  // the header only
  EXPECT_TRUE(tuner.AddSample(1e9));       // the start point's evaluation
  EXPECT_EQ(tuner.evaluations(), 1);
  EXPECT_EQ(tuner.best(), kStart);
  EXPECT_EQ(tuner.best_score(), 1e9);
  EXPECT_NE(tuner.current(), kStart);
}

TEST(AutotunerTest, BudgetIsRespectedAndDoneSettlesOnTheBest) {
  Autotuner tuner(Options(/*warmup=*/0, /*budget=*/6), kStart);
  std::vector<TuningParams> tried;
  const std::vector<double> scores = {3e9, 1e9, 7e9, 2e9, 5e9, 6e9};
  for (double score : scores) {
    ASSERT_FALSE(tuner.done());
    tried.push_back(tuner.current());
    tuner.AddSample(score);
  }
  EXPECT_TRUE(tuner.done());
  EXPECT_EQ(tuner.evaluations(), 6);
  EXPECT_EQ(tuner.best(), tried[2]);
  EXPECT_EQ(tuner.best_score(), 7e9);
  EXPECT_EQ(tuner.current(), tuner.best());
  // Every evaluated configuration was a different one.
  for (size_t i = 0; i < tried.size(); ++i) {
    for (size_t j = i + 1; j < tried.size(); ++j) EXPECT_NE(tried[i], tried[j]) << i << " " << j;
  }
  // After the budget, samples are ignored.
  EXPECT_FALSE(tuner.AddSample(1e15));
  EXPECT_EQ(tuner.evaluations(), 6);
  EXPECT_EQ(tuner.best_score(), 7e9);
}

TEST(AutotunerTest, ZeroBudgetIsDoneWithTheStartPoint) {
  Autotuner tuner(Options(/*warmup=*/3, /*budget=*/0), kStart);
  EXPECT_TRUE(tuner.done());
  EXPECT_EQ(tuner.current(), kStart);
  EXPECT_FALSE(tuner.AddSample(1e9));
  EXPECT_EQ(tuner.evaluations(), 0);
}

TEST(AutotunerTest, StartPointIsClampedIntoTheSearchRange) {
  Autotuner tuner(Options(0, 5), TuningParams{int64_t{1} << 40, absl::Microseconds(1)});
  EXPECT_EQ(tuner.current().fusion_threshold_bytes, 256 * kMiB);
  EXPECT_EQ(tuner.current().cycle_time, absl::Microseconds(100));
}

TEST(AutotunerTest, EveryProposalLiesInTheSearchRange) {
  Autotuner tuner(Options(0, 25), kStart);
  while (!tuner.done()) {
    const TuningParams& p = tuner.current();
    EXPECT_GE(p.fusion_threshold_bytes, 64 << 10);
    EXPECT_LE(p.fusion_threshold_bytes, 256 * kMiB);
    EXPECT_GE(p.cycle_time, absl::Microseconds(100));
    EXPECT_LE(p.cycle_time, absl::Milliseconds(20));
    tuner.AddSample(Workload(p));
  }
}

std::vector<TuningParams> Trajectory(uint64_t seed, int budget) {
  AutotuneOptions options = Options(0, budget);
  options.seed = seed;
  Autotuner tuner(options, kStart);
  std::vector<TuningParams> tried;
  while (!tuner.done()) {
    tried.push_back(tuner.current());
    tuner.AddSample(Workload(tuner.current()));
  }
  return tried;
}

TEST(AutotunerTest, DeterministicGivenSeedAndScores) {
  EXPECT_EQ(Trajectory(7, 10), Trajectory(7, 10));
  // The seed moves the space-filling points (the 2nd to 4th evaluations), not the start.
  const auto a = Trajectory(1, 4), b = Trajectory(2, 4);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(std::vector<TuningParams>(a.begin() + 1, a.end()),
            std::vector<TuningParams>(b.begin() + 1, b.end()));
}

TEST(AutotunerTest, ReachesTheGridSweepOptimumWithFewerEvaluations) {
  int grid_evaluations = 0;
  const double grid_best = bench::SyntheticGridBest(&grid_evaluations);
  Autotuner tuner(Options(/*warmup=*/3, /*budget=*/15), kStart);
  int samples = 0;
  while (!tuner.done()) {
    tuner.AddSample(Workload(tuner.current()));
    ++samples;
  }
  std::printf("grid sweep: %d evaluations, best %.4g B/s\n", grid_evaluations, grid_best);
  std::printf(
      "autotuner: %d evaluations (+%d warm-up), best %.4g B/s (%.1f%% of grid) at "
      "fusion %lld bytes, cycle %s\n",
      tuner.evaluations(), samples - tuner.evaluations(), tuner.best_score(),
      100 * tuner.best_score() / grid_best,
      static_cast<long long>(tuner.best().fusion_threshold_bytes),
      absl::FormatDuration(tuner.best().cycle_time).c_str());
  EXPECT_EQ(tuner.evaluations(), 15);
  EXPECT_EQ(samples, 18);
  EXPECT_GE(tuner.best_score(), 0.85 * grid_best);
  EXPECT_EQ(tuner.best_score(), Workload(tuner.best()));
  // The start point (64 MiB) is far off the peak: the tuner must have moved away from it.
  EXPECT_GT(tuner.best_score(), 2 * Workload(kStart));
}

TEST(AutotunerTest, CsvHasAHeaderAndOneRowPerEvaluation) {
  Autotuner tuner(Options(/*warmup=*/2, /*budget=*/4), kStart);
  const std::vector<double> scores = {5, 6, 2e9, 1e9, 3e9, 2.5e9};  // two warm-up samples first
  for (double s : scores) tuner.AddSample(s);
  const std::vector<std::string>& rows = tuner.csv_rows();
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0], "sample,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_second,best");
  EXPECT_EQ(rows[1], "1,67108864,1.000,2000000000.0,2000000000.0");
  for (int i = 1; i <= 4; ++i) {
    const std::vector<std::string> fields = absl::StrSplit(rows[i], ',');
    ASSERT_EQ(fields.size(), 5u) << rows[i];
    EXPECT_EQ(fields[0], std::to_string(i));
  }
  EXPECT_THAT(rows[2], HasSubstr(",1000000000.0,2000000000.0"));
  EXPECT_THAT(rows[3], HasSubstr(",3000000000.0,3000000000.0"));
  EXPECT_THAT(rows[4], HasSubstr(",2500000000.0,3000000000.0"));

  const std::string path = ::testing::TempDir() + "/autotune.csv";
  ASSERT_TRUE(tuner.WriteCsv(path).ok());
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) EXPECT_EQ(line, rows[lines++]);
  EXPECT_EQ(lines, 5);
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TuningParamsFileTest, SaveThenLoadRoundTrips) {
  const std::string path = ::testing::TempDir() + "/tuning_params";
  const TuningParams params{6 * kMiB + 3, absl::Microseconds(2500)};
  ASSERT_TRUE(SaveTuningParams(path, params).ok());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "fusion_threshold_bytes=6291459\ncycle_time_us=2500\n");
  absl::StatusOr<TuningParams> loaded = LoadTuningParams(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, params);
}

TEST(TuningParamsFileTest, CommentsBlankLinesAndSpacesAreAllowed) {
  const std::string path = ::testing::TempDir() + "/tuning_params_commented";
  WriteText(path, "# tuned on 8 ranks\n\n cycle_time_us = 300 \nfusion_threshold_bytes=1024\n");
  absl::StatusOr<TuningParams> loaded = LoadTuningParams(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, (TuningParams{1024, absl::Microseconds(300)}));
}

TEST(TuningParamsFileTest, MalformedFileNamesTheFileAndTheBadLine) {
  const std::string path = ::testing::TempDir() + "/tuning_params_bad";
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"fusion_threshold_bytes=1024\ncycle_time_us=fast\n", "line 2 'cycle_time_us=fast'"},
      {"fusion_threshold_bytes=-5\ncycle_time_us=1\n", "line 1 'fusion_threshold_bytes=-5'"},
      {"fusion_threshold_bytes 1024\n", "line 1 'fusion_threshold_bytes 1024': expected key=value"},
      {"cycle_time_us=1\nfusion=1\n", "line 2 'fusion=1': unknown key"},
      {"cycle_time_us=1\ncycle_time_us=2\n", "line 2 'cycle_time_us=2': duplicate key"},
      {"cycle_time_us=1\n", "missing fusion_threshold_bytes"},
  };
  for (const Case& c : cases) {
    WriteText(path, c.text);
    absl::StatusOr<TuningParams> loaded = LoadTuningParams(path);
    ASSERT_FALSE(loaded.ok()) << c.text;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(loaded.status().message(), HasSubstr("'" + path + "'"));
    EXPECT_THAT(loaded.status().message(), HasSubstr(c.expected));
  }
}

TEST(TuningParamsFileTest, MissingFileFailsNamingIt) {
  const std::string path = ::testing::TempDir() + "/no_such_tuning_params";
  std::remove(path.c_str());
  absl::StatusOr<TuningParams> loaded = LoadTuningParams(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace troika::coordinator
