// The coordinator's scrape of a job's steady-state schedules.

#include "coordinator/service/coordinator_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_schedule_fixture.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::JobScheduleTest;
using test_util::Samples;

TEST_F(JobScheduleTest, TheScrapeShowsTheScheduleInForceAndTheEndedOnes) {
  CoordinatorMetrics metrics(registry_, {});
  auto families = metrics.Collect();
  EXPECT_EQ(Samples(families, "troika_schedules_total")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_schedules_ended_total")["troika_job=train"], 0);
  EXPECT_EQ(Samples(families, "troika_schedule_tensors")["troika_job=train"], 2);
  // Both ranks' void entry completed: the schedule ended.
  ASSERT_TRUE(job_->EndSchedule(&s0_, schedule_->id, {0}).ok());
  ASSERT_TRUE(job_->EndSchedule(&s1_, schedule_->id, {1}).ok());
  families = metrics.Collect();
  EXPECT_EQ(Samples(families, "troika_schedules_ended_total")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_schedule_tensors")["troika_job=train"], 0);
}

}  // namespace
}  // namespace troika::coordinator
