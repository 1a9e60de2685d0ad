// EndedJobs, and the registry that fills it: an aborted, released job's own ranks hear its
// abort when they come too late to find it; nobody else learns anything.

#include "coordinator/job/ended_jobs.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/scheduler.h"
#include "coordinator/job/job_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::UnixEpoch() + absl::Hours(1);

TEST(EndedJobsTest, AnAbortAnswersItsOwnTokenOnlyAndOnlyForTheTtl) {
  EndedJobs ended(10, absl::Minutes(2));
  ended.Remember("train", Secret::Of("mine"), absl::AbortedError("job 'train' aborted: x"), kStart);
  std::optional<absl::Status> seen = ended.Lookup("train", "mine", kStart + absl::Minutes(1));
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(seen->message(), "job 'train' aborted: x");
  EXPECT_FALSE(ended.Lookup("train", "not mine", kStart).has_value());
  EXPECT_FALSE(ended.Lookup("train", "", kStart).has_value());
  EXPECT_FALSE(ended.Lookup("other", "mine", kStart).has_value());
  EXPECT_FALSE(ended.Lookup("train", "mine", kStart + absl::Minutes(2)).has_value());
  EXPECT_EQ(ended.size(), 0u) << "an expired abort is dropped";
}

TEST(EndedJobsTest, HoldsAtMostItsCapacityDroppingTheOldest) {
  EndedJobs ended(3, absl::Hours(1));
  for (int i = 0; i < 5; ++i) {
    ended.Remember(absl::StrCat("job", i), Secret::Of("t"), absl::AbortedError("a"),
                   kStart + absl::Seconds(i));
  }
  EXPECT_EQ(ended.size(), 3u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ended.Lookup(absl::StrCat("job", i), "t", kStart + absl::Seconds(10)).has_value(),
              i >= 2)
        << i;
  }
}

TEST(EndedJobsTest, ForgetAndRememberAgainReplaceTheEntry) {
  EndedJobs ended(3, absl::Hours(1));
  ended.Remember("train", Secret::Of("old"), absl::AbortedError("first"), kStart);
  ended.Remember("train", Secret::Of("new"), absl::AbortedError("second"), kStart);
  EXPECT_FALSE(ended.Lookup("train", "old", kStart).has_value());
  EXPECT_EQ(ended.Lookup("train", "new", kStart)->message(), "second");
  ended.Forget("train");
  EXPECT_FALSE(ended.Lookup("train", "new", kStart).has_value());
}

class RegistryEndedTest : public ::testing::Test {
 protected:
  // Creates job `name` with `token` and aborts it; returns once the registry released it.
  void CreateAndAbort(JobRegistry& registry, const std::string& name, const std::string& token) {
    bool created = false;
    auto job = registry.CreateJob(name, 2, &created, Secret::Of(token));
    ASSERT_TRUE(job.ok()) << job.status();
    (*job)->Abort(AbortCause::kRankExit, "rank 1 on node-a exited with code 3");
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (registry.Find(name).ok() && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(5));
    ASSERT_FALSE(registry.Find(name).ok()) << "the aborted job was not released";
  }

  Scheduler scheduler_;
  FakeClock clock_{kStart};
};

TEST_F(RegistryEndedTest, AReleasedAbortedJobAnswersItsTokenWithTheAbortUntilTheTtl) {
  JobRegistryOptions options;
  options.ended_job_ttl = absl::Minutes(2);
  JobRegistry registry(options, scheduler_, clock_);
  CreateAndAbort(registry, "train", "secret");
  EXPECT_EQ(registry.Find("train").status().code(), absl::StatusCode::kNotFound);
  std::optional<absl::Status> ended = registry.EndedWith("train", "secret");
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->code(), absl::StatusCode::kAborted);
  EXPECT_THAT(ended->message(),
              HasSubstr("job 'train' aborted: rank 1 on node-a exited with code 3"));
  EXPECT_FALSE(registry.EndedWith("train", "guess").has_value());
  clock_.Advance(absl::Minutes(2));
  EXPECT_FALSE(registry.EndedWith("train", "secret").has_value());
}

TEST_F(RegistryEndedTest, ANewJobOfTheSameNameForgetsTheOldAbort) {
  JobRegistry registry(JobRegistryOptions{}, scheduler_, clock_);
  CreateAndAbort(registry, "train", "secret");
  bool created = false;
  ASSERT_TRUE(registry.CreateJob("train", 2, &created, Secret::Of("secret")).ok());
  EXPECT_TRUE(created);
  EXPECT_FALSE(registry.EndedWith("train", "secret").has_value());
}

}  // namespace
}  // namespace troika::coordinator
