// Executor::RunInline (AllreduceOptions::wait): a scheduled entry queued without waking the
// executor thread runs on the thread that waits for it; what that thread leaves queued runs
// on the executor thread, and Stop() runs what nobody ran. TryClaim and RunClaimed (the
// controller's fast path): a thread that takes the idle executor's turn runs its own entry,
// never queued, and what was queued meanwhile runs on the executor thread after it. Each test
// starts the executor thread and waits until it sleeps, so only a wake can make it run anything.
// Scheduled GPU entries: the ranks vote on the host, then the entry is issued on the device
// plane (here a fake that records launches) from the executor thread, or nowhere if any rank
// voted void.

#include "libclient/execution/executor.h"

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "libclient/execution/output_pool.h"
#include "libclient/handles/op_state.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/memory/memory_transport.h"

namespace troika::internal {
namespace {

// Records what is issued on it, from which thread, and completes it at once.
class FakeDevicePlane : public DevicePlane {
 public:
  absl::Status CheckDevice(int) override { return absl::OkStatus(); }
  absl::StatusOr<std::shared_ptr<void>> MarkStream(int, void*) override { return nullptr; }
  absl::Status Launch(const Response& response, const DeviceGroup&,
                      std::vector<Entry>& entries) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      launched_.push_back({response.names, std::this_thread::get_id()});
    }
    for (Entry& e : entries) {
      if (e.state) e.state->Complete(absl::OkStatus());
    }
    return absl::OkStatus();
  }
  void DropGroup(int) override {}
  void Abort() override {}
  void Stop() override {}

  struct Launched {
    std::vector<std::string> names;
    std::thread::id thread;
  };
  std::vector<Launched> launched() {
    std::lock_guard<std::mutex> lock(mu_);
    return launched_;
  }

 private:
  std::mutex mu_;
  std::vector<Launched> launched_;
};

