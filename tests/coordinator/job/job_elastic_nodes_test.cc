// Elastic jobs on the coordinator (docs/elastic.md), their nodes: a node registering while the
// job runs waits, up to its maximum, and is admitted at its next commit (through a loss, and
// when the call reaches a generation as it ends); a drained node leaves at a commit; ranks
// that never attach, or attach and never open their session, are left out.

#include <future>
#include <memory>
#include <optional>

#include "common/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_elastic_fixture.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using test_util::Register;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(JobElasticTest, ANodeRegisteringWhileTheJobRunsIsAdmittedAtTheNextCommit) {
  std::shared_ptr<Job> job = Create(2, 2, 4);
  ASSERT_TRUE(Register(*job, "a", 2, -1).ok());
  AttachNodes(*job, {{"a", {0, 1}}});
  FakeSink a;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  auto held = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  EXPECT_EQ(Register(*job, "b", 2, -1, held, nullptr, "b-restart-1").status().message(), "waiting");
  EXPECT_EQ(Register(*job, "c", 1, -1).status().code(), absl::StatusCode::kResourceExhausted)
      << "2 ranks and 2 joining: one more would exceed the maximum of 4";

  // A barrier that is no commit admits nobody; the commit does, after what came before it.
  ASSERT_TRUE(
      job->Submit(&a, {Barrier(0, "troika/barrier/0"), Barrier(1, "troika/barrier/0")}).ok());
  ASSERT_EQ(a.messages().size(), 1u);
  EXPECT_FALSE(held->has_value());
  ASSERT_TRUE(job->Submit(&a, {Allreduce(0, "x"), Allreduce(1, "x"), Barrier(0, kCommit),
                               Barrier(1, kCommit)})
                  .ok());
  ASSERT_EQ(a.messages().size(), 3u);
  ASSERT_EQ(a.messages()[1].responses.size(), 1u);
  EXPECT_EQ(a.messages()[1].responses[0].names, std::vector<std::string>{"x"});
  const DownMessage change = a.messages()[2];
  EXPECT_THAT(change.abort_reason,
              HasSubstr("membership of job 'train' changed: 2 ranks on b joined at a commit; the "
                        "job goes on with 4 ranks as generation 2"));
  ASSERT_TRUE(change.membership_change.has_value());
  EXPECT_TRUE(change.membership_change->at_commit);
  EXPECT_EQ(change.membership_change->joined, 2);
  EXPECT_EQ(change.membership_change->size, 4);
  EXPECT_THAT(change.membership_change->next_rank, ElementsAre(0, 1));
  ASSERT_EQ(change.membership_change->admitted.size(), 1u) << "b named itself";
  EXPECT_EQ(change.membership_change->admitted[0].join_id, "b-restart-1");
  EXPECT_EQ(change.membership_change->admitted[0].first_rank, 2);
  ASSERT_TRUE(held->has_value() && (*held)->ok())
      << (held->has_value() ? (*held)->status() : absl::OkStatus());
  EXPECT_EQ((**held)->first_rank, 2);
  EXPECT_EQ((**held)->size, 4);
  EXPECT_EQ((**held)->epoch, 2) << "its ranks attach for generation 2";

  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  EXPECT_EQ(next->size(), 4);
  EXPECT_EQ(next->max_size(), 4);
  job->CloseSession(&a, absl::OkStatus());
  std::vector<std::vector<Membership>> m = AttachNodes(*next, {{"a", {0, 1}}, {"b", {2, 3}}});
  EXPECT_EQ(m[1][1].rank, 3);
  EXPECT_EQ(m[1][1].epoch, 2);
  EXPECT_EQ(m[1][1].local_rank, 1);
  EXPECT_EQ(m[1][1].cross_rank, 1);
  EXPECT_EQ(registry_.counts().admissions, 1);
  EXPECT_EQ(next->Describe().generation_cause, "2 ranks on b joined at a commit");
  EXPECT_EQ(Register(*next, "c", 1, -1).status().code(), absl::StatusCode::kResourceExhausted)
      << "at its maximum";
}

