#include "agent/node_relay.h"

#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using session::SessionSink;
using ::testing::ElementsAre;

// Records what the relay sends upstream, in order, as short strings:
// "requests grad:2,3", "goodbye 2", "exit 3 code 1 signal 0".
class FakeUpstream : public RelayUpstream {
 public:
  void SendRequests(v1::RequestBatch batch) override {
    std::string text = "requests";
    for (const v1::Request& r : batch.requests()) {
      text += " " + (r.cache_id() ? "#" + std::to_string(r.cache_id()) : r.name()) + ":";
      if (r.ranks().empty()) text += std::to_string(r.rank());
      for (int i = 0; i < r.ranks_size(); ++i) {
        text += (i ? "," : "") + std::to_string(r.ranks(i));
      }
    }
    Record(text);
  }
  void SendGoodbye(const std::vector<int>& ranks) override {
    std::string text = "goodbye";
    for (int r : ranks) text += " " + std::to_string(r);
    Record(text);
  }
  void SendWaitState(const WaitState& state) override {
    std::string text = "waits " + std::to_string(state.rank);
    for (const std::string& name : state.waiting_for) text += " " + name;
    Record(text);
  }
  void SendExecReport(const ExecReport& report) override {
    Record("report " + std::to_string(report.rank) + " bytes " +
           std::to_string(report.allreduce_bytes));
  }
  void SendScheduleEnded(int64_t id, const std::vector<int>& ranks) override {
    std::string text = "schedule " + std::to_string(id) + " ended";
    for (int r : ranks) text += " " + std::to_string(r);
    Record(text);
  }
  void SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) override {
    std::string text = "schedule " + std::to_string(id) + " deviated";
    for (int r : ranks) text += " " + std::to_string(r);
    Record(text);
  }
  void SendReplay(v1::ResponseBatch batch) override {
    std::string text = "replay from " + std::to_string(batch.seq());
    for (const v1::Response& r : batch.responses()) {
      text += " " + (r.names().empty() ? std::string("#") : r.names(0));
    }
    Record(text);
  }
  void SendRankExit(const RankExit& exit) override {
    Record("exit " + std::to_string(exit.rank) + " code " + std::to_string(exit.exit_code) +
           " signal " + std::to_string(exit.signal) + " on " + exit.host);
    std::lock_guard<std::mutex> lock(mu_);
    exits_.push_back(exit);
  }
  std::vector<RankExit> exits() {
    std::lock_guard<std::mutex> lock(mu_);
    return exits_;
  }
  std::vector<std::string> sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }
  // Resolves with the next message recorded after this call.
  std::future<std::string> Next() {
    std::lock_guard<std::mutex> lock(mu_);
    next_ = std::promise<std::string>();
    waiting_ = true;
    return next_.get_future();
  }

 private:
  void Record(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    sent_.push_back(text);
    if (waiting_) {
      waiting_ = false;
      next_.set_value(text);
    }
  }
  std::vector<RankExit> exits_;  // guarded by mu_
  std::mutex mu_;
  std::vector<std::string> sent_;
  std::promise<std::string> next_;
  bool waiting_ = false;
};

class FakeSink : public session::SessionSink {
 public:
  void Send(std::shared_ptr<const DownMessage> message) override {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(std::move(message));
  }
  std::vector<std::shared_ptr<const DownMessage>> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<const DownMessage>> messages_;
};

TensorRequest Request(int rank, const std::string& name) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.shape = {4};
  return r;
}

class NodeRelayTest : public ::testing::Test {
 protected:
  // Ranks 2 and 3 of a job of 4, on "node-b"; an hour-long window and grace, so only the
  // fake clock and explicit calls move things.
  std::shared_ptr<NodeRelay> MakeRelay(absl::Duration lost_grace = absl::Hours(1)) {
    NodeRelayOptions options;
    options.job = "train";
    options.size = 4;
    options.ranks = {2, 3};
    options.host = "node-b";
    options.aggregation_window = absl::Hours(1);
    options.lost_session_grace = lost_grace;
    auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
    relay->Attached(1);
    return relay;
  }

  // Opens one session per rank.
  void OpenBoth(NodeRelay& relay) {
    ASSERT_TRUE(relay.OpenSession({2}, 1, &sink2_).ok());
    ASSERT_TRUE(relay.OpenSession({3}, 1, &sink3_).ok());
  }

