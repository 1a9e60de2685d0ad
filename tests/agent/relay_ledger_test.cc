// RelayLedger on its own: what a node relay keeps for a restarted coordinator. NodeRelay's
// restart tests (node_relay_test.cc) cover it behind the relay.

#include "agent/relay/relay_ledger.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::Request Request(const std::string& name, std::vector<int> ranks, int32_t cache_id = 0,
                    int process_set = 0) {
  v1::Request r;
  r.set_name(name);
  r.set_process_set(process_set);
  r.set_cache_id(cache_id);
  for (int rank : ranks) r.add_ranks(rank);
  return r;
}

Response Named(const std::string& name, int process_set = 0) {
  Response r;
  r.names = {name};
  r.process_set = process_set;
  return r;
}

// "name:ranks" of each request to send again, in order.
std::vector<std::string> Unanswered(const RelayLedger& ledger) {
  std::vector<std::string> out;
  const v1::RequestBatch batch = ledger.Unanswered();
  for (const v1::Request& r : batch.requests()) {
    std::string text = (r.cache_id() ? "#" + std::to_string(r.cache_id()) : r.name()) + ":";
    for (int i = 0; i < r.ranks_size(); ++i) text += (i ? "," : "") + std::to_string(r.ranks(i));
    out.push_back(text);
  }
  return out;
}

const std::map<int32_t, std::string> kNoIds;

TEST(RelayLedgerTest, RequestsStayUntilAResponseNamesTheirTensorInTheirSet) {
  RelayLedger ledger(16);
  ledger.Sent(Request("a", {2, 3}), {0, "a"});
  ledger.Sent(Request("b", {2}), {0, "b"});
  ledger.Sent(Request("a", {2, 3}, 0, 1), {1, "a"});  // the same name in process set 1
  ledger.Sent(Request("b", {3}), {0, "b"});
  EXPECT_THAT(Unanswered(ledger), ElementsAre("a:2,3", "b:2", "a:2,3", "b:3"));

  DownMessage down;
  down.seq = 1;
  down.responses = {Named("b"), Named("a", 1)};
  ledger.Received(down, kNoIds);
  EXPECT_THAT(Unanswered(ledger), ElementsAre("a:2,3")) << "both of b's requests are answered";
}

TEST(RelayLedgerTest, AResponseOfIdsAloneAnswersThroughTheNamesTheIdsStoodFor) {
  RelayLedger ledger(16);
  ledger.Sent(Request("", {2, 3}, 7), {0, "grad"});
  ledger.Sent(Request("", {2, 3}, 8), {0,
                                       "\x01"
                                       "cache-id/8"});  // an id it did not know
  Response ids;
  ids.names = {"?"};  // restored by the receiver; not what the ledger goes by
  ids.cache_ids = {7, 8};
  ids.ids_known = true;
  DownMessage down;
  down.seq = 1;
  down.responses = {ids};
  ledger.Received(down, {{7, "grad"}});
  EXPECT_THAT(Unanswered(ledger), ElementsAre("#8:2,3"));
  EXPECT_EQ(ledger.Resume().max_cache_id, 8);
}

TEST(RelayLedgerTest, AMissTakesItsRankOutOfTheIdRequestAndTheLastOneDropsIt) {
  RelayLedger ledger(16);
  ledger.Sent(Request("", {2, 3}, 7), {0, "grad"});
  DownMessage down;  // misses come to one session: not numbered
  down.misses = {{2, 7}};
  ledger.Received(down, kNoIds);
  EXPECT_THAT(Unanswered(ledger), ElementsAre("#7:3")) << "rank 2 sends it again in full";
  down.misses = {{3, 7}};
  ledger.Received(down, kNoIds);
  EXPECT_THAT(Unanswered(ledger), IsEmpty());
  EXPECT_EQ(ledger.Resume().received, 0);
}

TEST(RelayLedgerTest, ResponsesAreNumberedAndTheLatestAnswerAReplay) {
  RelayLedger ledger(3);  // keeps the latest 3
  DownMessage down;
  down.seq = 1;
  down.responses = {Named("a"), Named("b")};
  ledger.Received(down, kNoIds);
  down.seq = 3;
  down.responses = {Named("c"), Named("d")};
  ledger.Received(down, kNoIds);
  EXPECT_EQ(ledger.Resume().received, 4);

  v1::ResponseBatch replay = ledger.Replay(2, 4);
  EXPECT_EQ(replay.seq(), 2);
  ASSERT_EQ(replay.responses_size(), 3);
  EXPECT_EQ(replay.responses(0).names(0), "b");
  EXPECT_EQ(replay.responses(2).names(0), "d");
  // 1 is no longer held, 5 never came: answered empty, and the coordinator gives up.
  EXPECT_EQ(ledger.Replay(1, 2).responses_size(), 0);
  EXPECT_EQ(ledger.Replay(1, 2).seq(), 0);
  EXPECT_EQ(ledger.Replay(4, 5).responses_size(), 0);
}

TEST(RelayLedgerTest, AScheduleForgetsItsTensorsOfSetZeroAndIsCountedForResume) {
  RelayLedger ledger(16);
  ledger.Sent(Request("a", {2}), {0, "a"});
  ledger.Sent(Request("a", {2}, 0, 1), {1, "a"});
  ledger.Sent(Request("z", {2}), {0, "z"});
  ledger.Scheduled(5, {"a", "b"});
  ledger.Scheduled(4, {});
  EXPECT_THAT(Unanswered(ledger), ElementsAre("a:2", "z:2"));
  EXPECT_EQ(ledger.Resume().max_schedule_id, 5);
}

}  // namespace
}  // namespace troika::agent