// A node drained while the job runs (troikarun's host discovery dropped its host) leaves at the
// next commit: what came before the commit completes, the commit ends the generation with the
// node's ranks given no place, nothing restored; a node joining at the same commit comes after
// the survivors. Draining below the minimum, a host with no rank, or a job that is not elastic
// is refused.
TEST_F(JobElasticTest, ADrainedNodeLeavesAtTheNextCommitWithNothingLost) {
  std::shared_ptr<Job> job = Create(6, 3, 8);
  AttachNodes(*job, {{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}});
  FakeSink a, b, c;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());
  ASSERT_TRUE(job->OpenSession({4, 5}, 1, &c).ok());
  EXPECT_EQ(job->Drain("z").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(job->Drain("b").ok());
  ASSERT_TRUE(job->Drain("b").ok()) << "idempotent";
  EXPECT_THAT(job->Drain("c").ToString(),
              HasSubstr("would go on with 2 ranks without c, below its minimum of 3"))
      << "b is leaving already";
  auto held = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  EXPECT_EQ(Register(*job, "d", 2, -1, held).status().message(), "waiting");

  // A barrier that is no commit changes nothing; the commit does, after what came before it.
  std::vector<TensorRequest> barrier, step;
  for (int r = 0; r < 6; ++r) barrier.push_back(Barrier(r, "troika/barrier/0"));
  ASSERT_TRUE(job->Submit(&a, {barrier[0], barrier[1]}).ok());
  ASSERT_TRUE(job->Submit(&b, {barrier[2], barrier[3]}).ok());
  ASSERT_TRUE(job->Submit(&c, {barrier[4], barrier[5]}).ok());
  ASSERT_EQ(a.messages().size(), 1u);
  for (int r = 0; r < 6; ++r) {
    step.push_back(Allreduce(r, "x"));
    step.push_back(Barrier(r, kCommit));
  }
  ASSERT_TRUE(job->Submit(&a, {step[0], step[1], step[2], step[3]}).ok());
  ASSERT_TRUE(job->Submit(&b, {step[4], step[5], step[6], step[7]}).ok());
  ASSERT_TRUE(job->Submit(&c, {step[8], step[9], step[10], step[11]}).ok());
  for (FakeSink* sink : {&a, &b, &c}) {
    ASSERT_EQ(sink->messages().size(), 3u);
    EXPECT_EQ(sink->messages()[1].responses[0].names, std::vector<std::string>{"x"});
    const DownMessage change = sink->messages()[2];
    EXPECT_THAT(change.abort_reason,
                HasSubstr("membership of job 'train' changed: 2 ranks on d joined and ranks 2-3 "
                          "on b left at a commit; the job goes on with 6 ranks as generation 2"));
    ASSERT_TRUE(change.membership_change.has_value());
    EXPECT_TRUE(change.membership_change->at_commit);
    EXPECT_THAT(change.membership_change->next_rank, ElementsAre(0, 1, -1, -1, 2, 3));
    EXPECT_EQ(change.membership_change->size, 6);
  }
  ASSERT_TRUE(held->has_value() && (*held)->ok());
  EXPECT_EQ((**held)->first_rank, 4);
  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  EXPECT_EQ(next->Describe().generation_cause,
            "2 ranks on d joined and ranks 2-3 on b left at a commit");

  bool created = false;
  std::shared_ptr<Job> fixed = registry_.CreateJob("fixed", 2, &created, {}, 0, 0).value();
  AttachNodes(*fixed, {{"a", {0, 1}}});
  EXPECT_THAT(fixed->Drain("a").ToString(), HasSubstr("is not elastic"));
}