  FakeUpstream upstream_;
  Scheduler scheduler_;
  FakeClock clock_;
  FakeSink sink2_, sink3_;
};

TEST_F(NodeRelayTest, TensorOfEveryLocalRankGoesUpstreamAsOneRequest) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "grad")}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2,3"));
}

TensorRequest Cached(int rank, int32_t id) {
  TensorRequest r;
  r.rank = rank;
  r.cache_id = id;
  return r;
}

// The coordinator publishes schedule 5: one entry, "grad" (cache id 7).
void DeliverGradSchedule(NodeRelay& relay) {
  auto down = std::make_shared<DownMessage>();
  Response entry;
  entry.names = {"grad"};
  entry.cache_ids = {7};
  down->schedule = Schedule{5, {entry}};
  relay.Deliver(down);
}

// The coordinator announces cache id 7 for "grad".
void AnnounceGrad(NodeRelay& relay) {
  auto down = std::make_shared<DownMessage>();
  Response response;
  response.names = {"grad"};
  response.cache_ids = {7};
  down->responses.push_back(response);
  relay.Deliver(down);
}

TEST_F(NodeRelayTest, CachedRequestsOfEveryLocalRankGoUpstreamAsOneIdRequest) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  AnnounceGrad(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Cached(2, 7)}).ok());
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  ASSERT_TRUE(relay->Submit(&sink3_, {Cached(3, 7)}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests #7:2,3"));
}

TEST_F(NodeRelayTest, IdAndFullRequestOfOneTensorAggregateButGoUpSeparately) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  AnnounceGrad(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Cached(2, 7)}).ok());
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "grad")}).ok());  // rank 3's request changed
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests #7:2 grad:3"));
}

TEST_F(NodeRelayTest, EndedIdIsNotAggregatedByName) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  AnnounceGrad(*relay);
  auto evict = std::make_shared<DownMessage>();
  evict->evicted_cache_ids = {7};
  relay->Deliver(evict);
  ASSERT_TRUE(relay->Submit(&sink2_, {Cached(2, 7)}).ok());
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "grad")}).ok());
  // Two tensors as far as the relay knows, each waiting for the other local rank; the
  // coordinator will answer the id with a miss.
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  clock_.Advance(absl::Hours(1));
  relay->FlushExpired();
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests #7:2 grad:3"));
}

// Steady-state schedules: a schedule sends what waits here upstream at once; until a rank
// says it ended the schedule, its requests for the schedule's tensors (sent before it had the
// schedule) are dropped, as the coordinator would; other tensors go up as usual; the rank's
// ScheduleEnded goes up before its later requests.
TEST_F(NodeRelayTest, ScheduledRequestsOfRanksInTheScheduleAreDroppedUntilTheyEndIt) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  AnnounceGrad(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Cached(2, 7)}).ok());  // waits for rank 3
  DeliverGradSchedule(*relay);
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests #7:2")) << "sent up at once";
  ASSERT_FALSE(sink3_.messages().empty());
  EXPECT_TRUE(sink3_.messages().back()->schedule.has_value()) << "ranks get the schedule";
  ASSERT_TRUE(relay->Submit(&sink3_, {Cached(3, 7), Request(3, "other")}).ok());
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());  // another shape: same name
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "other")}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests #7:2", "requests other:3,2"));
  // Rank 2 deviates: the coordinator hears at once, and its word reaches every rank here.
  ASSERT_TRUE(relay->DeviateSchedule(&sink2_, 5, {2}).ok());
  auto end = std::make_shared<DownMessage>();
  end->end_schedule = 5;
  relay->Deliver(end);
  EXPECT_EQ(sink3_.messages().back()->end_schedule, 5);
  ASSERT_TRUE(relay->EndSchedule(&sink2_, 5, {2}).ok());
  ASSERT_TRUE(relay->Submit(&sink2_, {Cached(2, 7)}).ok());
  clock_.Advance(absl::Hours(1));
  relay->FlushExpired();
  EXPECT_THAT(upstream_.sent(),
              ElementsAre("requests #7:2", "requests other:3,2", "schedule 5 deviated 2",
                          "schedule 5 ended 2", "requests #7:2"));
  EXPECT_FALSE(relay->EndSchedule(&sink2_, 5, {3}).ok()) << "rank 3 is not sink 2's";
  EXPECT_FALSE(relay->DeviateSchedule(&sink2_, 5, {3}).ok()) << "rank 3 is not sink 2's";
}

