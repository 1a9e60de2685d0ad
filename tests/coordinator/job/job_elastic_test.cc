// Elastic jobs on the coordinator (docs/elastic.md): losing ranks ends a generation, the
// survivors attach again as the next one under the job's name, renumbered; below the
// minimum, and for jobs that are not elastic, the job aborts as before. Nodes registering
// while it runs wait, up to its maximum, and are admitted at its next commit.

#include <cstdio>
#include <fstream>
#include <future>
#include <iterator>

#include "common/wire.h"
#include "coordinator/job/job.h"
#include "coordinator/job/job_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using test_util::Register;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class JobElasticTest : public ::testing::Test {
 protected:
  static JobRegistryOptions Options() {
    JobRegistryOptions options;
    options.job.negotiator.cycle_time = absl::ZeroDuration();
    return options;
  }

  std::shared_ptr<Job> Create(int size, int min_size, int max_size = 0) {
    bool created = false;
    auto job = registry_.CreateJob("train", size, &created, {}, min_size, max_size);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : nullptr;
  }

  std::shared_ptr<Job> Find() {
    auto job = registry_.Find("train");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : nullptr;
  }

  // Attaches nodes[i].second on host nodes[i].first, each node in one call (as agents do);
  // the memberships of every node, in order.
  static std::vector<std::vector<Membership>> AttachNodes(
      Job& job, const std::vector<std::pair<std::string, std::vector<int>>>& nodes) {
    std::vector<std::promise<absl::StatusOr<std::vector<Membership>>>> done(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      job.Attach(nodes[i].second, nodes[i].first, absl::Seconds(30),
                 [&done, i](auto m) { done[i].set_value(std::move(m)); });
    }
    std::vector<std::vector<Membership>> out;
    for (auto& d : done) {
      absl::StatusOr<std::vector<Membership>> m = d.get_future().get();
      EXPECT_TRUE(m.ok()) << m.status();
      out.push_back(m.ok() ? *m : std::vector<Membership>{});
    }
    return out;
  }

  static TensorRequest Barrier(int rank, std::string name) {
    TensorRequest r;
    r.rank = rank;
    r.name = std::move(name);
    r.type = CollectiveType::kBarrier;
    r.dtype = DataType::kUint8;
    r.shape = {0};
    return r;
  }
  static TensorRequest Allreduce(int rank, std::string name) {
    TensorRequest r;
    r.rank = rank;
    r.name = std::move(name);
    r.shape = {2};
    return r;
  }
  static constexpr char kCommit[] = "troika/elastic/commit/0";

  // Returns once what the scheduler has due now ran (a job's end is posted there).
  void SettleScheduler() { test_util::SettleScheduler(scheduler_); }

  // The registry goes first: nothing may run on its scheduler then (a job ending calls
  // back into it there).
  void TearDown() override { scheduler_.Stop(); }

  Scheduler scheduler_;
  FakeClock clock_;
  JobRegistry registry_{Options(), scheduler_, clock_};
};

