// ScheduleDetector: a period is found once the latest tensors repeat `repeats` times, in order
// or as a set starting at the steps' pauses, fused as they may be; any response that cannot be
// scheduled starts over.

#include "coordinator/negotiation/schedule_detector.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
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

// Feeds steps of responses (by their cache ids) with a pause of 50 ms before each step's first
// response and 1 ms between the others, from `*t` on.
void Steps(ScheduleDetector& d, const std::vector<std::vector<std::vector<int32_t>>>& steps,
           absl::Time* t) {
  for (const auto& step : steps) {
    *t += absl::Milliseconds(50);
    for (size_t i = 0; i < step.size(); ++i) {
      if (i > 0) *t += absl::Milliseconds(1);
      d.Observe(Hit(step[i]), *t);
    }
  }
}

TEST(ScheduleDetectorTest, AStepsTensorsInVaryingOrderFormASetPeriod) {
  ScheduleDetector d;
  absl::Time t = absl::UnixEpoch();
  Steps(d, {{{1}, {2, 3}, {4}}}, &t);
  EXPECT_FALSE(d.Period()) << "seen once";
  Steps(d, {{{3}, {1}, {4, 2}}}, &t);
  ASSERT_TRUE(d.Period());
  // The latest step's responses, in the order they came, fused as they were.
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{3}, {1}, {4, 2}}));
  Steps(d, {{{2}, {4}, {1}, {3}}}, &t);
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{2}, {4}, {1}, {3}}));
}

TEST(ScheduleDetectorTest, ASetPeriodStartsAtTheStepsPauseNotInsideASteps) {
  // Every step submits 1 and 2 (in either order), then 3 and 4 (in either order): the runs
  // from the middle of a step to the middle of the next hold the same set too.
  const std::vector<std::vector<std::vector<int32_t>>> steps = {
      {{1}, {2}, {3}, {4}}, {{2}, {1}, {4}, {3}}, {{1}, {2}, {4}, {3}}};
  ScheduleDetector d;
  absl::Time t = absl::UnixEpoch();
  Steps(d, {steps[0], steps[1]}, &t);
  ASSERT_TRUE(d.Period());
  t += absl::Milliseconds(50);
  d.Observe(Hit({1}), t += absl::Milliseconds(1));
  d.Observe(Hit({2}), t += absl::Milliseconds(1));
  // [4 3 | 1 2] repeats [3 4 | 2 1] as a set, but its runs do not start at their pause.
  EXPECT_FALSE(d.Period()) << "a rotation straddling the steps' boundary";
  d.Observe(Hit({4}), t += absl::Milliseconds(1));
  d.Observe(Hit({3}), t += absl::Milliseconds(1));
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{1}, {2}, {4}, {3}}));

  // Without pauses (responses sent at one time) nothing tells a step's boundary: no set
  // period forms, while a step in one order still forms an exact one.
  ScheduleDetector untimed;
  for (const auto& step : steps) {
    for (const auto& ids : step) untimed.Observe(Hit(ids));
    EXPECT_FALSE(untimed.Period());
  }
  for (int i = 0; i < 2; ++i) {
    for (const auto& ids : steps[2]) untimed.Observe(Hit(ids));
  }
  ASSERT_TRUE(untimed.Period());
  EXPECT_EQ(Ids(*untimed.Period()), (std::vector<std::vector<int32_t>>{{1}, {2}, {4}, {3}}));
}

TEST(ScheduleDetectorTest, ATensorCrossingTheStepsBoundaryFormsNoSetPeriod) {
  ScheduleDetector d;
  absl::Time t = absl::UnixEpoch();
  // Step 2's tensor 4 comes after step 3's tensor 1, and step 4's after step 5's first.
  Steps(d, {{{1}, {2}, {3}, {4}}, {{2}, {1}, {3}}, {{1}, {4}, {2}, {3}, {4}}}, &t);
  EXPECT_FALSE(d.Period());
  Steps(d, {{{3}, {2}, {1}}}, &t);
  EXPECT_FALSE(d.Period());
  t += absl::Milliseconds(50);
  for (int32_t id : {2, 4, 3, 1}) {
    d.Observe(Hit({id}), t += absl::Milliseconds(1));
    EXPECT_FALSE(d.Period()) << "after " << id;
  }
  d.Observe(Hit({4}), t += absl::Milliseconds(1));
  EXPECT_FALSE(d.Period());
  // Two steps that keep their tensors form one.
  Steps(d, {{{4}, {3}, {2}, {1}}, {{1}, {2}, {3}, {4}}}, &t);
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{1}, {2}, {3}, {4}}));
}

TEST(ScheduleDetectorTest, ATensorMissingFromAStepFormsNoSetPeriodUntilStepsRepeatAgain) {
  ScheduleDetector d;
  absl::Time t = absl::UnixEpoch();
  Steps(d, {{{1}, {2}, {3}, {4}}, {{2}, {1}, {4}}}, &t);
  EXPECT_FALSE(d.Period());
  Steps(d, {{{1}, {3}, {2}, {4}}}, &t);
  EXPECT_FALSE(d.Period()) << "the step before lacked 3";
  Steps(d, {{{4}, {3}, {2}, {1}}}, &t);
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{4}, {3}, {2}, {1}}));
}

TEST(ScheduleDetectorTest, ASetPeriodMustRecurAsOftenAsTheResetAsks) {
  ScheduleDetector d;
  d.Reset(3);
  absl::Time t = absl::UnixEpoch();
  Steps(d, {{{1}, {2}, {3}}, {{3}, {2}, {1}}}, &t);
  EXPECT_FALSE(d.Period()) << "twice";
  Steps(d, {{{2}, {1}, {3}}}, &t);
  ASSERT_TRUE(d.Period());
  EXPECT_EQ(Ids(*d.Period()), (std::vector<std::vector<int32_t>>{{2}, {1}, {3}}));
  // A tensor twice in a run is no set period either.
  ScheduleDetector twice;
  Steps(twice, {{{1}, {2}, {1}}, {{1}, {2}, {1}}}, &t);
  EXPECT_FALSE(twice.Period());
}

}  // namespace
}  // namespace troika::coordinator