// A join a rank sent after a request the schedule took is dropped too (the rank sends it
// again after that request once it ended the schedule: ahead of it, the join would make the
// rank a joined rank for it); a join of a rank with nothing dropped goes up.
TEST_F(NodeRelayTest, AJoinSentAfterAScheduledRequestIsDroppedWithIt) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  AnnounceGrad(*relay);
  DeliverGradSchedule(*relay);
  TensorRequest join3 = Request(3, kJoinTensorName);
  join3.type = CollectiveType::kJoin;
  join3.shape = {};
  TensorRequest join2 = join3;
  join2.rank = 2;
  ASSERT_TRUE(relay->Submit(&sink3_, {Cached(3, 7), join3}).ok());
  ASSERT_TRUE(relay->Submit(&sink2_, {join2}).ok());
  clock_.Advance(absl::Hours(1));
  relay->FlushExpired();
  EXPECT_THAT(upstream_.sent(), ElementsAre(absl::StrCat("requests ", kJoinTensorName, ":2")));
  // Rank 3 ends the schedule and sends both again, in order: they go up.
  ASSERT_TRUE(relay->EndSchedule(&sink3_, 5, {3}).ok());
  ASSERT_TRUE(relay->Submit(&sink3_, {Cached(3, 7), join3}).ok());
  clock_.Advance(absl::Hours(1));
  relay->FlushExpired();
  EXPECT_THAT(upstream_.sent(),
              ElementsAre(absl::StrCat("requests ", kJoinTensorName, ":2"), "schedule 5 ended 3",
                          absl::StrCat("requests #7:3 ", kJoinTensorName, ":3")));
}

TEST_F(NodeRelayTest, WhatArrivedGoesUpstreamWhenTheWindowEnds) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  clock_.Advance(absl::Hours(1));
  relay->FlushExpired();
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "grad")}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2", "requests grad:3"));
}

TEST_F(NodeRelayTest, DownMessagesReachEveryLocalSession) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  auto down = std::make_shared<DownMessage>();
  down->responses.resize(1);
  relay->Deliver(down);
  ASSERT_EQ(sink2_.messages().size(), 1u);
  ASSERT_EQ(sink3_.messages().size(), 1u);
  EXPECT_EQ(sink2_.messages()[0], down) << "one message, shared";
  EXPECT_EQ(sink3_.messages()[0], down);
}

TEST_F(NodeRelayTest, AbortReachesEverySessionAndLaterOnesAndEndsForwarding) {
  auto relay = MakeRelay();
  ASSERT_TRUE(relay->OpenSession({2}, 1, &sink2_).ok());
  auto abort = std::make_shared<DownMessage>();
  abort->abort_reason = "job 'train' aborted: rank 0 on node-a exited with code 1";
  relay->Deliver(abort);
  EXPECT_TRUE(relay->aborted());
  ASSERT_TRUE(relay->OpenSession({3}, 1, &sink3_).ok());
  ASSERT_EQ(sink3_.messages().size(), 1u);
  EXPECT_EQ(sink3_.messages()[0]->abort_reason, abort->abort_reason);
  EXPECT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  relay->ProcessExited(3, 1, 0);
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty()) << "the job is over";
}

// A rank that exits while its node attaches (an elastic job's next generation: the upstream
// has no session then and takes nothing) is reported once the node is attached.
TEST_F(NodeRelayTest, AnExitBeforeTheNodeIsAttachedGoesUpOnceItIs) {
  NodeRelayOptions options;
  options.size = 4;
  options.ranks = {2, 3};
  options.host = "node-b";
  auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
  relay->ProcessExited(3, 0, 9);
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  relay->Attached(2);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 3 code 0 signal 9 on node-b"));
}