TEST_F(JobElasticTest, ALostRankEndsTheGenerationAndTheSurvivorsGoOnRenumbered) {
  std::shared_ptr<Job> job = Create(4, 2);
  AttachNodes(*job, {{"a", {0, 1}}, {"b", {2, 3}}});
  FakeSink a, b;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());

  ASSERT_TRUE(job->ReportExit(&a, {1, "a", 0, 9}).ok());
  for (FakeSink* sink : {&a, &b}) {
    ASSERT_EQ(sink->messages().size(), 1u);
    const DownMessage down = sink->messages()[0];
    EXPECT_THAT(down.abort_reason,
                HasSubstr("membership of job 'train' changed: rank 1 on a was killed by signal 9 "
                          "(Killed); the job goes on with 3 ranks as generation 2"));
    ASSERT_TRUE(down.membership_change.has_value());
    EXPECT_EQ(down.membership_change->epoch, 2);
    EXPECT_EQ(down.membership_change->size, 3);
    EXPECT_THAT(down.membership_change->next_rank, ElementsAre(0, -1, 1, 2));
  }

  // The job's name now serves generation 2: 3 ranks, the old ones ended by their agents.
  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  EXPECT_EQ(next->size(), 3);
  EXPECT_EQ(next->min_size(), 2);
  job->CloseSession(&a, absl::OkStatus());
  job->CloseSession(&b, absl::OkStatus());
  // A session of generation 1 that reaches the coordinator only now (its agent attached it
  // before the loss) is sent the change too, so that its agent follows it, and is void; it
  // was once refused ("no session can open" while generation 2 attaches), which stopped its
  // agent's ranks.
  FakeSink late;
  ASSERT_TRUE(next->OpenSession({2, 3}, 1, &late).ok());
  ASSERT_EQ(late.messages().size(), 1u);
  ASSERT_TRUE(late.messages()[0].membership_change.has_value());
  EXPECT_EQ(late.messages()[0].membership_change->epoch, 2);
  EXPECT_THAT(late.messages()[0].abort_reason, HasSubstr("the job goes on with 3 ranks"));
  EXPECT_TRUE(next->Submit(&late, {Allreduce(2, "grad")}).ok());
  EXPECT_TRUE(next->Goodbye(&late, {2, 3}).ok());
  next->CloseSession(&late, absl::OkStatus());
  EXPECT_EQ(late.messages().size(), 1u);
  EXPECT_EQ(next->state(), Job::State::kAttaching) << "nothing it sent counted";
  SettleScheduler();
  EXPECT_EQ(Find(), next) << "no node attached it yet, and it is not abandoned for that session";
  std::vector<std::vector<Membership>> m = AttachNodes(*next, {{"a", {0}}, {"b", {1, 2}}});
  ASSERT_EQ(m[0].size(), 1u);
  ASSERT_EQ(m[1].size(), 2u);
  EXPECT_EQ(m[0][0].epoch, 2);
  EXPECT_EQ(m[0][0].size, 3);
  EXPECT_EQ(m[0][0].local_size, 1);
  EXPECT_EQ(m[1][1].rank, 2);
  EXPECT_EQ(m[1][1].local_rank, 1);
  FakeSink a2, b2;
  ASSERT_TRUE(next->OpenSession({0}, 2, &a2).ok());
  EXPECT_EQ(next->OpenSession({1, 2}, 3, &b2).code(), absl::StatusCode::kFailedPrecondition)
      << "a generation that never was";
  ASSERT_TRUE(next->OpenSession({1, 2}, 2, &b2).ok());
  EXPECT_EQ(next->state(), Job::State::kRunning);
  bool created = true;
  auto again = registry_.CreateJob("train", 3, &created, {}, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(created);
  EXPECT_EQ(*again, next);
  EXPECT_EQ(registry_.Jobs().size(), 1u);
  EXPECT_EQ(registry_.counts().aborted, 0);
  EXPECT_EQ(registry_.counts().membership_changes[static_cast<int>(AbortCause::kRankExit)], 1);
  const JobInfo info = next->Describe();
  EXPECT_EQ(info.epoch, 2);
  EXPECT_EQ(info.min_size, 2);
  EXPECT_EQ(info.generation_cause, "rank 1 on a was killed by signal 9 (Killed)");
}

TEST_F(JobElasticTest, ALostSessionEndsTheGenerationToo) {
  std::shared_ptr<Job> job = Create(3, 1);
  AttachAll(*job, {"a", "b", "c"});
  FakeSink s0, s1, s2;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  ASSERT_TRUE(job->OpenSession({1}, 1, &s1).ok());
  ASSERT_TRUE(job->OpenSession({2}, 1, &s2).ok());
  ASSERT_TRUE(job->Goodbye(&s0, {0}).ok());  // rank 0 finished and left
  job->CloseSession(&s1, absl::OkStatus());  // rank 1 vanished
  ASSERT_EQ(s2.messages().size(), 1u);
  EXPECT_THAT(
      s2.messages()[0].abort_reason,
      HasSubstr("rank 1 on b lost the connection to the coordinator; the job goes on with 1 "
                "rank as generation 2"));
  ASSERT_TRUE(s2.messages()[0].membership_change.has_value());
  EXPECT_THAT(s2.messages()[0].membership_change->next_rank, ElementsAre(-1, -1, 0));
  EXPECT_EQ(Find()->size(), 1);
  EXPECT_EQ(registry_.counts().membership_changes[static_cast<int>(AbortCause::kConnectionLost)],
            1);
}

