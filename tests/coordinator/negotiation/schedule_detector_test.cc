// ScheduleDetector: a period is found once the latest tensors repeat `repeats` times, fused
// as they may be; any response that cannot be scheduled starts over.

#include "coordinator/negotiation/schedule_detector.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

// A cached allreduce of the tensors with these cache ids (named "t<id>").
Response Hit(std::vector<int32_t> ids) {
  Response r;
  for (int32_t id : ids) r.names.push_back("t" + std::to_string(id));
  r.cache_ids = std::move(ids);
  r.ids_known = true;
  return r;
}

std::vector<std::vector<int32_t>> Ids(const std::vector<Response>& period) {
  std::vector<std::vector<int32_t>> ids;
  for (const Response& r : period) ids.push_back(r.cache_ids);
  return ids;
}

TEST(ScheduleDetectorTest, APeriodSeenTwiceIsFoundAndStartsAfterTheLatestResponse) {
  ScheduleDetector d;
  const std::vector<std::vector<int32_t>> step = {{1, 2}, {3}, {4}};
  for (const auto& ids : step) d.Observe(Hit(ids));
  EXPECT_FALSE(d.Period()) << "seen once";
  d.Observe(Hit({1, 2}));
  d.Observe(Hit({3}));
  EXPECT_FALSE(d.Period()) << "not yet twice";
  d.Observe(Hit({4}));
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), step);
  // One response later the period is the same cycle, rotated to start after it.
  d.Observe(Hit({1, 2}));
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{3}, {4}, {1, 2}}));
}

TEST(ScheduleDetectorTest, FusionMayDifferBetweenRepetitionsAndTheLatestIsKept) {
  // Each step allreduces tensors 1, 2, 3 in order, fused as timing had it.
  ScheduleDetector d;
  d.Observe(Hit({1, 2}));
  d.Observe(Hit({3}));
  d.Observe(Hit({1}));
  EXPECT_FALSE(d.Period());
  d.Observe(Hit({2, 3}));
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  d.Observe(Hit({1, 2, 3}));
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
}

TEST(ScheduleDetectorTest, APeriodStartsAtAResponseBoundary) {
  ScheduleDetector d;
  // Steps of tensors 1, 2, 3 fused two by two across steps: the tensors repeat, but no run of
  // responses holds exactly one step.
  for (int i = 0; i < 3; ++i) {
    d.Observe(Hit({1, 2}));
    d.Observe(Hit({3, 1}));
    d.Observe(Hit({2, 3}));
    EXPECT_FALSE(d.Period());
  }
  // Fused across steps the same way every time, a rotation of the step is a period.
  ScheduleDetector rotated;
  rotated.Observe(Hit({1}));
  for (int i = 0; i < 2; ++i) {
    rotated.Observe(Hit({2}));
    rotated.Observe(Hit({3, 1}));
  }
  ASSERT_TRUE(rotated.Period());
  EXPECT_EQ(Ids(*rotated.Period()), (std::vector<std::vector<int32_t>>{{2}, {3, 1}}));
}

TEST(ScheduleDetectorTest, AResponseThatCannotBeScheduledStartsOver) {
  Response miss = Hit({9});
  miss.ids_known = false;  // a new or changed request: not a hit for every rank
  Response broadcast = Hit({9});
  broadcast.type = CollectiveType::kBroadcast;
  Response in_set = Hit({9});
  in_set.process_set = 1;
  Response joined = Hit({9});
  joined.joined_ranks = {1};
  for (const Response& other : {miss, broadcast, in_set, joined}) {
    ScheduleDetector d;
    d.Observe(Hit({1}));
    d.Observe(Hit({1}));
    ASSERT_TRUE(d.Period());
    d.Observe(other);
    EXPECT_FALSE(d.Period());
    d.Observe(Hit({1}));
    EXPECT_FALSE(d.Period()) << "seen once since";
    d.Observe(Hit({1}));
    EXPECT_TRUE(d.Period());
  }
}

TEST(ScheduleDetectorTest, GpuAllreducesAreScheduledBesideHostOnes) {
  // A step of a GPU model's gradients and a host-side metric (its device class is part of the
  // request each cache id stands for).
  Response gpu = Hit({1, 2});
  gpu.device = DeviceClass::kGpu;
  ScheduleDetector d;
  for (int step = 0; step < 2; ++step) {
    d.Observe(gpu);
    d.Observe(Hit({3}));
  }
  ASSERT_TRUE(d.Period());
  ASSERT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_EQ(d.Period()->front().device, DeviceClass::kGpu);
  EXPECT_EQ(d.Period()->back().device, DeviceClass::kCpu);
}

TEST(ScheduleDetectorTest, ATensorTwiceInOnePeriodIsNoStep) {
  ScheduleDetector d;
  for (int i = 0; i < 4; ++i) {
    d.Observe(Hit({1}));
    d.Observe(Hit({2}));
  }
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(d.Period()->size(), 2u);
  d.Reset(2);
  // {1,2} then {2,3}: each signature recurs every 2 responses, but the period names 2 twice.
  for (int i = 0; i < 4; ++i) {
    d.Observe(Hit({1, 2}));
    d.Observe(Hit({2, 3}));
  }
  EXPECT_FALSE(d.Period());
}

TEST(ScheduleDetectorTest, AfterAResetWithMoreRepeatsThePeriodMustRecurThatOften) {
  ScheduleDetector d;
  d.Reset(4);
  for (int i = 0; i < 3; ++i) {
    d.Observe(Hit({1}));
    d.Observe(Hit({2}));
  }
  EXPECT_FALSE(d.Period()) << "three times";
  d.Observe(Hit({1}));
  d.Observe(Hit({2}));
  EXPECT_TRUE(d.Period());
}

}  // namespace
}  // namespace troika::coordinator
