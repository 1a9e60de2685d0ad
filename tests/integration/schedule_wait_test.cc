// Waits and steady-state schedules (docs/protocol.md, Schedules): a wait that began before the
// schedule came ends it instead of waiting forever; and buckets — once the ranks' reports
// show that no rank waits for a result between two neighbouring allreduces, the schedule gives
// way to one that runs them as one collective, while a wait keeps them apart.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/forwarding_channel.h"
#include "tests/integration/schedule_steps.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing::schedule_steps {
namespace {

// How a step's t2 follows t1: freely, or only once the rank learned that t1 completed (t2 may
// depend on t1's result) — by waiting for it, or by a completion callback no thread waits in
// (Handle::OnDone with caller_waits false: a graph's kernel, whose downstream op submits t2).
enum class AfterT1 { kFree, kWait, kCallback };

// t1's elements: with a callback, enough that the collective takes longer than registering the
// callback after the submission (a callback registered before completion is the case that
// went unseen before 2026-11-28), else 6.
int64_t T1Elements(AfterT1 after) { return after == AfterT1::kCallback ? 1 << 20 : 6; }

// One step of four allreduces "t0".."t3" (6 floats, t1 as T1Elements), submitted a few
// milliseconds apart, t2 after t1 as `after` says. Every result is checked; a step that does
// not complete within 30 s fails. The spacing makes negotiation's grouping finer than the
// ranks' reports allow (a response per tensor, mostly), so that the first schedule has
// something to give way to; what the job settles on does not depend on it (however the steps
// were negotiated, SchedulesConvergenceTest).
void SpacedStep(std::vector<std::unique_ptr<Context>>& contexts, AfterT1 after) {
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<std::vector<float>> in;
    std::vector<Handle> handles;
    for (int t = 0; t < 4; ++t) {
      const int64_t elements = t == 1 ? T1Elements(after) : 6;
      in.push_back(Input(rank, t, elements));
      handles.push_back(contexts[rank]->Allreduce(absl::StrCat("t", t), in[t].data(), in[t].data(),
                                                  DataType::kFloat32, {elements}));
      if (t == 1 && after == AfterT1::kWait) {
        ASSERT_TRUE(handles[1].Wait().ok()) << handles[1].Wait();
      } else if (t == 1 && after == AfterT1::kCallback) {
        absl::Notification done;
        handles[1].OnDone([&](const absl::Status&) { done.Notify(); }, /*caller_waits=*/false);
        ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)))
            << "rank " << rank << ": t1 never completed (in one collective with t2?)";
      }
      absl::SleepFor(absl::Milliseconds(3));
    }
    for (int t = 0; t < 4; ++t) {
      ASSERT_TRUE(handles[t].Wait().ok()) << handles[t].Wait();
      ExpectNear(in[t], Sum(t, static_cast<int64_t>(in[t].size())),
                 absl::StrCat("rank ", rank, ", t", t));
    }
  });
}

// Steps until the job runs a schedule of `entries` collectives (false after 30 s).
bool StepUntilScheduledIn(std::vector<std::unique_ptr<Context>>& contexts, coordinator::Job& job,
                          int entries, AfterT1 after) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    SpacedStep(contexts, after);
    const coordinator::ScheduleInfo info = job.Describe().schedules;
    if (info.active != 0 && info.entries == entries) return true;
  }
  return false;
}

// Steps of SpacedStep until the job runs a schedule of `entries` collectives, then 10 more
// steps: it holds. Whether a finer schedule ran first (negotiation grouping the first steps
// finer than the reports allow) depends on how a busy machine times the steps, so that it gives
// way is proven without timing, by SchedulesConvergenceTest; here, that the job reaches the
// grouping the reports allow, whatever came first, and stays there.
void ExpectStepsSettleInto(int entries, AfterT1 after) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  std::shared_ptr<coordinator::Job> job = FindJob(cluster);
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(StepUntilScheduledIn(contexts, *job, entries, after))
      << "no schedule of " << entries << " collectives formed";
  const coordinator::ScheduleInfo settled = job->Describe().schedules;
  EXPECT_EQ(settled.tensors, 4);
  for (int s = 0; s < 10; ++s) SpacedStep(contexts, after);
  EXPECT_EQ(job->Describe().schedules.active, settled.active) << "the settled schedule ended";
  ShutdownAll(contexts);
}

// The ranks' reports show that none of a step's allreduces waits for another's result: the
// schedule of one response per tensor gives way to one of a single collective, which holds.
TEST(ScheduleTest, AllreducesNoRankWaitsBetweenRunAsOneCollectiveOnceReported) {
  ExpectStepsSettleInto(1, AfterT1::kFree);
}

// A rank waits for t1 before it submits t2: t1 and t2 never share a collective (it would
// never complete), while t0 joins t1 and t2 joins t3.
TEST(ScheduleTest, AnAllreduceSubmittedAfterAWaitStaysOutOfTheCollectiveBeforeIt) {
  ExpectStepsSettleInto(2, AfterT1::kWait);
}

// The same when the rank learns of t1's completion by its callback alone (a graph whose op
// takes t1's result): until 2026-11-28 such a completion went unseen when the callback was
// registered before it, t1 and t2 shared a collective, and the step never completed.
TEST(ScheduleTest, AnAllreduceSubmittedAfterACompletionCallbackStaysOutOfTheCollectiveBeforeIt) {
  ExpectStepsSettleInto(2, AfterT1::kCallback);
}