// Two nodes lost at once: their sessions close one after the other, the second after the
// first's loss ended the generation. The next generation, which counts on the second node's
// ranks, learns at once that they will not attach (it used to wait for its attach timeout);
// an agent closing its session to move on to the next generation is no loss.
TEST_F(JobElasticTest, ANodeLostWhileTheNextGenerationAttachesIsLeftOutAtOnce) {
  std::shared_ptr<Job> job = Create(6, 2);
  AttachNodes(*job, {{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}});
  FakeSink a, b, c;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());
  ASSERT_TRUE(job->OpenSession({4, 5}, 1, &c).ok());
  b.lost = c.lost = true;
  job->CloseSession(&b, absl::OkStatus());
  std::shared_ptr<Job> second = Find();
  ASSERT_NE(second, job);
  EXPECT_EQ(second->size(), 4);
  job->CloseSession(&a, absl::OkStatus());  // its agent moves on: it attaches next
  EXPECT_EQ(Find(), second);
  EXPECT_EQ(second->state(), Job::State::kAttaching);

  job->CloseSession(&c, absl::OkStatus());
  std::shared_ptr<Job> third = Find();
  ASSERT_NE(third, second) << "generation 2 waited for ranks whose node is gone";
  EXPECT_EQ(third->size(), 2);
  EXPECT_EQ(third->Describe().generation_cause,
            "ranks 4-5 on c lost the connection to the coordinator");
  // Node a's agent attaching for generation 2 only now is answered with the renumbering
  // into generation 3 (CoordinatorService::Attach), not refused.
  std::optional<MembershipChange> change = third->ChangeFrom(2);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->epoch, 3);
  EXPECT_THAT(change->next_rank, ElementsAre(0, 1, -1, -1));
  EXPECT_FALSE(third->ChangeFrom(1).has_value()) << "the change from generation 1 was 2's";
  // Node a's agent found generation 2 serving the job's name, and its attach reached it only
  // after node c's loss ended it: answered with the same renumbering, so that the agent
  // follows into generation 3 (it was refused, "is aborted ...; it takes no new ranks", which
  // stopped its ranks, and generation 3 waited for them until its attach timeout).
  std::promise<absl::StatusOr<std::vector<Membership>>> late;
  second->Attach({0, 1}, "a", absl::Seconds(30), [&late](auto m) { late.set_value(m); });
  const absl::StatusOr<std::vector<Membership>> answer = late.get_future().get();
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kAborted) << answer.status();
  std::optional<MembershipChange> followed = MembershipChangeOf(answer.status());
  ASSERT_TRUE(followed.has_value()) << answer.status();
  EXPECT_EQ(followed->epoch, 3);
  EXPECT_THAT(followed->next_rank, ElementsAre(0, 1, -1, -1));
  // Its session likewise, had its attach come before the loss: it opens and hears the change
  // (it was refused, "no session can open").
  FakeSink late_session;
  ASSERT_TRUE(second->OpenSession({0, 1}, 2, &late_session).ok());
  ASSERT_EQ(late_session.messages().size(), 1u);
  ASSERT_TRUE(late_session.messages()[0].membership_change.has_value());
  EXPECT_EQ(late_session.messages()[0].membership_change->epoch, 3);
  second->CloseSession(&late_session, absl::OkStatus());
  std::vector<std::vector<Membership>> m = AttachNodes(*third, {{"a", {0, 1}}});
  ASSERT_EQ(m[0].size(), 2u);
  EXPECT_EQ(m[0][1].epoch, 3);
  FakeSink a3;
  ASSERT_TRUE(third->OpenSession({0, 1}, 3, &a3).ok());
  EXPECT_EQ(third->state(), Job::State::kRunning);
  EXPECT_EQ(registry_.counts().membership_changes[static_cast<int>(AbortCause::kConnectionLost)],
            2);
}