// An admitted node whose agent died before it attached (or whose command could not start):
// at the attach timeout the generation ends without its ranks, and the attached nodes are
// answered with the renumbering instead of memberships. Below the minimum, the attach fails
// as in any job.
TEST_F(JobElasticTest, RanksThatNeverAttachAreLeftOutAtTheAttachTimeout) {
  std::shared_ptr<Job> job = Create(6, 2);
  EXPECT_EQ(Register(*job, "a", 2, 0)->epoch, 1);
  std::promise<absl::StatusOr<std::vector<Membership>>> a, c;
  job->Attach({0, 1}, "a", absl::Milliseconds(50), [&](auto m) { a.set_value(std::move(m)); });
  job->Attach({4, 5}, "c", absl::Seconds(30), [&](auto m) { c.set_value(std::move(m)); });
  for (auto* attach : {&a, &c}) {
    absl::StatusOr<std::vector<Membership>> m = attach->get_future().get();
    EXPECT_EQ(m.status().code(), absl::StatusCode::kAborted) << m.status();
    EXPECT_THAT(std::string(m.status().message()),
                HasSubstr("membership of job 'train' changed: ranks 2-3 did not attach within "
                          "50ms; the job goes on with 4 ranks as generation 2"));
    std::optional<MembershipChange> change = MembershipChangeOf(m.status());
    ASSERT_TRUE(change.has_value()) << "the attach's answer carries the renumbering";
    EXPECT_EQ(change->epoch, 2);
    EXPECT_EQ(change->size, 4);
    EXPECT_FALSE(change->at_commit);
    EXPECT_THAT(change->next_rank, ElementsAre(0, 1, -1, -1, 2, 3));
  }
  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  EXPECT_EQ(next->size(), 4);
  EXPECT_EQ(next->epoch(), 2);
  EXPECT_EQ(next->Describe().generation_cause, "ranks 2-3 did not attach within 50ms");
  EXPECT_EQ(registry_.counts().membership_changes[static_cast<int>(AbortCause::kAttachTimeout)], 1);
  std::vector<std::vector<Membership>> m = AttachNodes(*next, {{"a", {0, 1}}, {"c", {2, 3}}});
  EXPECT_EQ(m[1][0].rank, 2);
  EXPECT_EQ(m[1][0].epoch, 2);

  // A job of 4 ranks with a minimum of 3: ranks 2-3 never attaching would leave 2.
  bool created = false;
  std::shared_ptr<Job> small = registry_.CreateJob("small", 4, &created, {}, 3, 0).value();
  std::promise<absl::StatusOr<std::vector<Membership>>> alone;
  small->Attach({0, 1}, "a", absl::Milliseconds(20),
                [&](auto m) { alone.set_value(std::move(m)); });
  absl::StatusOr<std::vector<Membership>> failed = alone.get_future().get();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDeadlineExceeded) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("job 'small': ranks 2-3 did not attach within 20ms (attached: ranks 0-1)"));
  EXPECT_FALSE(MembershipChangeOf(failed.status()).has_value());
}

TEST_F(JobElasticTest, AJoiningNodeWaitsThroughALossAndIsLetGoWhenItStopsWaiting) {
  std::shared_ptr<Job> job = Create(3, 1, 5);
  AttachAll(*job, {"a", "a", "a"});
  FakeSink a;
  ASSERT_TRUE(job->OpenSession({0, 1, 2}, 1, &a).ok());
  auto held_b = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  auto held_c = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  bool c_gave_up = false;
  ASSERT_FALSE(Register(*job, "b", 1, -1, held_b).ok());
  ASSERT_FALSE(Register(*job, "c", 1, -1, held_c, [&] { return c_gave_up; }).ok());
  ASSERT_TRUE(job->ReportExit(&a, {2, "a", 0, 9}).ok());  // generation 2: ranks 0 and 1
  EXPECT_FALSE(held_b->has_value()) << "still waiting, in the next generation";
  std::shared_ptr<Job> next = Find();
  ASSERT_EQ(next->size(), 2);
  job->CloseSession(&a, absl::OkStatus());
  AttachAll(*next, {"a", "a"});
  FakeSink a2;
  ASSERT_TRUE(next->OpenSession({0, 1}, 2, &a2).ok());
  c_gave_up = true;
  ASSERT_TRUE(next->Submit(&a2, {Barrier(0, kCommit), Barrier(1, kCommit)}).ok());
  ASSERT_TRUE(held_b->has_value() && (*held_b)->ok());
  EXPECT_EQ((**held_b)->first_rank, 2);
  EXPECT_EQ((**held_b)->size, 3) << "without c, which stopped waiting";
  ASSERT_TRUE(held_c->has_value());
  EXPECT_EQ((*held_c)->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Find()->size(), 3);
}

// A node registering as a loss ends the generation (its agent found that generation serving
// the job's name; the call reached it after the end) waits to join the next one, as the nodes
// waiting then were carried there; it was refused ("is aborted ...; it admits no nodes").
TEST_F(JobElasticTest, ANodeRegisteringAsALossEndsTheGenerationWaitsInTheNextOne) {
  std::shared_ptr<Job> job = Create(4, 2, 6);
  AttachNodes(*job, {{"a", {0, 1}}, {"b", {2, 3}}});
  FakeSink a, b;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());
  b.lost = true;
  job->CloseSession(&b, absl::OkStatus());
  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  ASSERT_EQ(next->size(), 2);

  auto held = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  EXPECT_EQ(Register(*job, "c", 2, -1, held).status().message(), "waiting");
  EXPECT_THAT(Register(*next, "d", 3, -1).status().message(),
              HasSubstr("has 2 ranks and 2 joining; 3 more would exceed its maximum of 6"))
      << "node c waits in generation 2";
  job->CloseSession(&a, absl::OkStatus());
  AttachNodes(*next, {{"a", {0, 1}}});
  FakeSink a2;
  ASSERT_TRUE(next->OpenSession({0, 1}, 2, &a2).ok());
  ASSERT_TRUE(next->Submit(&a2, {Barrier(0, kCommit), Barrier(1, kCommit)}).ok());
  ASSERT_TRUE(held->has_value() && (*held)->ok())
      << (held->has_value() ? (*held)->status() : absl::OkStatus());
  EXPECT_EQ((**held)->first_rank, 2);
  EXPECT_EQ((**held)->size, 4);
  EXPECT_EQ((**held)->epoch, 3) << "admitted at generation 2's commit";
}