TEST_F(NodeRelayTest, GoodbyeGoesUpstreamAfterTheRanksWaitingRequests) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  ASSERT_TRUE(relay->Goodbye(&sink2_, {2}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2", "goodbye 2"));
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "next")}).ok());
  EXPECT_THAT(upstream_.sent().back(), "requests next:3") << "rank 3 is the only live rank";
  relay->CloseSession(&sink2_, absl::OkStatus());
  relay->ProcessExited(2, 0, 0);
  // Only that its process is gone: it left cleanly, and will not attach again (a job that
  // forms anew cannot wait for it).
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2", "goodbye 2", "requests next:3",
                                            "exit 2 code 0 signal 0 on node-b"));
  relay->ProcessExited(2, 0, 0);
  EXPECT_EQ(upstream_.sent().size(), 4u) << "once";
}

TEST_F(NodeRelayTest, RanksThatSaidGoodbyeHaveLeftAndTheirFailureAfterwardsIsReported) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  EXPECT_FALSE(relay->Left({2}));
  ASSERT_TRUE(relay->Goodbye(&sink2_, {2}).ok());
  EXPECT_TRUE(relay->Left({2}));
  EXPECT_FALSE(relay->Left({2, 3})) << "rank 3 has not";
  EXPECT_FALSE(relay->Left({7})) << "not this node's";
  relay->CloseSession(&sink2_, absl::OkStatus());
  relay->ProcessExited(2, 3, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("goodbye 2", "exit 2 code 3 signal 0 on node-b"));
}

TEST_F(NodeRelayTest, SessionTheRelayEndedIsReportedWithTheVerdictAtOnce) {
  auto relay = MakeRelay();  // an hour of grace: only the verdict can report it now
  OpenBoth(*relay);
  relay->CloseSession(&sink2_, absl::InvalidArgumentError("negative dimension"));
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 2 code -1 signal 0 on node-b"));
  ASSERT_EQ(upstream_.exits().size(), 1u);
  EXPECT_EQ(upstream_.exits()[0].reason, "negative dimension");
  relay->ProcessExited(2, 0, 0);  // its later exit, cleanly or not, adds nothing
  EXPECT_EQ(upstream_.sent().size(), 1u);
}

TEST_F(NodeRelayTest, WaitStateGoesUpstreamAtOnceUnchangedForOwnedLiveRanks) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->ReportWaitState(&sink2_, {2, {"a", "b"}}).ok());
  ASSERT_TRUE(relay->ReportWaitState(&sink2_, {2, {}}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("waits 2 a b", "waits 2"));
  EXPECT_EQ(relay->ReportWaitState(&sink2_, {3, {"a"}}).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(relay->Goodbye(&sink3_, {3}).ok());
  ASSERT_TRUE(relay->ReportWaitState(&sink3_, {3, {"a"}}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("waits 2 a b", "waits 2", "goodbye 3"));
}

TEST_F(NodeRelayTest, ExecReportGoesUpstreamAtOnceUnchangedForOwnedLiveRanks) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ExecReport report;
  report.rank = 2;
  report.allreduce_bytes = 4096;
  ASSERT_TRUE(relay->ReportExec(&sink2_, report).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("report 2 bytes 4096"));
  report.rank = 3;
  EXPECT_EQ(relay->ReportExec(&sink2_, report).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(relay->Goodbye(&sink3_, {3}).ok());
  ASSERT_TRUE(relay->ReportExec(&sink3_, report).ok());  // after its goodbye: dropped
  EXPECT_THAT(upstream_.sent(), ElementsAre("report 2 bytes 4096", "goodbye 3"));
}

TEST_F(NodeRelayTest, SessionOpeningLaterGetsTheCoordinatorsLatestSettings) {
  auto relay = MakeRelay();
  auto down = std::make_shared<DownMessage>();
  down->settings = ClientSettings{50, true};
  relay->Deliver(down);  // before any local session
  ASSERT_TRUE(relay->OpenSession({2}, 1, &sink2_).ok());
  ASSERT_EQ(sink2_.messages().size(), 1u);
  ASSERT_TRUE(sink2_.messages()[0]->settings.has_value());
  EXPECT_EQ(*sink2_.messages()[0]->settings, (ClientSettings{50, true}));
}

TEST_F(NodeRelayTest, FailingProcessIsReportedAtOnceWithItsExitStatus) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  relay->ProcessExited(3, 0, 9);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 3 code 0 signal 9 on node-b"));
  relay->CloseSession(&sink3_, absl::OkStatus());
  EXPECT_EQ(upstream_.sent().size(), 1u);
}

TEST_F(NodeRelayTest, ProcessExitingZeroWithoutGoodbyeLeavesCleanly) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  relay->ProcessExited(2, 0, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("goodbye 2"));
}