class ExecutorTest : public ::testing::Test {
 protected:
  ExecutorTest() {
    auto comm = transport_.Connect({.rank = 0, .size = 1, .store_prefix = "executor/"}, store_);
    EXPECT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
    executor_ = std::make_unique<Executor>(table_, *comm_, sets_, nullptr, *pool_, stats_, steps_,
                                           &device_, [](absl::Status s) { return s; });
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

  // Submits a one-element float32 sum named `name` (on the host, or on GPU 0: `device`) and
  // queues it as entry `position` of schedule 1.
  std::shared_ptr<OpState> Queue(const std::string& name, int64_t position, bool wake,
                                 DeviceClass device = DeviceClass::kCpu) {
    Entry entry = Own(name);
    entry.request.device = device;
    std::shared_ptr<OpState> state = entry.state;
    EXPECT_TRUE(table_.Insert(std::move(entry)).ok());
    executor_->EnqueueScheduled(1, Step(name, position, device), wake);
    return state;
  }

  // Entry `position` of schedule 1: the one-element tensor `name`.
  static ScheduledStep Step(const std::string& name, int64_t position,
                            DeviceClass device = DeviceClass::kCpu) {
    Response response;
    response.names = {name};
    response.elements = {1};
    response.device = device;
    ScheduledStep step;
    step.position = position;
    step.response = std::make_shared<const Response>(std::move(response));
    return step;
  }

  // A one-element float32 sum named `name`, with its state (Queue's, for the table).
  Entry Own(const std::string& name) {
    Entry entry = Given(name);
    entry.state = std::make_shared<OpState>();
    return entry;
  }
  // The same without a state: a synchronous submission's, which RunClaimed runs.
  Entry Given(const std::string& name) {
    Entry entry;
    entry.request.name = name;
    entry.request.shape = {1};
    entry.in = entry.out = &values_[name];
    return entry;
  }
  // RunClaimed's `adopt` where the vote cannot be void.
  static std::shared_ptr<OpState> NoAdoption(const Entry&) {
    ADD_FAILURE() << "the entry went back to be negotiated";
    return std::make_shared<OpState>();
  }

  static bool Done(const std::shared_ptr<OpState>& state) {
    std::lock_guard<std::mutex> lock(state->mu);
    return state->done;
  }

  static bool WaitDone(const std::shared_ptr<OpState>& state) {
    std::unique_lock<std::mutex> lock(state->mu);
    return state->cv.wait_for(lock, std::chrono::seconds(10), [&] { return state->done.load(); }) &&
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

  FakeDevicePlane device_;  // outlives the executor, which stops it
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

TEST_F(ExecutorTest, AClaimedTurnRunsTheCallersOwnEntryOnItsThread) {
  StartExecutor();
  ASSERT_TRUE(executor_->TryClaim());
  values_["t"] = 2.0f;
  Entry entry = Given("t");
  executor_->RunClaimed(1, Step("t", 0), absl::MakeSpan(&entry, 1), NoAdoption);
  EXPECT_TRUE(entry.outcome.ok()) << entry.outcome;
  EXPECT_EQ(entry.state, nullptr);
  EXPECT_EQ(values_["t"], 2.0f);  // one rank's sum
  EXPECT_EQ(RanOn(0), std::this_thread::get_id());
}

// Another rank deviated (here: this one's vote, the same combined void): the schedule ends at
// the entry, which goes back to be negotiated with the state `adopt` gave it, in the table
// before the turn is given back.
TEST_F(ExecutorTest, AClaimedEntryVotedVoidGoesIntoTheTableWithTheStateAdoptGaveIt) {
  std::vector<bool> went;
  executor_->OnScheduled([&](int64_t, int64_t, bool go) { went.push_back(go); });
  StartExecutor();
  ASSERT_TRUE(executor_->TryClaim());
  values_["t"] = 2.0f;
  Entry entry = Given("t");
  ScheduledStep step = Step("t", 0);
  step.vote_void = true;
  std::shared_ptr<OpState> adopted;
  executor_->RunClaimed(1, std::move(step), absl::MakeSpan(&entry, 1), [&](const Entry& e) {
    EXPECT_EQ(e.request.name, "t");
    adopted = std::make_shared<OpState>();
    return adopted;
  });
  EXPECT_EQ(went, std::vector<bool>{false});
  ASSERT_NE(adopted, nullptr);
  EXPECT_FALSE(Done(adopted)) << "it is to be negotiated, not finished";
  std::optional<Entry> back = table_.Take(0, "t");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->state, adopted);
  EXPECT_EQ(values_["t"], 2.0f) << "a void entry moves no data";
}

TEST_F(ExecutorTest, TheTurnCannotBeClaimedWhileAnEntryIsQueuedOrHeld) {
  StartExecutor();
  std::shared_ptr<OpState> queued = Queue("q", 0, /*wake=*/false);
  EXPECT_FALSE(executor_->TryClaim()) << "an entry is queued";
  executor_->RunInline([&] { return Done(queued); });
  ASSERT_TRUE(Done(queued));
  ASSERT_TRUE(executor_->TryClaim());
  EXPECT_FALSE(executor_->TryClaim()) << "the turn is held";
  Entry entry = Given("t");
  executor_->RunClaimed(1, Step("t", 1), absl::MakeSpan(&entry, 1), NoAdoption);
  EXPECT_TRUE(executor_->TryClaim()) << "RunClaimed gave the turn back";
  Entry next = Given("u");
  executor_->RunClaimed(1, Step("u", 2), absl::MakeSpan(&next, 1), NoAdoption);
}

TEST_F(ExecutorTest, WhatIsQueuedWhileTheTurnIsClaimedRunsAfterwardsOnTheExecutorThread) {
  StartExecutor();
  ASSERT_TRUE(executor_->TryClaim());
  // Woken or not, the executor thread cannot run it while the turn is held.
  std::shared_ptr<OpState> later = Queue("later", 1, /*wake=*/true);
  Entry entry = Given("t");
  executor_->RunClaimed(1, Step("t", 0), absl::MakeSpan(&entry, 1), NoAdoption);
  EXPECT_TRUE(entry.outcome.ok()) << entry.outcome;
  ASSERT_TRUE(WaitDone(later));
  EXPECT_EQ(RanOn(0), std::this_thread::get_id());
  EXPECT_NE(RanOn(1), std::this_thread::get_id());
}

TEST_F(ExecutorTest, NoTurnIsClaimedOnceStopping) {
  StartExecutor();
  executor_->Stop();
  EXPECT_FALSE(executor_->TryClaim());
}

TEST_F(ExecutorTest, AScheduledGpuEntryIsIssuedOnTheExecutorThreadNotTheWaitingOne) {
  StartExecutor();
  std::shared_ptr<OpState> host = Queue("h", 0, /*wake=*/false);
  std::shared_ptr<OpState> gpu = Queue("g", 1, /*wake=*/false, DeviceClass::kGpu);
  // The waiting thread runs the host entry; the GPU one is the executor thread's (the device
  // plane's calls come from one thread, whose current device it sets).
  executor_->RunInline([&] { return Done(gpu); });
  ASSERT_TRUE(WaitDone(gpu));
  EXPECT_EQ(RanOn(0), std::this_thread::get_id());
  EXPECT_NE(RanOn(1), std::this_thread::get_id());
  const std::vector<FakeDevicePlane::Launched> launched = device_.launched();
  ASSERT_EQ(launched.size(), 1u);
  EXPECT_EQ(launched[0].names, std::vector<std::string>{"g"});
  EXPECT_NE(launched[0].thread, std::this_thread::get_id());
  EXPECT_TRUE(Done(host));
}

// Two ranks' executors over one memory transport: rank 1 deviated (votes void) at a GPU entry
// that rank 0 entered with its tensor.
TEST(ExecutorVoteTest, AVoidVoteOnOneRankIssuesTheGpuEntryOnNoRank) {
  struct Rank {
    TensorTable table;
    ProcessSetTable sets{0};
    std::shared_ptr<OutputPool> pool = OutputPool::Create(0);
    ExecStats stats;
    StepClock steps{Clock::Real()};
    FakeDevicePlane device;
    std::unique_ptr<transport::Communicator> comm;
    std::unique_ptr<Executor> executor;
    std::promise<bool> go;
  };
  transport::MemoryTransport transport;
  transport::InMemoryStore store;
  Rank ranks[2];
  std::thread connecting[2];
  for (int r = 0; r < 2; ++r) {
    connecting[r] = std::thread([&, r] {
      auto comm = transport.Connect({.rank = r, .size = 2, .store_prefix = "vote/"}, store);
      ASSERT_TRUE(comm.ok()) << comm.status();
      ranks[r].comm = *std::move(comm);
    });
  }
  for (std::thread& t : connecting) t.join();
  ASSERT_TRUE(ranks[0].comm && ranks[1].comm);
  float value = 1;
  Entry entry;
  entry.request.name = "g";
  entry.request.shape = {1};
  entry.request.device = DeviceClass::kGpu;
  entry.in = entry.out = &value;
  entry.state = std::make_shared<OpState>();
  std::shared_ptr<OpState> state = entry.state;
  ASSERT_TRUE(ranks[0].table.Insert(std::move(entry)).ok());
  for (int r = 0; r < 2; ++r) {
    Rank& rank = ranks[r];
    rank.executor = std::make_unique<Executor>(rank.table, *rank.comm, rank.sets, nullptr,
                                               *rank.pool, rank.stats, rank.steps, &rank.device,
                                               [](absl::Status s) { return s; });
    rank.executor->OnScheduled([&rank](int64_t, int64_t, bool go) { rank.go.set_value(go); });
    rank.executor->Start();
    ScheduledStep step;
    Response response;
    response.names = {"g"};
    response.elements = {1};
    response.device = DeviceClass::kGpu;
    step.response = std::make_shared<const Response>(std::move(response));
    step.vote_void = r == 1;
    rank.executor->EnqueueScheduled(1, std::move(step));
  }
  for (Rank& rank : ranks) {
    std::future<bool> go = rank.go.get_future();
    ASSERT_EQ(go.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_FALSE(go.get()) << "the combined vote is void";
    EXPECT_TRUE(rank.device.launched().empty()) << "nothing was issued";
  }
  // Rank 0's tensor is back in its table, to be negotiated, and not complete.
  {
    std::lock_guard<std::mutex> lock(state->mu);
    EXPECT_FALSE(state->done);
  }
  EXPECT_TRUE(ranks[0].table.Take(0, "g").has_value());
  for (Rank& rank : ranks) rank.executor->Stop();
}

}  // namespace
}  // namespace troika::internal
