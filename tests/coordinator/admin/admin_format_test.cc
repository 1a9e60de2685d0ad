// troikactl's text: aligned tables and the sections of `show`.

#include "coordinator/admin/admin_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(AdminFormatTest, TableColumnsAreAlignedToTheWidestCell) {
  EXPECT_EQ(FormatTable({{"A", "BB"}, {"long", "x"}}), "A     BB\nlong  x\n");
}

TEST(AdminFormatTest, EmptyJobListSaysSo) { EXPECT_EQ(FormatJobList({}), "no jobs\n"); }

TEST(AdminFormatTest, JobListHasOneRowPerJob) {
  std::string text = FormatJobList({{"train", 4, "running", 4, 2, absl::Seconds(90)}});
  EXPECT_THAT(text, HasSubstr("JOB    SIZE  STATE    ATTACHED  PENDING  AGE"));
  EXPECT_THAT(text, HasSubstr("train  4     running  4/4       2        1m30s"));
}

TEST(AdminFormatTest, ShowListsPendingTensorsWithMissingRanksAndAbortReason) {
  JobInfo info;
  info.name = "train";
  info.size = 2;
  info.state = "aborted";
  info.abort_reason = "cancelled by troikactl: x";
  info.ranks = {{0, "a", true, 0, 0, true, false}, {1, "", false, -1, -1, false, false}};
  info.pending = {{"grad/w", absl::Milliseconds(1500), {1}}};
  std::string text = FormatJobInfo(info);
  EXPECT_THAT(text, HasSubstr("Abort reason:    cancelled by troikactl: x"));
  EXPECT_THAT(text, HasSubstr("1     (not attached)  -      -      -"));
  EXPECT_THAT(text, HasSubstr("grad/w  1.5s     rank 1"));
  EXPECT_THAT(text, HasSubstr("Stragglers: no tensor negotiated yet"));
  EXPECT_THAT(text, HasSubstr("Schedules:       off\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("Elastic:"))) << "not elastic";
}

TEST(AdminFormatTest, ShowSaysAnElasticJobsBoundsAndWhyItsGenerationBegan) {
  JobInfo info;
  info.min_size = 2;
  info.max_size = 4;
  info.epoch = 1;
  EXPECT_THAT(FormatJobInfo(info), HasSubstr("Elastic:         2 to 4 ranks; generation 1\n"));
  info.epoch = 2;
  info.generation_cause = "rank 2 on a was killed by signal 9 (Killed)";
  EXPECT_THAT(FormatJobInfo(info),
              HasSubstr("Elastic:         2 to 4 ranks; generation 2, after rank 2 on a was "
                        "killed by signal 9 (Killed)\n"));
}

TEST(AdminFormatTest, ShowSaysWhichScheduleIsInForce) {
  JobInfo info;
  info.schedules = {true, 3, 2, 65, 4, 3, 2};
  EXPECT_THAT(FormatJobInfo(info),
              HasSubstr("Schedules:       schedule 3 in force (2 responses, 65 tensors; 4 ranks "
                        "executing it); 3 published, 2 ended\n"));
  info.schedules = {true, 0, 0, 0, 0, 3, 3};
  EXPECT_THAT(FormatJobInfo(info),
              HasSubstr("Schedules:       none in force; 3 published, 3 ended\n"));
}

}  // namespace
}  // namespace troika::coordinator
