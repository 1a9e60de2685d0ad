// troika-example-train under troikarun: data parallelism gives the same model as training on
// one rank, and bad set-ups fail with a message.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

// Trains through troikarun (`launch`: its -np and other options) on the default global batch
// and returns rank 0's final weights.
std::vector<double> TrainAndDump(const std::string& launch, int steps) {
  const std::string dir = MakeScratchDir("example");
  const std::string weights = dir + "/weights.txt";
  CommandResult r =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " ", launch, " -- ", EXAMPLE_TRAIN_BINARY,
                            " --steps ", steps, " --dump_weights ", weights),
               dir, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 0) << launch << ": " << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex(absl::StrCat(
                         "\\[0\\] troika-example-train: done: ", steps, " steps in [0-9.]+ s")))
      << launch;
  return ReadWeights(weights);
}

// Data parallelism is exact in real arithmetic: each rank's gradient is the mean over its
// shard of the global batch, and the average of the per-rank means equals the global mean.
// In float32 the results still differ in the last bits, because the sums are done in a
// different order (per-shard means, then an allreduce whose reduction order depends on the
// algorithm and the number of ranks, instead of one mean over the whole batch), and those
// rounding differences pass through 40 SGD steps. Measured differences are about 3e-8; the
// tolerance of 1e-5 (absolute + relative) is far below the effect of a real bug: with every
// rank training on the same shard, for instance, weights move by 1e-4 to 1e-3.
TEST(ExampleTrainTest, TwoAndFourRanksGiveTheWeightsOfOneRank) {
  constexpr int kSteps = 40;
  const std::vector<double> one = TrainAndDump("-np 1", kSteps);
  ASSERT_EQ(one.size(), 16u * 32 + 32 + 32 + 1) << "fc1 [32,16] + [32], fc2 [1,32] + [1]";
  // One agent with 2 and 4 ranks, and two agents (nodes) of two ranks each.
  for (const char* launch : {"-np 2", "-np 4", "-np 4 --nproc-per-node 2"}) {
    ExpectSameWeights(one, TrainAndDump(launch, kSteps), launch);
  }
  // Training moved the weights: the comparison above is not between two initial states.
  const std::vector<double> untrained = TrainAndDump("-np 1", 0);
  ASSERT_EQ(untrained.size(), one.size());
  double moved = 0;
  for (size_t i = 0; i < one.size(); ++i) moved = std::max(moved, std::fabs(one[i] - untrained[i]));
  EXPECT_GT(moved, 1e-2);
}

TEST(ExampleTrainTest, BatchNotDivisibleByTheRanksFailsWithAMessage) {
  const std::string dir = MakeScratchDir("example-batch");
  CommandResult r = RunShell(
      absl::StrCat("exec ", TROIKARUN_BINARY, " -np 3 -- ", EXAMPLE_TRAIN_BINARY, " --batch 256"),
      dir, absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--batch=256 must be a positive multiple of the 3 ranks"));
}

TEST(ExampleTrainTest, WithoutTroikaEnvironmentFailsWithAMessage) {
  const std::string dir = MakeScratchDir("example-noenv");
  CommandResult r =
      RunShell(absl::StrCat("exec env -u TROIKA_COORDINATOR -u TROIKA_JOB ", EXAMPLE_TRAIN_BINARY),
               dir, absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("TROIKA_COORDINATOR and TROIKA_JOB must be set"));
}

}  // namespace
}  // namespace troika::testing