TEST_F(JobElasticTest, ASecondNodeLostBelowTheMinimumAbortsTheNextGeneration) {
  std::shared_ptr<Job> job = Create(6, 3);
  AttachNodes(*job, {{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}});
  FakeSink a, b, c;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());
  ASSERT_TRUE(job->OpenSession({4, 5}, 1, &c).ok());
  b.lost = c.lost = true;
  job->CloseSession(&b, absl::OkStatus());
  std::shared_ptr<Job> second = Find();
  ASSERT_NE(second, job);
  job->CloseSession(&c, absl::OkStatus());
  EXPECT_EQ(second->state(), Job::State::kAborted);
  EXPECT_THAT(second->Describe().abort_reason,
              HasSubstr("ranks 4-5 on c lost the connection to the coordinator; 2 ranks "
                        "remain, below the job's minimum of 3"));
}

// A second loss during recovery, inside the next generation: it forms without node b, node
// c's session opens and its node is lost before node a's session reaches the coordinator, so
// 4 ranks remain, below the minimum of 5, and the job aborts. Node a's session still opens
// (node d's keeps the job), and hears that abort with its reason: its agent ends as the
// others do, not on a bare refusal. Once the job is released, whatever asks for it is told
// the same (JobRegistry::EndedWith: a session opening later still).
TEST_F(JobElasticTest, ASessionOpeningAfterASecondLossAbortedTheNextGenerationHearsTheAbort) {
  bool created = false;
  auto made = registry_.CreateJob("train", 8, &created, Secret::Of("secret"), 5);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<Job> job = *made;
  AttachNodes(*job, {{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}, {"d", {6, 7}}});
  FakeSink a, b, c, d;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());
  ASSERT_TRUE(job->OpenSession({4, 5}, 1, &c).ok());
  ASSERT_TRUE(job->OpenSession({6, 7}, 1, &d).ok());
  b.lost = true;
  job->CloseSession(&b, absl::OkStatus());
  std::shared_ptr<Job> second = Find();
  ASSERT_NE(second, job);
  ASSERT_EQ(second->size(), 6);
  for (FakeSink* moving_on : {&a, &c, &d}) job->CloseSession(moving_on, absl::OkStatus());
  AttachNodes(*second, {{"a", {0, 1}}, {"c", {2, 3}}, {"d", {4, 5}}});
  FakeSink c2, d2;
  ASSERT_TRUE(second->OpenSession({2, 3}, 2, &c2).ok());
  ASSERT_TRUE(second->OpenSession({4, 5}, 2, &d2).ok());
  c2.lost = true;
  second->CloseSession(&c2, absl::OkStatus());
  ASSERT_EQ(second->state(), Job::State::kAborted);
  const char kReason[] =
      "ranks 2-3 on c lost the connection to the coordinator; 4 ranks remain, below the job's "
      "minimum of 5";
  ASSERT_FALSE(d2.messages().empty());
  EXPECT_THAT(d2.messages().back().abort_reason, HasSubstr(kReason));

  FakeSink a2;
  ASSERT_TRUE(second->OpenSession({0, 1}, 2, &a2).ok());
  ASSERT_EQ(a2.messages().size(), 1u);
  EXPECT_FALSE(a2.messages()[0].membership_change.has_value());
  EXPECT_EQ(a2.messages()[0].abort_reason, d2.messages().back().abort_reason);
  EXPECT_EQ(Find(), second) << "no generation after the abort";
  second->CloseSession(&d2, absl::OkStatus());
  second->CloseSession(&a2, absl::OkStatus());
  SettleScheduler();
  EXPECT_FALSE(registry_.Find("train").ok()) << "released once every session closed";
  std::optional<absl::Status> ended = registry_.EndedWith("train", "secret");
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->code(), absl::StatusCode::kAborted);
  EXPECT_THAT(ended->message(), HasSubstr(kReason));
}