// Jobs whose agents have a second to open their sessions once the job formed.
class JobSessionTimeoutTest : public JobElasticTest {
 protected:
  static JobRegistryOptions TimedOptions() {
    JobRegistryOptions options = NoCycleOptions();
    options.job.session_open_timeout = absl::Seconds(1);
    return options;
  }
  // Destroyed before the fixture's scheduler, which TearDown stops first.
  JobRegistry timed_{TimedOptions(), scheduler_, clock_};
};

// A node's agent that died between its attach and its session: nothing else tells the job,
// whose other ranks would wait for its ranks' addresses in the data plane's setup (5 minutes,
// in python_ray_train_elastic). At the session timeout its ranks are lost: an elastic job
// goes on without them, any other aborts, saying why.
TEST_F(JobSessionTimeoutTest, RanksWhoseSessionNeverOpensAreLostAtTheSessionTimeout) {
  bool created = false;
  std::shared_ptr<Job> elastic = timed_.CreateJob("elastic", 4, &created, {}, 2, 0).value();
  std::shared_ptr<Job> fixed = timed_.CreateJob("fixed", 4, &created, {}, 0, 0).value();
  FakeSink e, f;
  AttachNodes(*elastic, {{"a", {0, 1}}, {"b", {2, 3}}});
  ASSERT_TRUE(elastic->OpenSession({0, 1}, 1, &e).ok());
  AttachNodes(*fixed, {{"a", {0, 1}}, {"b", {2, 3}}});
  ASSERT_TRUE(fixed->OpenSession({0, 1}, 1, &f).ok());
  const absl::Time not_hung = absl::Now() + absl::Seconds(60);
  while ((e.messages().empty() || f.messages().empty()) && absl::Now() < not_hung) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(e.messages().size(), 1u);
  EXPECT_EQ(e.messages()[0].abort_reason,
            "membership of job 'elastic' changed: ranks 2-3 on b attached but opened no session "
            "within 1s; the job goes on with 2 ranks as generation 2");
  ASSERT_TRUE(e.messages()[0].membership_change.has_value());
  EXPECT_THAT(e.messages()[0].membership_change->next_rank, ElementsAre(0, 1, -1, -1));
  ASSERT_EQ(f.messages().size(), 1u);
  EXPECT_EQ(f.messages()[0].abort_reason,
            "job 'fixed' aborted: ranks 2-3 on b attached but opened no session within 1s");
  EXPECT_EQ(fixed->state(), Job::State::kAborted);
  EXPECT_EQ(timed_.counts().membership_changes[static_cast<int>(AbortCause::kAttachTimeout)], 1);
  elastic->CloseSession(&e, absl::OkStatus());
  fixed->CloseSession(&f, absl::OkStatus());
}

// Every session opened: the timer finds nothing to do, and the job runs on.
TEST_F(JobSessionTimeoutTest, AJobWhoseSessionsOpenedRunsOnPastTheSessionTimeout) {
  bool created = false;
  std::shared_ptr<Job> job = timed_.CreateJob("train", 2, &created, {}, 0, 0).value();
  AttachNodes(*job, {{"a", {0}}, {"b", {1}}});
  FakeSink a, b;
  ASSERT_TRUE(job->OpenSession({0}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({1}, 1, &b).ok());
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(job->state(), Job::State::kRunning);
  EXPECT_TRUE(a.messages().empty());
  job->CloseSession(&a, absl::OkStatus());  // (the job aborts: rank 0 lost)
  job->CloseSession(&b, absl::OkStatus());
}

TEST_F(JobElasticTest, AJoiningNodeLearnsThatTheJobEnded) {
  std::shared_ptr<Job> job = Create(2, 1, 3);
  AttachAll(*job, {"a", "a"});
  FakeSink a;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  auto held = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  ASSERT_FALSE(Register(*job, "b", 1, -1, held).ok());
  ASSERT_TRUE(job->Goodbye(&a, {0, 1}).ok());
  ASSERT_TRUE(held->has_value());
  EXPECT_EQ((*held)->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT((*held)->status().message(), HasSubstr("finished before this node was admitted"));
}

}  // namespace
}  // namespace troika::coordinator
