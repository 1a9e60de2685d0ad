#include "common/scheduler.h"

#include <future>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace troika {
namespace {

// Holds the scheduler's thread in a callback until Open(), so that what the test queues
// meanwhile is all queued before anything of it can run, however slowly the test's thread
// goes.
class Gate {
 public:
  explicit Gate(Scheduler& scheduler) {
    scheduler.RunAfter(absl::ZeroDuration(), [this] {
      entered_.set_value();
      open_.get_future().wait();
    });
    entered_.get_future().wait();
  }
  ~Gate() { Open(); }  // before the scheduler (declared after it), which joins its thread
  void Open() {
    if (!opened_) open_.set_value();
    opened_ = true;
  }

 private:
  std::promise<void> entered_;
  std::promise<void> open_;
  bool opened_ = false;
};

TEST(SchedulerTest, RunsCallbacksInDueOrder) {
  Scheduler scheduler;
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> done;
  Gate gate(scheduler);
  absl::Time now = absl::Now();
  scheduler.RunAt(now + absl::Milliseconds(30), [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
    done.set_value();
  });
  scheduler.RunAt(now + absl::Milliseconds(10), [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  gate.Open();
  done.get_future().wait();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(SchedulerTest, PendingCountsQueuedCallbacksUntilTheyRunOrAreCancelled) {
  Scheduler scheduler;
  EXPECT_EQ(scheduler.pending(), 0u);
  Scheduler::TaskId later = scheduler.RunAfter(absl::Hours(1), [] {});
  std::promise<void> ran;
  scheduler.RunAfter(absl::ZeroDuration(), [&] { ran.set_value(); });
  ran.get_future().wait();
  EXPECT_EQ(scheduler.pending(), 1u);  // the hour-long one
  EXPECT_TRUE(scheduler.Cancel(later));
  EXPECT_EQ(scheduler.pending(), 0u);
}

TEST(SchedulerTest, CancelledCallbackNeverRuns) {
  Scheduler scheduler;
  std::atomic<bool> ran{false};
  Gate gate(scheduler);  // so that the callback cannot be due and run before Cancel
  Scheduler::TaskId id = scheduler.RunAfter(absl::Milliseconds(20), [&] { ran = true; });
  EXPECT_TRUE(scheduler.Cancel(id));
  EXPECT_FALSE(scheduler.Cancel(id));
  std::promise<void> later;
  scheduler.RunAfter(absl::Milliseconds(40), [&] { later.set_value(); });
  gate.Open();
  later.get_future().wait();
  EXPECT_FALSE(ran);
}

TEST(SchedulerTest, StopDropsPendingCallbacks) {
  std::atomic<bool> ran{false};
  Scheduler scheduler;
  scheduler.RunAfter(absl::Hours(1), [&] { ran = true; });
  scheduler.Stop();
  scheduler.RunAfter(absl::ZeroDuration(), [&] { ran = true; });
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace troika