TEST_F(JobElasticTest, ALossBelowTheMinimumAbortsTheJobSayingSo) {
  std::shared_ptr<Job> job = Create(2, 2);
  AttachAll(*job, {"a", "a"});
  FakeSink node;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &node).ok());
  ASSERT_TRUE(job->ReportExit(&node, {1, "a", 0, 9}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(node.messages().size(), 1u);
  EXPECT_FALSE(node.messages()[0].membership_change.has_value());
  EXPECT_THAT(node.messages()[0].abort_reason,
              HasSubstr("job 'train' aborted: rank 1 on a was killed by signal 9 (Killed); 1 "
                        "rank remains, below the job's minimum of 2"));
  EXPECT_EQ(Find(), job);
}

TEST_F(JobElasticTest, AJobThatIsNotElasticAbortsAsBefore) {
  std::shared_ptr<Job> job = Create(3, 0);
  AttachAll(*job, {"a", "a", "a"});
  FakeSink node;
  ASSERT_TRUE(job->OpenSession({0, 1, 2}, 1, &node).ok());
  ASSERT_TRUE(job->ReportExit(&node, {2, "a", 1, 0}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(node.messages().size(), 1u);
  EXPECT_FALSE(node.messages()[0].membership_change.has_value());
  EXPECT_THAT(node.messages()[0].abort_reason,
              HasSubstr("job 'train' aborted: rank 2 on a exited with code 1"));
}

TEST_F(JobElasticTest, TheMinimumMustFitAndMatch) {
  bool created = false;
  EXPECT_EQ(registry_.CreateJob("train", 2, &created, {}, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Create(4, 2));
  auto other = registry_.CreateJob("train", 4, &created, {}, 3);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(),
              HasSubstr("already exists with 4 ranks (at least 2, at most 4)"));
  EXPECT_EQ(registry_.CreateJob("other", 4, &created, {}, 0, 6).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a maximum above the size needs a minimum";
  EXPECT_EQ(registry_.CreateJob("other", 4, &created, {}, 2, 3).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a maximum below the size";
}

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
    JobRegistryOptions options = Options();
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

TEST_F(JobElasticTest, TheTimelineGoesOnInTheNextGenerationWithTheChangeMarked) {
  const std::string path = ::testing::TempDir() + "/job-elastic-timeline.json";
  std::shared_ptr<Job> job = Create(3, 1);
  ASSERT_TRUE(job->StartTimeline(path, 1 << 20).ok());
  AttachAll(*job, {"a", "a", "a"});
  FakeSink a;
  ASSERT_TRUE(job->OpenSession({0, 1, 2}, 1, &a).ok());
  ASSERT_TRUE(job->ReportExit(&a, {2, "a", 0, 9}).ok());
  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  EXPECT_TRUE(next->Describe().timeline.active);
  EXPECT_EQ(next->Describe().timeline.path, path);
  job->CloseSession(&a, absl::OkStatus());
  AttachAll(*next, {"a", "a"});
  FakeSink a2;
  ASSERT_TRUE(next->OpenSession({0, 1}, 2, &a2).ok());
  ASSERT_FALSE(a2.messages().empty());
  ASSERT_TRUE(a2.messages()[0].settings.has_value());
  EXPECT_TRUE(a2.messages()[0].settings->report_phases) << "the ranks report for the timeline";
  absl::StatusOr<TimelineInfo> info = next->StopTimeline();
  ASSERT_TRUE(info.ok()) << info.status();
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"name\":\"membership change\""));
  EXPECT_THAT(text, HasSubstr("rank 2 on a was killed by signal 9 (Killed); the job goes on with 2 "
                              "ranks as generation 2"));
  EXPECT_THAT(text, ::testing::EndsWith("]}\n"));
  std::remove(path.c_str());
}

// Every rank shut down (the job finished), then one's process exited 1: the job failed, and
// the node is told why (issue 46: troikarun read such a job as finished and exited 0).
TEST_F(JobElasticTest, ARankFailingAfterItShutDownFailsTheFinishedJob) {
  std::shared_ptr<Job> job = Create(2, 1);
  AttachAll(*job, {"a", "a"});
  FakeSink node;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &node).ok());
  ASSERT_TRUE(job->Goodbye(&node, {0, 1}).ok());
  EXPECT_EQ(job->state(), Job::State::kFinished);
  ASSERT_TRUE(job->ReportExit(&node, {0, "a", 0, 0}).ok());
  EXPECT_EQ(job->state(), Job::State::kFinished) << "a clean exit after shutdown";
  ASSERT_TRUE(job->ReportExit(&node, {1, "a", 1, 0}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  EXPECT_THAT(job->abort_reason(), HasSubstr("rank 1 on a exited with code 1 after it shut down"));
  ASSERT_FALSE(node.messages().empty());
  EXPECT_THAT(node.messages().back().abort_reason,
              HasSubstr("rank 1 on a exited with code 1 after it shut down"));
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