TEST_F(NodeRelayTest, ProcessExitingZeroBeforeItsSessionIsReportedAsAnExit) {
  // It never joined: the coordinator must hear that it exited, so the ranks waiting for it
  // to connect fail at once instead of waiting out their timeout.
  auto relay = MakeRelay();
  relay->ProcessExited(2, 0, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 2 code 0 signal 0 on node-b"));
}

TEST_F(NodeRelayTest, SessionEndingWithoutGoodbyeAwaitsTheExitReport) {
  auto relay = MakeRelay();  // an hour of grace: only the exit report can come
  OpenBoth(*relay);
  relay->CloseSession(&sink2_, absl::OkStatus());
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  relay->ProcessExited(2, 3, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 2 code 3 signal 0 on node-b"));
}

TEST_F(NodeRelayTest, SessionEndingWithoutGoodbyeWhileTheProcessLivesIsReportedLost) {
  auto relay = MakeRelay(absl::Milliseconds(20));
  OpenBoth(*relay);
  std::future<std::string> next = upstream_.Next();
  relay->CloseSession(&sink3_, absl::OkStatus());
  ASSERT_EQ(next.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(next.get(), "exit 3 code -1 signal 0 on node-b");
  relay->ProcessExited(3, 0, 15);
  EXPECT_EQ(upstream_.sent().size(), 1u) << "reported once";
}

// A rank that attached for generation 2, whose session reaches the agent after the job went
// on as generation 3 (the relay of generation 3 is in force, not attached yet): it is sent the
// change that ended generation 2, as that generation's sessions were, not refused UNAVAILABLE
// (which the rank would take for a lost agent and fail).
TEST_F(NodeRelayTest, ALateSessionOfTheEndedGenerationIsSentTheChange) {
  NodeRelayOptions options;
  options.size = 3;
  options.ranks = {0, 1};
  auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
  auto change = std::make_shared<DownMessage>();
  change->abort_reason = "membership of job 'train' changed: rank 2 exited";
  change->membership_change = MembershipChange{};
  change->membership_change->epoch = 3;
  change->membership_change->size = 3;
  relay->Follows(change);
  ASSERT_TRUE(relay->OpenSession({0}, 2, &sink2_).ok());
  ASSERT_EQ(sink2_.messages().size(), 1u);
  EXPECT_EQ(sink2_.messages()[0], change);
  EXPECT_TRUE(absl::IsPermissionDenied(relay->Submit(&sink2_, {Request(0, "x")})))
      << "the late session is bound to no rank";
  EXPECT_TRUE(absl::IsUnavailable(relay->OpenSession({0}, 3, &sink3_)))
      << "generation 3's own sessions wait for the relay to attach";
  relay->Attached(3);
  ASSERT_TRUE(relay->OpenSession({0}, 3, &sink3_).ok());
  EXPECT_TRUE(sink3_.messages().empty());
  EXPECT_TRUE(upstream_.sent().empty());
}

TEST_F(NodeRelayTest, SessionsAreCheckedLikeTheCoordinatorChecksThem) {
  NodeRelayOptions options;
  options.size = 4;
  options.ranks = {2, 3};
  auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
  EXPECT_TRUE(absl::IsUnavailable(relay->OpenSession({2}, 1, &sink2_))) << "not attached yet";
  relay->Attached(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(relay->OpenSession({2}, 7, &sink2_)));
  EXPECT_TRUE(absl::IsPermissionDenied(relay->OpenSession({1}, 1, &sink2_)));
  ASSERT_TRUE(relay->OpenSession({2}, 1, &sink2_).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(relay->OpenSession({2}, 1, &sink3_)));
  EXPECT_TRUE(absl::IsPermissionDenied(relay->Submit(&sink2_, {Request(3, "x")})));
  TensorRequest bad = Request(2, "bad");
  bad.shape = {-1};
  EXPECT_TRUE(absl::IsInvalidArgument(relay->Submit(&sink2_, {bad})));
  EXPECT_TRUE(absl::IsPermissionDenied(relay->Goodbye(&sink2_, {3})));
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
}

// A response naming `names`, numbered `seq` in the job's order.
std::shared_ptr<DownMessage> Numbered(int64_t seq, const std::vector<std::string>& names) {
  auto down = std::make_shared<DownMessage>();
  down->seq = seq;
  for (const std::string& name : names) {
    Response response;
    response.names = {name};
    down->responses.push_back(response);
  }
  return down;
}

TEST_F(NodeRelayTest, AfterACoordinatorRestartWhatGotNoResponseIsSentAgainThenTheGoodbyes) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "a"), Request(2, "b")}).ok());
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "a"), Request(3, "b")}).ok());
  relay->Deliver(Numbered(1, {"a"}));  // "b" got no response before the coordinator died
  relay->Suspend();
  // While the coordinator is away: nothing goes upstream, everything is kept.
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "c")}).ok());
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "c")}).ok());
  ASSERT_TRUE(relay->Goodbye(&sink3_, {3}).ok());
  ASSERT_TRUE(relay->ReportWaitState(&sink2_, {2, {"b"}}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests a:2,3 b:2,3"));
  EXPECT_EQ(relay->ResumeState().received, 1);

  auto resumed = std::make_shared<DownMessage>();
  resumed->resumed = true;
  relay->Deliver(resumed);
  EXPECT_THAT(upstream_.sent(),
              ElementsAre("requests a:2,3 b:2,3", "requests b:2,3 c:2,3", "goodbye 3"));
  EXPECT_TRUE(sink2_.messages().size() == 1) << "the ranks see only the response";
  // Sent again once, not twice: "b" and "c" are answered now.
  relay->Deliver(Numbered(2, {"b", "c"}));
  relay->Suspend();
  relay->Deliver(resumed);
  EXPECT_EQ(upstream_.sent().back(), "goodbye 3");
  EXPECT_EQ(relay->ResumeState().received, 3);
}

TEST_F(NodeRelayTest, ReplayRequestIsAnsweredFromTheLogOfNumberedResponses) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  relay->Deliver(Numbered(1, {"a", "b"}));
  relay->Deliver(Numbered(3, {"c"}));
  auto ask = std::make_shared<DownMessage>();
  ask->replay_from = 2;
  ask->replay_to = 3;
  relay->Deliver(ask);
  EXPECT_THAT(upstream_.sent(), ElementsAre("replay from 2 b c"));
  EXPECT_EQ(sink2_.messages().size(), 2u) << "a replay request is not for the ranks";
  ask->replay_to = 4;  // not received: answered empty, so the coordinator gives up
  relay->Deliver(ask);
  EXPECT_EQ(upstream_.sent().back(), "replay from 0");
}

