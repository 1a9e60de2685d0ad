// Executor::RunInline (AllreduceOptions::wait): a scheduled entry queued without waking the
// executor thread runs on the thread that waits for it; what that thread leaves queued runs
// on the executor thread, and Stop() runs what nobody ran. Each test starts the executor
// thread and waits until it sleeps, so only a wake can make it run anything.

#include "libclient/executor.h"

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "libclient/op_state.h"
#include "libclient/output_pool.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/memory/memory_transport.h"

namespace troika::internal {
namespace {

class ExecutorTest : public ::testing::Test {
 protected:
  ExecutorTest() {
    auto comm = transport_.Connect({.rank = 0, .size = 1, .store_prefix = "executor/"}, store_);
    EXPECT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
    executor_ = std::make_unique<Executor>(table_, *comm_, sets_, nullptr, *pool_, stats_, steps_,
                                           nullptr, [](absl::Status s) { return s; });
    executor_->OnScheduled([this](int64_t, int64_t position, bool go) {
      EXPECT_TRUE(go);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ran_on_[position] = std::this_thread::get_id();
      }
      ran_cv_.notify_all();
    });
  }

  void StartExecutor() {
    executor_->Start();
    WaitUntilExecutorSleeps();
  }
  ~ExecutorTest() override { executor_->Stop(); }

  // Submits a one-element float32 sum named `name` and queues it as entry `position` of
  // schedule 1.
  std::shared_ptr<OpState> Queue(const std::string& name, int64_t position, bool wake) {
    Entry entry;
    entry.request.name = name;
    entry.request.shape = {1};
    entry.in = entry.out = &values_[name];
    entry.state = std::make_shared<OpState>();
    std::shared_ptr<OpState> state = entry.state;
    EXPECT_TRUE(table_.Insert(std::move(entry)).ok());
    ClientSchedule::Step step;
    step.position = position;
    step.response.names = {name};
    step.response.elements = {1};
    executor_->EnqueueScheduled(1, std::move(step), wake);
    return state;
  }

  static bool Done(const std::shared_ptr<OpState>& state) {
    std::lock_guard<std::mutex> lock(state->mu);
    return state->done;
  }

  static bool WaitDone(const std::shared_ptr<OpState>& state) {
    std::unique_lock<std::mutex> lock(state->mu);
    return state->cv.wait_for(lock, std::chrono::seconds(10), [&] { return state->done; }) &&
           state->status.ok();
  }

  // The thread that ran entry `position` (recorded after its state completed).
  std::thread::id RanOn(int64_t position) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(ran_cv_.wait_for(lock, std::chrono::seconds(10),
                                 [&] { return ran_on_.count(position) > 0; }))
        << "entry " << position << " did not run";
    return ran_on_[position];
  }

  // Until the executor thread sleeps (state S in /proc): then only a wake makes it run.
  static void WaitUntilExecutorSleeps() {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream comm(task.path() / "comm");
        std::string name;
        std::getline(comm, name);
        if (name != "troika-execute") continue;
        std::ifstream stat(task.path() / "stat");
        std::string line;
        std::getline(stat, line);
        // "tid (comm) S ...": the state follows the command's closing parenthesis.
        const size_t paren = line.rfind(')');
        if (paren != std::string::npos && line.substr(paren + 2, 1) == "S") return;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    ADD_FAILURE() << "the executor thread did not go to sleep";
  }

  transport::MemoryTransport transport_;
  transport::InMemoryStore store_;
  std::unique_ptr<transport::Communicator> comm_;
  TensorTable table_;
  ProcessSetTable sets_{0};
  std::shared_ptr<OutputPool> pool_ = OutputPool::Create(0);
  ExecStats stats_;
  StepClock steps_{Clock::Real()};
  std::unique_ptr<Executor> executor_;
  std::map<std::string, float> values_;
  std::mutex mu_;
  std::condition_variable ran_cv_;
  std::map<int64_t, std::thread::id> ran_on_;  // guarded by mu_
};

TEST_F(ExecutorTest, AnEntryQueuedWithoutWakeRunsOnTheThreadThatWaitsForIt) {
  StartExecutor();
  std::shared_ptr<OpState> state = Queue("t", 0, /*wake=*/false);
  executor_->RunInline([&] { return Done(state); });
  ASSERT_TRUE(Done(state));
  EXPECT_TRUE(state->status.ok()) << state->status;
  EXPECT_EQ(RanOn(0), std::this_thread::get_id());
}

TEST_F(ExecutorTest, AWokenEntryRunsOnTheExecutorThread) {
  StartExecutor();
  std::shared_ptr<OpState> state = Queue("t", 0, /*wake=*/true);
  ASSERT_TRUE(WaitDone(state));
  EXPECT_NE(RanOn(0), std::this_thread::get_id());
}

TEST_F(ExecutorTest, WhatTheWaitingThreadLeavesQueuedRunsOnTheExecutorThread) {
  StartExecutor();
  std::shared_ptr<OpState> first = Queue("a", 0, /*wake=*/false);
  std::shared_ptr<OpState> second = Queue("b", 1, /*wake=*/false);
  executor_->RunInline([&] { return Done(first); });
  ASSERT_TRUE(Done(first));
  // Nobody waits for "b" here: the executor thread must have been woken for it.
  ASSERT_TRUE(WaitDone(second));
  EXPECT_EQ(RanOn(0), std::this_thread::get_id());
  EXPECT_NE(RanOn(1), std::this_thread::get_id());
}

TEST_F(ExecutorTest, RunInlineLeavesANegotiatedResponseFirstInTheQueueToTheExecutorThread) {
  // No executor thread yet: whatever runs, runs on this thread.
  Entry entry;
  entry.request.name = "n";
  entry.request.shape = {1};
  entry.in = entry.out = &values_["n"];
  entry.state = std::make_shared<OpState>();
  std::shared_ptr<OpState> negotiated = entry.state;
  ASSERT_TRUE(table_.Insert(std::move(entry)).ok());
  Response response;
  response.names = {"n"};
  executor_->Enqueue({response});
  std::shared_ptr<OpState> scheduled = Queue("t", 0, /*wake=*/false);
  executor_->RunInline([&] { return Done(scheduled); });
  EXPECT_FALSE(Done(negotiated));
  EXPECT_FALSE(Done(scheduled));  // behind the negotiated response
  executor_->Start();
  ASSERT_TRUE(WaitDone(negotiated));
  ASSERT_TRUE(WaitDone(scheduled));
  EXPECT_NE(RanOn(0), std::this_thread::get_id());
}

TEST_F(ExecutorTest, StopRunsAnEntryQueuedWithoutWakeThatNobodyRan) {
  StartExecutor();
  std::shared_ptr<OpState> state = Queue("t", 0, /*wake=*/false);
  executor_->Stop();
  ASSERT_TRUE(Done(state));
  EXPECT_TRUE(state->status.ok()) << state->status;
}

}  // namespace
}  // namespace troika::internal
