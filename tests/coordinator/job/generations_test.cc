// Generations on its own: the survivors' renumbering, nodes waiting to join (cancelled ones
// let go), the cut at a commit barrier and the admission, and the successor made once.

#include "coordinator/job/generations.h"

#include <optional>

#include "common/clock.h"
#include "coordinator/job/job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

Response Barrier(const std::string& name) {
  Response r;
  r.type = CollectiveType::kBarrier;
  r.names = {name};
  return r;
}

Generations::Joiner Joiner(const std::string& host, int nproc,
                           std::optional<absl::StatusOr<NodeBlock>>* answer,
                           std::function<bool()> cancelled = nullptr, std::string id = {}) {
  return {host, nproc, [answer](absl::StatusOr<NodeBlock> b) { *answer = std::move(b); },
          std::move(cancelled), std::move(id)};
}

TEST(GenerationsTest, SurvivorsKeepTheirOrderWithoutTheLostAndTheDeparted) {
  JobOptions options;
  options.epoch = 3;
  options.min_size = 2;
  Generations generations(5, options, absl::Now());
  EXPECT_FALSE(generations.elastic()) << "no factory for the next generation";
  MembershipChange change = generations.Survivors({1}, {3});
  EXPECT_EQ(change.epoch, 4);
  EXPECT_EQ(change.size, 3);
  EXPECT_THAT(change.next_rank, ElementsAre(0, -1, 1, -1, 2));
}

TEST(GenerationsTest, NodesJoinAtTheCommitAfterTheSurvivors) {
  JobOptions options;
  options.min_size = 1;
  options.next_generation = [](int, int64_t, std::optional<AbortCause>, const std::string&) {
    return std::shared_ptr<Job>();
  };
  Generations generations(2, options, absl::Now());
  ASSERT_TRUE(generations.elastic());
  std::optional<absl::StatusOr<NodeBlock>> x, y, gone;
  bool cancelled = false;
  generations.Join(Joiner("x", 2, &x, nullptr, "join-x"));
  generations.Join(Joiner("gone", 1, &gone, [&cancelled] { return cancelled; }));
  generations.Join(Joiner("y", 1, &y));
  EXPECT_EQ(generations.JoiningRanks(), 4);
  cancelled = true;
  EXPECT_EQ(generations.JoiningRanks(), 3);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->status().code(), absl::StatusCode::kCancelled);

  std::vector<Response> none = {Barrier("step")};
  EXPECT_FALSE(generations.CutAtCommit(none)) << "no commit among the responses";
  std::vector<Response> responses = {
      Barrier("before"), Barrier(std::string(kElasticCommitPrefix) + "1"), Barrier("after")};
  ASSERT_TRUE(generations.CutAtCommit(responses));
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].names.front(), "before");

  Generations::Admission admission = generations.Admit({1});
  EXPECT_EQ(admission.change.size, 4) << "rank 0 survives, then 2 + 1 joining";
  EXPECT_TRUE(admission.change.at_commit);
  EXPECT_EQ(admission.change.joined, 3);
  EXPECT_THAT(admission.first_ranks, ElementsAre(1, 3));
  ASSERT_EQ(admission.change.admitted.size(), 1u);
  EXPECT_EQ(admission.change.admitted[0].first_rank, 1);
  EXPECT_EQ(admission.reason, "3 ranks on x, y joined at a commit");
  EXPECT_EQ(generations.JoiningRanks(), 0);
  std::vector<Response> later = {Barrier(std::string(kElasticCommitPrefix) + "2")};
  EXPECT_FALSE(generations.CutAtCommit(later)) << "no node waits any more";
}

TEST(GenerationsTest, FailedJoinersAreAnsweredOnce) {
  JobOptions options;
  options.min_size = 1;
  Generations generations(2, options, absl::Now());
  std::optional<absl::StatusOr<NodeBlock>> x;
  generations.Join(Joiner("x", 1, &x));
  generations.FailJoiners(absl::AbortedError("over"));
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(generations.JoiningRanks(), 0);
}

TEST(GenerationsTest, TheNextIncarnationIsMadeOnceAndTheLineageFollowsIt) {
  Scheduler scheduler;
  std::vector<std::shared_ptr<Job>> made;
  auto make = [&](int64_t epoch) {
    JobOptions options;
    options.epoch = epoch;
    made.push_back(std::make_shared<Job>("j", 2, options, scheduler, Clock::Real(), [] {}));
    return made.back();
  };
  auto self = make(1);
  JobOptions options;
  options.next_incarnation = make;
  Generations generations(2, options, absl::Now());
  ASSERT_TRUE(generations.forms_again());
  auto lineage = std::make_shared<JobLineage>(self);
  generations.Track(lineage);
  bool first = false, second = false;
  std::shared_ptr<Job> next = generations.NextIncarnationOf(self, &first);
  EXPECT_TRUE(first);
  EXPECT_EQ(next->epoch(), 2);
  EXPECT_EQ(generations.NextIncarnationOf(self, &second), next);
  EXPECT_FALSE(second);
  EXPECT_EQ(generations.successor(), next);
  EXPECT_EQ(lineage->anchor(), self) << "the maker keeps the job in force";
  RankExit exit;
  exit.rank = 1;
  generations.LeftRankExited(exit);
  EXPECT_EQ(generations.left_exits().count(1), 1u);
  EXPECT_THAT(made, ::testing::SizeIs(2));
}

}  // namespace
}  // namespace troika::coordinator
