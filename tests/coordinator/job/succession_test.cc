// Succession on its own, over real parts, with real Jobs as the successors its factories make:
// the next incarnation is made once and inherits the node blocks and the timeline, and serves
// the job's name only once this one no longer runs; an abort ends it while it forms; a commit
// that admits joining nodes ends the generation, tells each node its block and hands the
// successor the timeline.

#include "coordinator/job/succession.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/job/job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::FakeSink;
using ::testing::HasSubstr;
using State = Lifecycle::State;

constexpr int kSize = 2;

// One job's parts and its Succession; its factories make real Jobs of the same name.
class SuccessionTest : public ::testing::Test {
 protected:
  void Make(JobOptions options) {
    options.next_incarnation = [this](int64_t epoch) { return NewJob(kSize, epoch); };
    options_ = std::move(options);
    roster_ = std::make_unique<Roster>("j", kSize, options_.epoch, scheduler_);
    sessions_ = std::make_unique<Sessions>("j", kSize, ClientSettings{});
    generations_ = std::make_unique<Generations>(kSize, options_, clock_.Now());
    lifecycle_ = std::make_unique<Lifecycle>("j", *roster_, *sessions_, *generations_, kv_,
                                             scheduler_, nullptr, [] {});
    inspection_ = std::make_unique<Inspection>("j", kSize, options_, negotiation_, *roster_,
                                               *sessions_, *lifecycle_, scheduler_, clock_, mu_,
                                               [this] { return std::weak_ptr<const void>(self_); });
    succession_ = std::make_unique<Succession>("j", *generations_, *lifecycle_, *roster_,
                                               *sessions_, *inspection_, clock_);
    self_ = NewJob(kSize, options_.epoch);  // stands for the job that owns the parts
  }
  std::shared_ptr<Job> NewJob(int size, int64_t epoch) {
    JobOptions options;
    options.epoch = epoch;
    return std::make_shared<Job>("j", size, std::move(options), scheduler_, clock_, [] {});
  }
  // Node "a" holds every rank, each attaches, the job runs, and one session owns both ranks.
  void RunJob() {
    bool added = false;
    ASSERT_TRUE(roster_->Reserve("a", kSize, -1, &added).ok());
    roster_->Wait(
        {0, 1}, "a", absl::Seconds(30), [](auto) {}, [](uint64_t) {});
    roster_->Complete();
    lifecycle_->Run();
    ASSERT_TRUE(sessions_->Open({0, 1}, &sink_, {}).ok());
  }
  std::string StartTimeline() {
    const std::string path = ::testing::TempDir() + "/succession_test_timeline.json";
    EXPECT_TRUE(inspection_->StartTimeline(path, 1 << 20).ok());
    return path;
  }

  Scheduler scheduler_;
  FakeClock clock_;
  std::mutex mu_;
  KvStore kv_{scheduler_};
  JobNegotiation negotiation_{"j", kSize, NegotiatorOptions{}, ScheduleOptions{},
                              [](std::shared_ptr<const DownMessage>) {}};
  JobOptions options_;
  std::shared_ptr<Job> self_;
  std::unique_ptr<Roster> roster_;
  std::unique_ptr<Sessions> sessions_;
  std::unique_ptr<Generations> generations_;
  std::unique_ptr<Lifecycle> lifecycle_;
  std::unique_ptr<Inspection> inspection_;
  std::unique_ptr<Succession> succession_;
  FakeSink sink_;
};

TEST_F(SuccessionTest, TheNextIncarnationIsMadeOnceAndInheritsTheNodesAndTheTimeline) {
  Make(JobOptions{});
  RunJob();
  const std::string path = StartTimeline();
  EXPECT_EQ(succession_->Serving(), nullptr) << "no successor yet";
  std::shared_ptr<Job> next = succession_->NextIncarnation(self_);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(succession_->NextIncarnation(self_), next) << "made on first use only";
  EXPECT_EQ(next->epoch(), 2);
  EXPECT_EQ(next->Record().nodes().at(0), "a");
  EXPECT_TRUE(next->Describe().timeline.active);
  EXPECT_FALSE(inspection_->TakeTimeline()) << "the timeline moved on";
  EXPECT_EQ(succession_->Serving(), nullptr)
      << "it attaches while this one runs: this one still serves the name";
  ASSERT_TRUE(roster_->Depart(0) && roster_->Depart(1));
  ASSERT_TRUE(lifecycle_->FinishIfAllDeparted());
  EXPECT_EQ(succession_->Serving(), next);
  ASSERT_TRUE(next->StopTimeline().ok());
  std::remove(path.c_str());
}

TEST_F(SuccessionTest, AnAbortEndsTheNextIncarnationWhileItForms) {
  Make(JobOptions{});
  RunJob();
  std::shared_ptr<Job> next = succession_->NextIncarnation(self_);
  ASSERT_TRUE(lifecycle_->Abort(AbortCause::kRankExit, "rank 1 exited", std::nullopt, false));
  EXPECT_EQ(next->state(), State::kAborted);
  EXPECT_EQ(next->abort_reason(), "rank 1 exited");
  EXPECT_EQ(succession_->Serving(), next);
}

TEST_F(SuccessionTest, ACommitAdmittingANodeEndsTheGenerationAndTellsTheNodeItsBlock) {
  JobOptions options;
  options.min_size = 1;
  options.max_size = 4;
  options.next_generation = [this](int size, int64_t epoch, std::optional<AbortCause>,
                                   const std::string&) { return NewJob(size, epoch); };
  Make(std::move(options));
  RunJob();
  const std::string path = StartTimeline();
  std::optional<absl::StatusOr<NodeBlock>> block;
  generations_->Join(
      {"n", 1, [&block](absl::StatusOr<NodeBlock> b) { block = std::move(b); }, nullptr, "join-n"});
  succession_->AdmitJoiners(self_);

  ASSERT_TRUE(block.has_value() && block->ok());
  EXPECT_EQ((*block)->first_rank, 2) << "after the survivors";
  EXPECT_EQ((*block)->node_rank, -1);
  EXPECT_EQ((*block)->size, 3);
  EXPECT_EQ((*block)->epoch, 2);
  EXPECT_EQ(lifecycle_->state(), State::kAborted);
  EXPECT_THAT(lifecycle_->abort_reason(),
              HasSubstr("1 rank on n joined at a commit; the job goes on with 3 ranks"));
  const std::vector<DownMessage> messages = sink_.messages();
  ASSERT_FALSE(messages.empty());
  const DownMessage& told = messages.back();
  ASSERT_TRUE(told.membership_change.has_value());
  EXPECT_EQ(told.membership_change->size, 3);
  std::shared_ptr<Job> next = generations_->successor();
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->size(), 3);
  EXPECT_EQ(succession_->Serving(), next);
  EXPECT_TRUE(next->Describe().timeline.active) << "the timeline goes on in the successor";
  ASSERT_TRUE(next->StopTimeline().ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace troika::coordinator