// Every allreduce is waited for before the next is submitted (as synchronous ones are): no
// two may share a collective, so the schedule of one response each holds however long the
// ranks report (it would end, to be replaced by a fused one, if the waits went unseen).
TEST(ScheduleTest, AllreducesEachWaitedBeforeTheNextKeepAScheduleOfOneCollectiveEach) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  std::shared_ptr<coordinator::Job> job = FindJob(cluster);
  ASSERT_NE(job, nullptr);
  const absl::Time end = absl::Now() + absl::Seconds(4);  // progress reports: about 1 a second
  while (absl::Now() < end) {
    OnEveryRank(kRanks, [&](int rank) {
      for (int t = 0; t < 4; ++t) {
        std::vector<float> in = Input(rank, t, 6);
        ASSERT_TRUE(
            contexts[rank]
                ->Allreduce(absl::StrCat("t", t), in.data(), in.data(), DataType::kFloat32, {6})
                .Wait()
                .ok());
        ExpectNear(in, Sum(t, 6), absl::StrCat("rank ", rank, ", t", t));
      }
    });
  }
  const coordinator::ScheduleInfo info = job->Describe().schedules;
  EXPECT_EQ(info.active, 1);
  EXPECT_EQ(info.published, 1);
  EXPECT_EQ(info.entries, 4);
  ShutdownAll(contexts);
}

// Holds back the first schedule that comes down the stream (and what follows it) until
// Release(); later ones pass.
class ScheduleHoldingChannel : public ForwardingChannel {
 public:
  using ForwardingChannel::ForwardingChannel;
  internal::SessionEvent Receive() override {
    internal::SessionEvent event = ForwardingChannel::Receive();
    if (event.down.schedule.has_value()) {
      absl::MutexLock lock(&mu_);
      holding_ = !released_;
      mu_.Await(absl::Condition(&released_));
      holding_ = false;
    }
    return event;
  }
  void Cancel() override {
    Release();
    ForwardingChannel::Cancel();
  }
  bool holding() {
    absl::MutexLock lock(&mu_);
    return holding_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

 private:
  absl::Mutex mu_;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// A thread that began waiting for a tensor before the schedule came (it submitted the tensor
// under negotiation), and was already registered as blocked, is not left waiting when the
// schedule puts that tensor in one entry with a tensor the thread has not submitted yet: the
// rank deviates as the schedule arrives, and the step completes under negotiation.
TEST(ScheduleTest, AWaitBegunBeforeTheScheduleCameEndsItInsteadOfWaitingForever) {
  coordinator::CoordinatorOptions options = Schedules(true);
  // Ranks send each step's two requests together and they fuse: one entry of "t0" and "t1".
  options.registry.job.negotiator.cycle_time = absl::Milliseconds(100);
  TestCluster cluster(options);
  ScheduleHoldingChannel* held = nullptr;
  auto contexts =
      JoinThrough(cluster, "job", kRanks,
                  [&](int rank, auto real) -> std::unique_ptr<internal::ControlChannel> {
                    if (rank != 0) return real;
                    auto channel = std::make_unique<ScheduleHoldingChannel>(std::move(real));
                    held = channel.get();
                    return channel;
                  });
  ASSERT_NE(held, nullptr);
  const std::vector<int64_t> sizes = {6, 6};
  std::shared_ptr<coordinator::Job> job = FindJob(cluster);
  ASSERT_NE(job, nullptr);
  // Steps until the coordinator publishes the schedule (rank 0 does not get it yet).
  for (int s = 0; s < 10 && job->Describe().schedules.active == 0; ++s) {
    ExpectSums(Step(contexts, sizes), sizes, "step");
  }
  const coordinator::ScheduleInfo info = job->Describe().schedules;
  ASSERT_EQ(info.active, 1) << "no schedule formed";
  ASSERT_EQ(info.entries, 1) << "t0 and t1 were not fused";
  const absl::Time arrival = absl::Now() + absl::Seconds(5);
  while (!held->holding() && absl::Now() < arrival) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(held->holding()) << "rank 0 never received the schedule";

  OnEveryRank(kRanks, [&](int rank) {
    Context& ctx = *contexts[rank];
    std::vector<std::vector<float>> in = {Input(rank, 0, 6), Input(rank, 1, 6)};
    auto submit = [&](int t) {
      return ctx.Allreduce(absl::StrCat("t", t), in[t].data(), in[t].data(), DataType::kFloat32,
                           {6});
    };
    if (rank != 0) {
      Handle h0 = submit(0);
      Handle h1 = submit(1);
      ASSERT_TRUE(h0.Wait().ok()) << h0.Wait();
      ASSERT_TRUE(h1.Wait().ok()) << h1.Wait();
    } else {
      // Rank 0 reads t0 before it computes (submits) t1.
      Handle h0 = submit(0);
      std::atomic<bool> done = false;
      absl::Status s0;
      std::thread waiter([&] {
        s0 = h0.Wait();
        done = true;
      });
      // Long enough for the wait to register as blocked (after 50 ms).
      absl::SleepFor(absl::Milliseconds(300));
      EXPECT_FALSE(done) << "t0 completed without the other ranks";
      const absl::Time released = absl::Now();
      held->Release();
      while (!done && absl::Now() < released + absl::Seconds(5)) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      EXPECT_TRUE(done) << "the wait that began before the schedule came still waits 5 s later";
      waiter.join();
      ASSERT_TRUE(s0.ok()) << s0;
      Handle h1 = submit(1);
      ASSERT_TRUE(h1.Wait().ok()) << h1.Wait();
    }
    ExpectNear(in[0], Sum(0, 6), absl::StrCat("rank ", rank, ", t0"));
    ExpectNear(in[1], Sum(1, 6), absl::StrCat("rank ", rank, ", t1"));
  });
  for (int s = 0; s < 5; ++s) ExpectSums(Step(contexts, sizes), sizes, "step after");
  ShutdownAll(contexts);
}

}  // namespace
}  // namespace troika::testing::schedule_steps
