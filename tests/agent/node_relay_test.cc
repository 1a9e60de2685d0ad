// NodeRelay: what goes upstream (requests aggregated by name or cache id, schedules, the
// window, wait states and reports), and after a coordinator restart (resend, replay, resume).

#include "agent/relay/node_relay.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/node_relay_test_util.h"

namespace troika::agent {
namespace {

using test_util::NodeRelayTest;
using test_util::Request;
using ::testing::ElementsAre;

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

TEST_F(NodeRelayTest, TensorOfEveryLocalRankGoesUpstreamAsOneRequest) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "grad")}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2,3"));
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
