#include "libclient/handles/step_clock.h"

#include <optional>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace troika::internal {
namespace {

absl::Duration Ms(int64_t ms) { return absl::Milliseconds(ms); }

class StepClockTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  StepClock steps_{clock_};
};

void ExpectSplit(const std::optional<StepSample>& s, absl::Duration compute, absl::Duration wait,
                 absl::Duration communication) {
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->compute, compute);
  EXPECT_EQ(s->negotiation_wait, wait);
  EXPECT_EQ(s->communication, communication);
  EXPECT_EQ(s->duration, s->compute + s->negotiation_wait + s->communication);
}

TEST_F(StepClockTest, StepWithoutOperationsIsAllCompute) {
  steps_.StartStep();
  clock_.Advance(Ms(30));
  ExpectSplit(steps_.EndStep(), Ms(30), absl::ZeroDuration(), absl::ZeroDuration());
}

TEST_F(StepClockTest, IdleWhileInFlightIsNegotiationWaitAndBusyIsCommunication) {
  steps_.StartStep();
  clock_.Advance(Ms(10));  // compute
  steps_.OpStarted();
  clock_.Advance(Ms(4));  // negotiating
  steps_.ExecBegin();
  clock_.Advance(Ms(3));  // moving bytes
  steps_.OpFinished();    // completed inside the executor's work
  clock_.Advance(Ms(1));  // still busy: communication, though nothing is in flight
  steps_.ExecEnd();
  clock_.Advance(Ms(7));  // compute again
  ExpectSplit(steps_.EndStep(), Ms(17), Ms(4), Ms(4));
}

TEST_F(StepClockTest, OverlappingOperationsWaitUntilTheLastFinishes) {
  steps_.StartStep();
  steps_.OpStarted();
  clock_.Advance(Ms(2));
  steps_.OpStarted();
  clock_.Advance(Ms(3));
  steps_.OpFinished();
  clock_.Advance(Ms(5));  // one still in flight: still waiting
  steps_.OpFinished();
  clock_.Advance(Ms(6));
  ExpectSplit(steps_.EndStep(), Ms(6), Ms(10), absl::ZeroDuration());
  EXPECT_EQ(steps_.in_flight(), 0);
}

TEST_F(StepClockTest, ExecutorWorkForOtherRanksCountsAsCommunication) {
  steps_.StartStep();
  steps_.ExecBegin();  // e.g. a joined rank's stand-in: busy with nothing in flight
  clock_.Advance(Ms(5));
  steps_.ExecEnd();
  ExpectSplit(steps_.EndStep(), absl::ZeroDuration(), absl::ZeroDuration(), Ms(5));
}

TEST_F(StepClockTest, TimeOutsideStepsIsNotCharged) {
  steps_.OpStarted();
  clock_.Advance(Ms(100));  // before any step
  steps_.StartStep();
  clock_.Advance(Ms(2));  // the op is still in flight
  steps_.OpFinished();
  clock_.Advance(Ms(3));
  ExpectSplit(steps_.EndStep(), Ms(3), Ms(2), absl::ZeroDuration());
  clock_.Advance(Ms(50));  // between steps
  steps_.StartStep();
  clock_.Advance(Ms(1));
  ExpectSplit(steps_.EndStep(), Ms(1), absl::ZeroDuration(), absl::ZeroDuration());
}

TEST_F(StepClockTest, EndStepWithoutStartReturnsNothing) {
  EXPECT_FALSE(steps_.EndStep().has_value());
  steps_.StartStep();
  EXPECT_TRUE(steps_.EndStep().has_value());
  EXPECT_FALSE(steps_.EndStep().has_value());  // already ended
}

TEST_F(StepClockTest, StartStepDiscardsTheStepInProgress) {
  steps_.StartStep();
  clock_.Advance(Ms(40));
  steps_.StartStep();
  clock_.Advance(Ms(2));
  ExpectSplit(steps_.EndStep(), Ms(2), absl::ZeroDuration(), absl::ZeroDuration());
}

TEST_F(StepClockTest, MarkStepFirstCallOnlyStartsThenStepsTileTheTime) {
  EXPECT_FALSE(steps_.MarkStep().has_value());
  clock_.Advance(Ms(5));
  steps_.OpStarted();
  clock_.Advance(Ms(2));  // in flight across the step boundary
  ExpectSplit(steps_.MarkStep(), Ms(5), Ms(2), absl::ZeroDuration());
  clock_.Advance(Ms(3));
  steps_.OpFinished();
  clock_.Advance(Ms(4));
  std::optional<StepSample> second = steps_.MarkStep();
  ExpectSplit(second, Ms(4), Ms(3), absl::ZeroDuration());
  EXPECT_EQ(second->duration, Ms(7));
}

TEST_F(StepClockTest, ClockSteppingBackChargesNothing) {
  class BackwardClock : public Clock {
   public:
    absl::Time Now() const override { return now; }
    absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  } clock;
  StepClock steps(clock);
  steps.StartStep();
  clock.now -= Ms(10);
  std::optional<StepSample> s = steps.EndStep();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->duration, absl::ZeroDuration());
}

// Under TSan: every entry point from several threads at once; the counts balance out.
TEST(StepClockThreadsTest, ConcurrentCallsBalance) {
  StepClock steps(Clock::Real());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        steps.OpStarted();
        steps.ExecBegin();
        steps.ExecEnd();
        steps.OpFinished();
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 1000; ++i) {
      std::optional<StepSample> s = steps.MarkStep();
      if (s) {
        EXPECT_EQ(s->duration, s->compute + s->negotiation_wait + s->communication);
      }
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(steps.in_flight(), 0);
}

}  // namespace
}  // namespace troika::internal
