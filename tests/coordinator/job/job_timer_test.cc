// JobTimer on its own: it fires under its owner's lock, disarmed, once; kKeepEarlier keeps the
// earlier of two times, kReplace the last; cancelled or with its owner gone it does nothing.
// The scheduler runs on real time: the due times here are either now (fires at once) or an
// hour away (never within a test), so no test waits on a duration.

#include "coordinator/job/job_timer.h"

#include <future>
#include <memory>
#include <mutex>

#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

constexpr absl::Duration kNever = absl::Hours(1);

class JobTimerTest : public ::testing::Test {
 protected:
  // A timer whose fire records that it ran and whether it was still armed then.
  std::unique_ptr<JobTimer> MakeTimer(JobTimer::Rearm rearm) {
    return std::make_unique<JobTimer>(
        scheduler_, clock_, mu_, rearm, [this] { return owner_; },
        [this] {
          armed_when_fired_ = timer_->armed();
          fired_.set_value(++fires_);
        });
  }
  void Arm(absl::Time due) {
    std::lock_guard<std::mutex> lock(mu_);
    timer_->Arm(due);
  }
  // Waits (not-hung bound) for the next fire; false if none came.
  bool Fired() {
    std::future<int> fired = fired_.get_future();
    const bool ok = fired.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    fired_ = std::promise<int>();
    return ok;
  }
  // Whether the timer fired by the time everything due now on the scheduler ran.
  int FiresAfterDrain() {
    std::promise<void> drained;
    scheduler_.RunAfter(absl::Milliseconds(1), [&drained] { drained.set_value(); });
    drained.get_future().wait();
    std::lock_guard<std::mutex> lock(mu_);
    return fires_;
  }

  Scheduler scheduler_;
  FakeClock clock_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::mutex mu_;
  std::weak_ptr<const void> owner_ = alive_;
  std::unique_ptr<JobTimer> timer_;
  std::promise<int> fired_;
  int fires_ = 0;
  bool armed_when_fired_ = true;
};

TEST_F(JobTimerTest, FiresOnceDisarmed) {
  timer_ = MakeTimer(JobTimer::Rearm::kReplace);
  EXPECT_FALSE(timer_->armed());
  EXPECT_EQ(timer_->due(), absl::InfiniteFuture());
  Arm(clock_.Now());
  ASSERT_TRUE(Fired());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_FALSE(armed_when_fired_);
  EXPECT_FALSE(timer_->armed());
  EXPECT_EQ(timer_->due(), absl::InfiniteFuture());
}

TEST_F(JobTimerTest, CountsOnlyTheOffsetFromTheClocksNow) {
  timer_ = MakeTimer(JobTimer::Rearm::kReplace);
  clock_.Advance(absl::Hours(5));  // a fake clock far from real time
  Arm(clock_.Now());
  EXPECT_TRUE(Fired());
}

TEST_F(JobTimerTest, KeepEarlierKeepsTheEarlierTime) {
  timer_ = MakeTimer(JobTimer::Rearm::kKeepEarlier);
  const absl::Time now = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(mu_);  // nothing fires before the checks
    timer_->Arm(now + kNever);
    timer_->Arm(now);  // earlier: replaces
    EXPECT_EQ(timer_->due(), now);
  }
  ASSERT_TRUE(Fired());
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_->Arm(now);
    timer_->Arm(now + kNever);  // later: the armed one stays
    EXPECT_EQ(timer_->due(), now);
  }
  EXPECT_TRUE(Fired());
  EXPECT_EQ(FiresAfterDrain(), 2);
}

TEST_F(JobTimerTest, ReplaceTakesTheLastTime) {
  timer_ = MakeTimer(JobTimer::Rearm::kReplace);
  const absl::Time now = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_->Arm(now + kNever);
    timer_->Arm(now);
    EXPECT_EQ(timer_->due(), now);
  }
  ASSERT_TRUE(Fired());
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_->Arm(now + kNever);
    timer_->Arm(now + 2 * kNever);  // later: replaces
    EXPECT_EQ(timer_->due(), now + 2 * kNever);
  }
  EXPECT_EQ(FiresAfterDrain(), 1);
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(timer_->armed());
  EXPECT_EQ(scheduler_.pending(), 1u) << "the replaced task was cancelled";
}

TEST_F(JobTimerTest, ArmingForTheInfiniteFutureArmsNothing) {
  timer_ = MakeTimer(JobTimer::Rearm::kReplace);
  std::lock_guard<std::mutex> lock(mu_);
  timer_->Arm(absl::InfiniteFuture());
  EXPECT_FALSE(timer_->armed());
  timer_->Arm(clock_.Now() + kNever);
  timer_->Arm(absl::InfiniteFuture());
  EXPECT_EQ(timer_->due(), clock_.Now() + kNever) << "the armed one stays";
}

// Its task may have begun already (waiting for the lock): it still does nothing.
TEST_F(JobTimerTest, CancelledTimerDoesNothing) {
  timer_ = MakeTimer(JobTimer::Rearm::kKeepEarlier);
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_->Arm(clock_.Now());
    timer_->Cancel();
    EXPECT_FALSE(timer_->armed());
  }
  EXPECT_EQ(FiresAfterDrain(), 0);
}

TEST_F(JobTimerTest, TimerOfAnOwnerThatIsGoneDoesNothing) {
  timer_ = MakeTimer(JobTimer::Rearm::kReplace);
  alive_.reset();  // the owner is asked when the task is scheduled: gone already
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_->Arm(clock_.Now());
  }
  EXPECT_EQ(FiresAfterDrain(), 0);
}

TEST_F(JobTimerTest, DestroyingTheTimerCancelsIt) {
  timer_ = MakeTimer(JobTimer::Rearm::kReplace);
  Arm(clock_.Now() + kNever);
  timer_.reset();
  EXPECT_EQ(scheduler_.pending(), 0u);
}

}  // namespace
}  // namespace troika::coordinator
