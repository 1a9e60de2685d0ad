// Steady-state schedules (docs/protocol.md, Schedules): once a job's steps repeat, its ranks
// run them without requests; results are bit for bit those of negotiation, and any deviation
// — another tensor, another shape, a wait the schedule cannot satisfy, a join, a new process
// set, a shutdown — ends the schedule with the outcome negotiation gives, and steps go on.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/request_counter.h"
#include "tests/integration/schedule_steps.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing::schedule_steps {
namespace {

// Runs `steps` steps; expects every step's results to be the bits of the first step's, and
// (once steps repeat) the last steps to send (almost) no requests up. (Wait states and
// progress reports still go up, as many as the machine's speed makes: RequestCounter.)
void ExpectScheduledStepsMatchNegotiated(TestCluster& cluster, const std::vector<int64_t>& sizes,
                                         int steps, bool wait = false) {
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  StepResults first = Step(contexts, sizes, wait);
  ExpectSums(first, sizes, "step 0");
  int64_t before_last = 0;
  for (int s = 1; s < steps; ++s) {
    if (s == steps - 10) before_last = sent.Total();
    StepResults results = Step(contexts, sizes, wait);
    for (int r = 0; r < kRanks; ++r) {
      for (size_t t = 0; t < sizes.size(); ++t) {
        ASSERT_EQ(0, std::memcmp(results[r][t].data(), first[r][t].data(),
                                 results[r][t].size() * sizeof(float)))
            << "step " << s << ", rank " << r << ", t" << t << " differs from step 0";
      }
    }
  }
  // Negotiated, 10 steps send at least 10 * kRanks messages of requests; scheduled, none.
  EXPECT_LT(sent.Total() - before_last, 2 * kRanks)
      << "the last 10 steps still sent requests: no schedule formed";
  auto job = cluster.coordinator().registry().Find("job");
  ASSERT_TRUE(job.ok()) << job.status();
  const coordinator::ScheduleInfo info = (*job)->Describe().schedules;
  EXPECT_TRUE(info.enabled);
  EXPECT_EQ(info.active, 1) << "the first schedule held to the end";
  EXPECT_EQ(info.tensors, static_cast<int>(sizes.size()));
  EXPECT_EQ(info.executing_ranks, kRanks);
  ShutdownAll(contexts);
}

TEST(ScheduleTest, ScheduledStepsEqualNegotiatedOnesBitForBitFused) {
  TestCluster cluster(Schedules(true, 64 << 20, /*buckets=*/false));
  // Submitted together, the tensors fuse into one response per step (mostly: a step that
  // timing split would be bucketed back together, with other bits, without buckets=false);
  // the last is over 1 MiB with the rest (its vote goes in an allreduce of its own).
  ExpectScheduledStepsMatchNegotiated(cluster, {1, 3, 1000, 5}, 30);
}

TEST(ScheduleTest, ScheduledStepsEqualNegotiatedOnesBitForBitUnfused) {
  TestCluster cluster(Schedules(true, /*fusion_threshold_bytes=*/0));
  ExpectScheduledStepsMatchNegotiated(cluster, {1, 3, 1000, 300'000}, 30);
}

// Synchronous allreduces (AllreduceOptions::wait), one tensor after another: each scheduled
// entry runs on the rank's own thread, with the same bits.
TEST(ScheduleTest, SynchronousScheduledAllreducesEqualNegotiatedOnesBitForBit) {
  TestCluster cluster(Schedules(true));
  ExpectScheduledStepsMatchNegotiated(cluster, {1, 2, 1000, 300'000}, 30, /*wait=*/true);
}

// Synchronous allreduces, each with its own op, scales, shape and name (one longer than a
// short string holds), one after another: once scheduled, each runs on the rank's own thread
// from a request built in an entry the thread reuses (ContextImpl::AllreduceNow), and each
// step's results are still each tensor's own.
TEST(ScheduleTest, SynchronousAllreducesWithTheirOwnOpsAndScalesEachGetTheirOwnResult) {
  struct Tensor {
    std::string name;
    int64_t elements;
    AllreduceOptions options;
  };
  const std::vector<Tensor> tensors = {
      {"t0", 3, {.op = ReduceOp::kSum}},
      {"t1", 5, {.op = ReduceOp::kAverage, .prescale = 2.0, .postscale = 0.5}},
      {"t2", 3, {.op = ReduceOp::kMax}},
      {"a.tensor.name.longer.than.a.short.string", 5, {.op = ReduceOp::kSum, .prescale = 0.5}},
  };
  auto expected = [&](size_t t) {
    std::vector<float> want(static_cast<size_t>(tensors[t].elements));
    for (size_t i = 0; i < want.size(); ++i) {
      float sum = 0, max = -2;
      for (int r = 0; r < kRanks; ++r) {
        const float x = Input(r, static_cast<int>(t), tensors[t].elements)[i];
        sum += static_cast<float>(x * tensors[t].options.prescale);
        max = std::max(max, x);
      }
      if (tensors[t].options.op == ReduceOp::kMax) {
        want[i] = max;
      } else if (tensors[t].options.op == ReduceOp::kAverage) {
        want[i] = static_cast<float>(sum / kRanks * tensors[t].options.postscale);
      } else {
        want[i] = sum;
      }
    }
    return want;
  };
  TestCluster cluster(Schedules(true));
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  constexpr int kSteps = 40;
  int64_t before_last = 0;
  for (int s = 0; s < kSteps; ++s) {
    if (s == kSteps - 10) before_last = sent.Total();
    OnEveryRank(kRanks, [&](int rank) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        std::vector<float> data = Input(rank, static_cast<int>(t), tensors[t].elements);
        AllreduceOptions options = tensors[t].options;
        options.wait = true;
        Handle h = contexts[rank]->Allreduce(tensors[t].name, data.data(), data.data(),
                                             DataType::kFloat32, {tensors[t].elements}, options);
        ASSERT_TRUE(h.Poll()) << "a synchronous allreduce returned early";
        ASSERT_TRUE(h.Wait().ok()) << h.Wait();
        ExpectNear(data, expected(t),
                   absl::StrCat("step ", s, ", rank ", rank, ", ", tensors[t].name));
      }
    });
  }
  EXPECT_LT(sent.Total() - before_last, 2 * kRanks)
      << "the last 10 steps still sent requests: no schedule formed";
  ShutdownAll(contexts);
}

TEST(ScheduleTest, WithoutSchedulesEveryStepSendsRequests) {
  if (const char* on = std::getenv("TROIKA_TEST_SCHEDULES"); on != nullptr && *on == '1') {
    GTEST_SKIP() << "TROIKA_TEST_SCHEDULES=1 turns schedules on in every cluster";
  }
  TestCluster cluster(Schedules(false));
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  const std::vector<int64_t> sizes = {4, 4};
  for (int s = 0; s < 10; ++s) Step(contexts, sizes);
  const int64_t before = sent.Total();
  for (int s = 0; s < 10; ++s) ExpectSums(Step(contexts, sizes), sizes, "step");
  EXPECT_GE(sent.Total() - before, 10 * kRanks);
  ShutdownAll(contexts);
}

// Deviations, each at the first, a middle and the last of three scheduled tensors, on one
// rank or on all: the outcome negotiation gives, within 5 s, and the next steps work.
enum class Deviation { kExtraTensor, kOtherShape, kWaitFirst, kJoin };

struct Case {
  Deviation kind;
  int position;    // of the tensor it happens at: 0, 1, 2
  bool all_ranks;  // else rank 1 only
  bool fused;      // the three tensors fused into one scheduled entry
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const char* kinds[] = {"ExtraTensor", "OtherShape", "WaitFirst", "Join"};
  return absl::StrCat(kinds[static_cast<int>(info.param.kind)], "At", info.param.position,
                      info.param.all_ranks ? "AllRanks" : "OneRank",
                      info.param.fused ? "Fused" : "Unfused");
}

class ScheduleDeviationTest : public ::testing::TestWithParam<Case> {};

// One step of tensors t0, t1, t2 (6 floats each) with deviation `c`; checks every result
// (and that every rank fails a mismatched tensor with the same message), within 5 s.
void DeviatingStep(std::vector<std::unique_ptr<Context>>& contexts, const Case& c) {
  const std::vector<int64_t> sizes = {6, 6, 6};
  const absl::Time start = absl::Now();
  std::vector<std::string> errors(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    Context& ctx = *contexts[rank];
    const bool deviates = c.all_ranks || rank == 1;
    std::vector<std::vector<float>> data;
    std::vector<Handle> handles;
    std::vector<float> extra = Input(rank, 7, 6);
    std::optional<Handle> extra_handle;
    for (int t = 0; t < 3; ++t) {
      int64_t n = sizes[t];
      if (deviates && t == c.position) {
        if (c.kind == Deviation::kExtraTensor) {
          extra_handle =
              ctx.Allreduce("extra", extra.data(), extra.data(), DataType::kFloat32, {6});
        } else if (c.kind == Deviation::kOtherShape) {
          n = 5;
        } else if (c.kind == Deviation::kJoin) {
          break;  // joins (below) instead of submitting the rest
        }
      }
      data.push_back(Input(rank, t, n));
      handles.push_back(ctx.Allreduce(absl::StrCat("t", t), data[t].data(), data[t].data(),
                                      DataType::kFloat32, {n}));
      if (deviates && c.kind == Deviation::kWaitFirst && t == c.position) {
        ASSERT_TRUE(handles[t].Wait().ok()) << handles[t].Wait();
      }
    }
    std::optional<Handle> join;
    if (c.kind == Deviation::kJoin) join = ctx.Join();
    for (size_t t = 0; t < handles.size(); ++t) {
      absl::Status s = handles[t].Wait();
      if (!s.ok()) {
        errors[rank] += absl::StrCat("t", t, ": ", s.message(), "\n");
        continue;
      }
      const int64_t n = static_cast<int64_t>(data[t].size());
      std::vector<float> want = Sum(static_cast<int>(t), n);
      for (int r = 0; r < kRanks; ++r) {
        // A rank that joined before submitting a tensor contributes zeros to it.
        const bool joined = c.kind == Deviation::kJoin && (c.all_ranks || r == 1) &&
                            static_cast<int>(t) >= c.position;
        if (!joined) continue;
        std::vector<float> in = Input(r, static_cast<int>(t), n);
        for (size_t i = 0; i < want.size(); ++i) want[i] -= in[i];
      }
      ExpectNear(data[t], want, absl::StrCat("rank ", rank, ", t", t));
    }
    if (extra_handle) {
      ASSERT_TRUE(extra_handle->Wait().ok()) << extra_handle->Wait();
      ExpectNear(extra, Sum(7, 6), absl::StrCat("rank ", rank, ", extra"));
    }
    if (join) {
      ASSERT_TRUE(join->Wait().ok()) << join->Wait();
    }
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the deviating step took too long";
  if (c.kind == Deviation::kOtherShape && !c.all_ranks) {
    // Every rank fails the mismatched tensor with the same message, as under negotiation.
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_NE(errors[r].find(absl::StrCat("t", c.position, ": ")), std::string::npos)
          << "rank " << r << ": " << errors[r];
      EXPECT_EQ(errors[r], errors[0]);
    }
  } else {
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (Deviation kind :
       {Deviation::kExtraTensor, Deviation::kOtherShape, Deviation::kWaitFirst, Deviation::kJoin}) {
    for (int position = 0; position < 3; ++position) {
      for (bool all : {false, true}) {
        // An extra tensor on one rank only is a stall under negotiation too.
        if (kind == Deviation::kExtraTensor && !all) continue;
        for (bool fused : {false, true}) {
          // Unfused, waiting for a tensor before submitting the next deviates nothing.
          if (kind == Deviation::kWaitFirst && !fused) continue;
          cases.push_back({kind, position, all, fused});
        }
      }
    }
  }
  return cases;
}

TEST_P(ScheduleDeviationTest, EndsTheScheduleWithTheNegotiatedOutcome) {
  const Case c = GetParam();
  TestCluster cluster(Schedules(true, c.fused ? 64 << 20 : 0));
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  const std::vector<int64_t> sizes = {6, 6, 6};
  for (int s = 0; s < 8; ++s) ExpectSums(Step(contexts, sizes), sizes, "warm-up step");
  const int64_t before = sent.Total();
  Step(contexts, sizes);
  ASSERT_LT(sent.Total() - before, kRanks) << "no schedule in force";

  DeviatingStep(contexts, c);
  // The steps go on, and settle into a schedule again.
  for (int s = 0; s < 12; ++s) ExpectSums(Step(contexts, sizes), sizes, "step after");
  const int64_t again = sent.Total();
  Step(contexts, sizes);
  EXPECT_LT(sent.Total() - again, kRanks) << "no schedule formed again";
  ShutdownAll(contexts);
}

INSTANTIATE_TEST_SUITE_P(Kinds, ScheduleDeviationTest, ::testing::ValuesIn(AllCases()), CaseName);

// A synchronous allreduce that the schedule runs on each rank's own thread, in an entry that
// one rank voids (it submitted first a tensor the schedule does not name): the entry goes back
// to be negotiated on every rank, each gets both sums within 5 s, and the steps settle into a
// schedule again.
TEST(ScheduleTest, ASynchronousAllreduceInAnEntryAnotherRankVoidsIsNegotiatedWithItsSum) {
  TestCluster cluster(Schedules(true, /*fusion_threshold_bytes=*/0));  // an entry per tensor
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  const std::vector<int64_t> sizes = {6, 6, 6};
  for (int s = 0; s < 8; ++s) ExpectSums(Step(contexts, sizes, /*wait=*/true), sizes, "warm-up");
  const int64_t before = sent.Total();
  Step(contexts, sizes, /*wait=*/true);
  ASSERT_LT(sent.Total() - before, kRanks) << "no schedule in force";

  const absl::Time start = absl::Now();
  OnEveryRank(kRanks, [&](int rank) {
    Context& ctx = *contexts[rank];
    std::vector<float> extra = Input(rank, 7, 6);
    std::vector<float> t0 = Input(rank, 0, 6);
    std::optional<Handle> early;
    if (rank == 1) {
      early = ctx.Allreduce("extra", extra.data(), extra.data(), DataType::kFloat32, {6});
    }
    absl::Status s =
        ctx.Allreduce("t0", t0.data(), t0.data(), DataType::kFloat32, {6}, {.wait = true}).Wait();
    ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s;
    ExpectNear(t0, Sum(0, 6), absl::StrCat("rank ", rank, ", t0"));
    s = rank == 1 ? early->Wait()
                  : ctx.Allreduce("extra", extra.data(), extra.data(), DataType::kFloat32, {6},
                                  {.wait = true})
                        .Wait();
    ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s;
    ExpectNear(extra, Sum(7, 6), absl::StrCat("rank ", rank, ", extra"));
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the voided step took too long";
  for (int s = 0; s < 12; ++s) ExpectSums(Step(contexts, sizes, /*wait=*/true), sizes, "after");
  const int64_t again = sent.Total();
  Step(contexts, sizes, /*wait=*/true);
  EXPECT_LT(sent.Total() - again, kRanks) << "no schedule formed again";
  ShutdownAll(contexts);
}

// Many seeds: repeated steps with random deviations of every kind among them (about one
// step in four), fused or not; every result of every step is checked.
TEST(ScheduleTest, RandomDeviationsAmongRepeatedStepsKeepEveryResult) {
  const std::vector<int64_t> sizes = {6, 6, 6};
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 gen(seed);
    const bool fused = gen() % 2 == 0;
    std::vector<Case> cases;
    for (const Case& c : AllCases()) {
      if (c.fused == fused) cases.push_back(c);
    }
    TestCluster cluster(Schedules(true, fused ? 64 << 20 : 0));
    auto contexts = cluster.Join("job", kRanks);
    for (int step = 0; step < 30 && !HasFailure(); ++step) {
      if (gen() % 4 == 0) {
        DeviatingStep(contexts, cases[gen() % cases.size()]);
      } else {
        // Synchronous steps too: in a fused schedule the first one waits for an entry the
        // rank cannot complete alone, which must end the schedule, not hang.
        const bool wait = gen() % 3 == 0;
        ExpectSums(Step(contexts, sizes, wait), sizes,
                   absl::StrCat("step ", step, wait ? " (synchronous)" : ""));
      }
    }
    ShutdownAll(contexts);
    if (HasFailure()) return;
  }
}

TEST(ScheduleTest, AddingAProcessSetEndsTheScheduleAndStepsGoOn) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  const std::vector<int64_t> sizes = {6, 6};
  for (int s = 0; s < 8; ++s) Step(contexts, sizes);
  OnEveryRank(kRanks, [&](int rank) {
    absl::StatusOr<int> id = contexts[rank]->AddProcessSet({0, 2});
    ASSERT_TRUE(id.ok()) << id.status();
    if (rank % 2 == 0) {
      float x = static_cast<float>(rank);
      AllreduceOptions in_set;
      in_set.process_set = *id;
      ASSERT_TRUE(
          contexts[rank]->Allreduce("in-set", &x, &x, DataType::kFloat32, {1}, in_set).Wait().ok());
      EXPECT_EQ(x, 2.0f);
    }
  });
  for (int s = 0; s < 12; ++s) ExpectSums(Step(contexts, sizes), sizes, "step after");
  ShutdownAll(contexts);
}

TEST(ScheduleTest, RanksShuttingDownInAScheduleLeaveCleanly) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  const std::vector<int64_t> sizes = {6, 6};
  for (int s = 0; s < 10; ++s) Step(contexts, sizes);
  const absl::Time start = absl::Now();
  OnEveryRank(kRanks, [&](int rank) {
    if (rank == 3) absl::SleepFor(absl::Milliseconds(300));  // one rank late
    EXPECT_TRUE(contexts[rank]->Shutdown().ok());
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Ten steps of `sizes`, checked; returns the job, or null (a failure) if no schedule formed.
std::shared_ptr<coordinator::Job> StepUntilScheduled(
    TestCluster& cluster, std::vector<std::unique_ptr<Context>>& contexts,
    const std::vector<int64_t>& sizes) {
  for (int s = 0; s < 10; ++s) ExpectSums(Step(contexts, sizes), sizes, "step");
  std::shared_ptr<coordinator::Job> job = FindJob(cluster);
  if (job == nullptr || job->Describe().schedules.active != 1) {
    ADD_FAILURE() << "no schedule formed";
    return nullptr;
  }
  return job;
}

// Ranks shut down one after another (here: contexts of one process, on one thread): the
// first one's deviation ends the schedule on every rank through the coordinator, so it need
// not wait for the others to reach its void entry.
TEST(ScheduleTest, RanksShuttingDownOneAfterAnotherInAScheduleLeaveAtOnce) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  const std::vector<int64_t> sizes = {6, 6};
  for (int s = 0; s < 10; ++s) ExpectSums(Step(contexts, sizes), sizes, "step");
  const absl::Time start = absl::Now();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(contexts[r]->Shutdown().ok()) << "rank " << r;
  // Without the coordinator's word each rank but the last would wait 5 s.
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// One rank deviates while the others have nothing to submit: the schedule still ends on
// every rank at once (they deviate when the coordinator tells them), and what the deviating
// rank submitted is negotiated as soon as the others submit it.
TEST(ScheduleTest, ADeviationEndsTheScheduleOnRanksThatSubmitNothing) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  const std::vector<int64_t> sizes = {6, 6};
  std::shared_ptr<coordinator::Job> job = StepUntilScheduled(cluster, contexts, sizes);
  ASSERT_NE(job, nullptr);
  std::vector<float> extra(kRanks, 1);
  Handle first = contexts[0]->Allreduce("extra", &extra[0], &extra[0], DataType::kFloat32, {1});
  const absl::Time deadline = absl::Now() + absl::Seconds(60);  // a not-hung bound
  while (job->Describe().schedules.active != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(job->Describe().schedules.active, 0) << "the schedule did not end";
  OnEveryRank(kRanks, [&](int rank) {
    Handle h = rank == 0 ? std::move(first)
                         : contexts[rank]->Allreduce("extra", &extra[rank], &extra[rank],
                                                     DataType::kFloat32, {1});
    ASSERT_TRUE(h.Wait().ok()) << h.Wait();
    EXPECT_EQ(extra[rank], kRanks);
  });
  for (int s = 0; s < 12; ++s) ExpectSums(Step(contexts, sizes), sizes, "step after");
  ShutdownAll(contexts);
}

// A rank busy elsewhere for longer than the data plane's timeout (saving a checkpoint, say)
// while the others wait in a scheduled collective: under negotiation they would wait without
// limit, so the waiting ranks end the schedule (at a quarter of the timeout) and the step
// completes under negotiation once the busy rank comes back.
TEST(ScheduleTest, ARankAwayLongerThanTheDataTimeoutEndsTheScheduleInsteadOfFailingTheJob) {
  TestCluster cluster(Schedules(true));
  std::vector<std::unique_ptr<Context>> contexts(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    Options options = cluster.RankOptions("job", rank, kRanks);
    options.data_timeout = absl::Seconds(6);  // the schedule ends after 1.5 s of waiting
    auto c = Context::Init(options);
    ASSERT_TRUE(c.ok()) << c.status();
    contexts[rank] = *std::move(c);
  });
  const std::vector<int64_t> sizes = {6, 6};
  std::shared_ptr<coordinator::Job> job = StepUntilScheduled(cluster, contexts, sizes);
  ASSERT_NE(job, nullptr);
  OnEveryRank(kRanks, [&](int rank) {
    if (rank == 1) absl::SleepFor(absl::Seconds(8));
    std::vector<float> a(6, 1), b(6, 2);
    Handle ha = contexts[rank]->Allreduce("t0", a.data(), a.data(), DataType::kFloat32, {6});
    Handle hb = contexts[rank]->Allreduce("t1", b.data(), b.data(), DataType::kFloat32, {6});
    ASSERT_TRUE(ha.Wait().ok()) << "rank " << rank << ": " << ha.Wait();
    ASSERT_TRUE(hb.Wait().ok()) << "rank " << rank << ": " << hb.Wait();
    EXPECT_EQ(b[5], 2 * kRanks);
  });
  EXPECT_EQ(job->Describe().schedules.ended, 1);
  for (int s = 0; s < 12; ++s) ExpectSums(Step(contexts, sizes), sizes, "step after");
  ShutdownAll(contexts);
}

// Ranks report their progress in a schedule: a rank 30 ms late for every step is the
// straggler, and every scheduled tensor counts in the statistics and metrics as a negotiated
// one would.
TEST(ScheduleTest, ProgressReportsFeedStragglerStatisticsAndMetrics) {
  TestCluster cluster(Schedules(true));
  auto contexts = cluster.Join("job", kRanks);
  constexpr int kSteps = 40;
  OnEveryRank(kRanks, [&](int rank) {
    for (int s = 0; s < kSteps; ++s) {
      if (rank == 2) absl::SleepFor(absl::Milliseconds(30));
      std::vector<float> a(6, 1), b(6, 2);
      Handle ha = contexts[rank]->Allreduce("t0", a.data(), a.data(), DataType::kFloat32, {6});
      Handle hb = contexts[rank]->Allreduce("t1", b.data(), b.data(), DataType::kFloat32, {6});
      ASSERT_TRUE(ha.Wait().ok() && hb.Wait().ok());
      ASSERT_EQ(b[5], 2 * kRanks);
    }
  });
  std::shared_ptr<coordinator::Job> job = FindJob(cluster);
  ASSERT_NE(job, nullptr);
  ASSERT_EQ(job->Describe().schedules.active, 1) << "no schedule formed";
  // Reports go up about once a second: every round arrives within a few (a not-hung bound).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (job->Describe().stragglers.tensors < 2 * kSteps && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const coordinator::JobInfo info = job->Describe();
  EXPECT_EQ(info.stragglers.tensors, 2 * kSteps) << "every scheduled tensor counts once";
  EXPECT_EQ(info.stragglers.straggling, std::vector<int>{2});
  ASSERT_EQ(info.stragglers.ranks.size(), static_cast<size_t>(kRanks));
  EXPECT_GE(info.stragglers.ranks[2].mean_lateness, absl::Milliseconds(15));
  EXPECT_LT(info.stragglers.ranks[0].mean_lateness, absl::Milliseconds(15));
  const coordinator::OpTotals allreduces =
      job->MetricsSnapshot().ops[static_cast<int>(CollectiveType::kAllreduce)];
  EXPECT_EQ(allreduces.count, 2 * kSteps);
  EXPECT_EQ(allreduces.bytes, 2 * kSteps * 6 * 4);
  ShutdownAll(contexts);
}

// A rank that stops in the middle of a scheduled step (hung, or far slower) is what the stall
// inspector reports under negotiation: the others report the tensors they wait for, the job
// shows them pending with the missing rank, and the stall shutdown time aborts the job,
// releasing the ranks blocked in the scheduled collective.
TEST(ScheduleTest, ARankStoppingInAScheduledStepIsPendingAndTheStallShutdownAbortsTheJob) {
  coordinator::CoordinatorOptions options = Schedules(true);
  options.registry.job.stall.warning_time = absl::Seconds(2);
  options.registry.job.stall.shutdown_time = absl::Seconds(4);
  TestCluster cluster(options);
  auto contexts = cluster.Join("job", kRanks);
  const std::vector<int64_t> sizes = {6, 6};
  std::shared_ptr<coordinator::Job> job = StepUntilScheduled(cluster, contexts, sizes);
  ASSERT_NE(job, nullptr);

  const absl::Time start = absl::Now();
  std::vector<std::string> errors(kRanks);
  std::vector<absl::Duration> failed_after(kRanks);
  // The ranks' progress reports arrive one by one (each within 50 ms): the job's pending
  // tensors show the other ranks as they report, until only rank 1 is missing. The latest
  // non-empty snapshot before the abort is what is checked.
  std::vector<coordinator::PendingTensorInfo> seen;
  auto only_rank_1_missing = [&] {
    if (seen.size() != 2) return false;
    for (const coordinator::PendingTensorInfo& p : seen) {
      if (p.missing_ranks != std::vector<int>{1}) return false;
    }
    return true;
  };
  std::thread watcher([&] {
    while (!only_rank_1_missing() && absl::Now() - start < absl::Seconds(6)) {
      std::vector<coordinator::PendingTensorInfo> pending = job->Describe().pending;
      if (!pending.empty()) seen = std::move(pending);
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  OnEveryRank(kRanks, [&](int rank) {
    if (rank == 1) absl::SleepFor(absl::Seconds(7));
    std::vector<float> a(6, 1), b(6, 2);
    Handle ha = contexts[rank]->Allreduce("t0", a.data(), a.data(), DataType::kFloat32, {6});
    Handle hb = contexts[rank]->Allreduce("t1", b.data(), b.data(), DataType::kFloat32, {6});
    absl::Status s = ha.Wait();
    if (s.ok()) s = hb.Wait();
    errors[rank] = s.ToString();
    failed_after[rank] = absl::Now() - start;
  });
  watcher.join();
  ASSERT_EQ(seen.size(), 2u) << "the job never showed the waiting tensors as pending";
  for (const coordinator::PendingTensorInfo& p : seen) {
    EXPECT_EQ(p.missing_ranks, std::vector<int>{1}) << p.name;
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_NE(errors[r].find("stalled"), std::string::npos) << "rank " << r << ": " << errors[r];
    if (r != 1) {
      // Stalled at 4 s by a report within a second of the first: released by about 5 s.
      EXPECT_LT(failed_after[r], absl::Seconds(6.5)) << "rank " << r;
    }
  }
  EXPECT_EQ(job->state(), coordinator::Job::State::kAborted);
}

}  // namespace
}  // namespace troika::testing::schedule_steps