// A restarted coordinator numbers its schedules above every one the agents were sent: the
// resume state carries the highest, and it stays after the schedule ended.
TEST_F(NodeRelayTest, ResumeStateCarriesTheHighestScheduleIdReceived) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  EXPECT_EQ(relay->ResumeState().max_schedule_id, 0);
  AnnounceGrad(*relay);
  DeliverGradSchedule(*relay);
  ASSERT_TRUE(relay->EndSchedule(&sink2_, 5, {2}).ok());
  ASSERT_TRUE(relay->EndSchedule(&sink3_, 5, {3}).ok());
  EXPECT_EQ(relay->ResumeState().max_schedule_id, 5);
}

TEST_F(NodeRelayTest, MissedIdRequestIsNotSentAgainAfterARestart) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  AnnounceGrad(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Cached(2, 7)}).ok());
  ASSERT_TRUE(relay->Submit(&sink3_, {Cached(3, 7)}).ok());
  auto miss = std::make_shared<DownMessage>();
  miss->misses = {{2, 7}};
  relay->Deliver(miss);  // rank 2 sends "grad" again in full, as a new request
  EXPECT_EQ(relay->ResumeState().max_cache_id, 7);
  relay->Suspend();
  auto resumed = std::make_shared<DownMessage>();
  resumed->resumed = true;
  relay->Deliver(resumed);
  EXPECT_EQ(upstream_.sent().back(), "requests #7:3");
}

}  // namespace
}  // namespace troika::agent
