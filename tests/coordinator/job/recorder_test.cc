// Recorder on its own, over real parts: the record holds the job's identity, node blocks,
// process sets and generation; it is saved when asked and when the process sets changed, not
// otherwise; a restarted coordinator's job gets its node blocks and process sets back.

#include "coordinator/job/recorder.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RecorderTest : public ::testing::Test {
 protected:
  static constexpr int kSize = 4;

  RecorderTest()
      : roster_("j", kSize, 3, scheduler_),
        sets_(kSize, NegotiatorOptions{}),
        generations_(kSize, Elastic(options_), absl::Now()),
        recorder_("j", kSize, Secret::Of("token"), roster_, sets_, generations_,
                  [this](const v1::JobRecord& record) { saved_.push_back(record); }) {}

  static JobOptions& Elastic(JobOptions& options) {
    options.min_size = 2;
    options.max_size = 6;
    options.epoch = 3;
    options.generation_cause = "rank 1 exited";
    return options;
  }

  Scheduler scheduler_;
  JobOptions options_;
  Roster roster_;
  ProcessSets sets_;
  Generations generations_;
  std::vector<v1::JobRecord> saved_;
  Recorder recorder_;
};

TEST_F(RecorderTest, RecordHoldsIdentityNodesSetsAndGeneration) {
  bool added = false;
  ASSERT_TRUE(roster_.Reserve("h", 2, 1, &added).ok());
  sets_.Restore({{1, {0, 2}}}, 2);
  const v1::JobRecord record = recorder_.Record();
  EXPECT_EQ(record.name(), "j");
  EXPECT_EQ(record.size(), kSize);
  EXPECT_EQ(record.token_sha256(), Secret::Of("token").digest());
  ASSERT_EQ(record.nodes().count(1), 1u);
  EXPECT_EQ(record.nodes().at(1), "h");
  ASSERT_EQ(record.process_sets().count(1), 1u);
  EXPECT_THAT(record.process_sets().at(1).ranks(), ElementsAre(0, 2));
  EXPECT_EQ(record.next_process_set(), 2);
  EXPECT_EQ(record.min_size(), 2);
  EXPECT_EQ(record.max_size(), 6);
  EXPECT_EQ(record.epoch(), 3);
  EXPECT_EQ(record.generation_cause(), "rank 1 exited");
  EXPECT_TRUE(saved_.empty()) << "made, not saved";
}

TEST_F(RecorderTest, SavedWhenAskedAndWhenTheProcessSetsChanged) {
  recorder_.SaveIfSetsChanged();
  EXPECT_TRUE(saved_.empty()) << "no set changed";
  recorder_.Save();
  ASSERT_EQ(saved_.size(), 1u);
  sets_.Restore({{1, {1, 3}}}, 2);
  recorder_.SaveIfSetsChanged();
  ASSERT_EQ(saved_.size(), 2u);
  EXPECT_EQ(saved_.back().process_sets().count(1), 1u);
  recorder_.SaveIfSetsChanged();
  EXPECT_EQ(saved_.size(), 2u) << "saved once per change";
}

TEST_F(RecorderTest, RestoreGivesNodeBlocksAndSetsBackAndRefusesWhatDoesNotFit) {
  v1::JobRecord record;
  record.set_name("j");
  record.set_size(kSize);
  (*record.mutable_nodes())[0] = "a";
  (*record.mutable_process_sets())[2].add_ranks(1);
  record.set_next_process_set(3);
  ASSERT_TRUE(recorder_.Restore(record).ok());
  EXPECT_THAT(roster_.nodes(), ElementsAre(std::pair<const int, std::string>(0, "a")));
  ASSERT_NE(sets_.ranks(2), nullptr);
  EXPECT_THAT(*sets_.ranks(2), ElementsAre(1));
  EXPECT_EQ(sets_.next_id(), 3);
  recorder_.SaveIfSetsChanged();
  EXPECT_TRUE(saved_.empty()) << "restored, not changed";

  v1::JobRecord bad = record;
  (*bad.mutable_nodes())[kSize] = "b";
  absl::Status refused = recorder_.Restore(bad);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("node rank 4"));
}

}  // namespace
}  // namespace troika::coordinator
