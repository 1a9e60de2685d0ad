// Elastic jobs on the coordinator (docs/elastic.md): losing ranks ends a generation, the
// survivors attach again as the next one under the job's name, renumbered; below the
// minimum, and for jobs that are not elastic, the job aborts as before. Nodes joining,
// draining and never attaching: job_elastic_nodes_test.cc.

#include <cstdio>
#include <fstream>
#include <future>
#include <iterator>

#include "common/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_elastic_fixture.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace troika::coordinator
