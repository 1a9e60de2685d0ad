// Forming on its own, over real parts: the last rank to attach runs the job and answers every
// waiting attach; an attach phase that times out becomes the policy's verdict; nodes reserve
// blocks (the record saved when one is added) or, in an elastic job out of blocks, wait to join
// up to its maximum; a job formed anew saves its record once it runs.

#include "coordinator/job/forming.h"

#include <memory>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;
using Answer = std::optional<absl::StatusOr<std::vector<Membership>>>;
using BlockAnswer = std::optional<absl::StatusOr<NodeBlock>>;

// The parts of one job of `size` ranks, made with `options`, and Forming over them.
struct Parts {
  Parts(int size, JobOptions options)
      : options(std::move(options)),
        roster("j", size, this->options.epoch, scheduler),
        sessions("j", size, {}),
        sets(size, NegotiatorOptions{}),
        generations(size, this->options, absl::Now()),
        kv(scheduler),
        lifecycle("j", roster, sessions, generations, kv, scheduler, nullptr, [] {}),
        recorder("j", size, Secret::Of("t"), roster, sets, generations,
                 [this](const v1::JobRecord&) { ++saves; }),
        policy("j", size, lifecycle, roster, sessions, generations),
        forming("j", size, roster, generations, lifecycle, recorder, policy) {}

  // `ranks` attach from host "h"; the answer goes to `*answer`. Returns the waiter's id.
  uint64_t Attach(const std::vector<int>& ranks, Answer* answer) {
    return forming.Wait(
        ranks, "h", absl::Seconds(30), [answer](auto m) { *answer = std::move(m); },
        [](uint64_t) {});
  }
  void Register(const std::string& host, int nproc, BlockAnswer* answer) {
    forming.RegisterNode(
        host, nproc, -1, [answer](absl::StatusOr<NodeBlock> b) { *answer = std::move(b); }, nullptr,
        "");
  }

  Scheduler scheduler;
  JobOptions options;
  Roster roster;
  Sessions sessions;
  ProcessSets sets;
  Generations generations;
  KvStore kv;
  Lifecycle lifecycle;
  int saves = 0;
  Recorder recorder;
  MembershipPolicy policy;
  Forming forming;
};

TEST(FormingTest, TheLastRankToAttachRunsTheJobAndAnswersEveryWaitingAttach) {
  Parts parts(2, {});
  Answer first, second;
  parts.Attach({0}, &first);
  EXPECT_EQ(parts.lifecycle.state(), Lifecycle::State::kAttaching);
  EXPECT_FALSE(first.has_value());
  parts.Attach({1}, &second);
  EXPECT_EQ(parts.lifecycle.state(), Lifecycle::State::kRunning);
  ASSERT_TRUE(first.has_value() && first->ok());
  ASSERT_TRUE(second.has_value() && second->ok());
  ASSERT_EQ((*first)->size(), 1u);
  EXPECT_EQ((**first)[0].rank, 0);
  EXPECT_EQ((**second)[0].rank, 1);
  EXPECT_EQ((**second)[0].size, 2);
  EXPECT_EQ(parts.saves, 0) << "a job's first incarnation is recorded as its nodes register";
}

TEST(FormingTest, AnAttachPhaseThatTimesOutIsAVerdictForTheJob) {
  Parts parts(2, {});
  Answer answer;
  const uint64_t id = parts.Attach({0}, &answer);
  std::optional<Verdict> verdict = parts.forming.Expired(id, absl::Seconds(30));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->kind, Verdict::Kind::kFailAttaches);
  EXPECT_THAT(verdict->reason, HasSubstr("rank 1"));
  EXPECT_FALSE(parts.roster.has_hosts()) << "the attach phase starts over";
  EXPECT_FALSE(parts.forming.Expired(id + 1, absl::Seconds(30)).has_value())
      << "no such waiting attach";
}

TEST(FormingTest, AnAttachThatTimesOutAfterTheJobRanIsNothing) {
  Parts parts(1, {});
  Answer answer;
  const uint64_t id = parts.Attach({0}, &answer);
  ASSERT_EQ(parts.lifecycle.state(), Lifecycle::State::kRunning);
  EXPECT_FALSE(parts.forming.Expired(id, absl::Seconds(30)).has_value());
}

TEST(FormingTest, ANodeReservesItsBlockOnceAndTheRecordIsSavedWhenOneIsAdded) {
  Parts parts(4, {});
  BlockAnswer a, again, b, none;
  parts.Register("a", 2, &a);
  ASSERT_TRUE(a.has_value() && a->ok());
  EXPECT_EQ((*a)->first_rank, 0);
  EXPECT_EQ(parts.saves, 1);
  parts.Register("a", 2, &again);
  ASSERT_TRUE(again.has_value() && again->ok());
  EXPECT_EQ((*again)->first_rank, 0) << "a restarted agent gets its block back";
  EXPECT_EQ(parts.saves, 1);
  parts.Register("b", 2, &b);
  ASSERT_TRUE(b.has_value() && b->ok());
  EXPECT_EQ((*b)->first_rank, 2);
  parts.Register("c", 0, &none);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FormingTest, AnElasticJobOutOfBlocksHoldsNodesAsJoiningUpToItsMaximum) {
  JobOptions options;
  options.min_size = 1;
  options.max_size = 3;
  options.next_generation = [](int, int64_t, std::optional<AbortCause>, const std::string&) {
    return std::shared_ptr<Job>();
  };
  Parts parts(2, std::move(options));
  BlockAnswer a, b, c, d;
  parts.Register("a", 1, &a);
  parts.Register("b", 1, &b);
  ASSERT_TRUE(a.has_value() && a->ok() && b.has_value() && b->ok());
  EXPECT_EQ((*b)->first_rank, 1);
  parts.Register("c", 1, &c);
  EXPECT_FALSE(c.has_value()) << "out of blocks: joins at the next commit";
  EXPECT_EQ(parts.generations.JoiningRanks(), 1);
  parts.Register("d", 1, &d);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->status().code(), absl::StatusCode::kResourceExhausted) << "past its maximum";
}

TEST(FormingTest, AJobFormedAnewTakesOverTheRecordOnceItRuns) {
  JobOptions options;
  options.epoch = 2;
  Parts parts(1, std::move(options));
  Answer answer;
  parts.Attach({0}, &answer);
  ASSERT_EQ(parts.lifecycle.state(), Lifecycle::State::kRunning);
  EXPECT_EQ(parts.saves, 1);
}

}  // namespace
}  // namespace troika::coordinator
