// ClientSchedule: which entry each submission belongs to, when entries can be entered, where a
// rank deviates, and what goes back to negotiation when the schedule ends.

#include "libclient/schedule.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

TensorRequest Req(const std::string& name, int64_t elements = 4) {
  TensorRequest r;
  r.name = name;
  r.shape = {elements};
  return r;
}

Response Entry(std::vector<std::string> names, std::vector<int32_t> ids) {
  Response r;
  r.names = std::move(names);
  r.cache_ids = std::move(ids);
  return r;
}

// Two entries: [a, b] fused, then [c].
ClientSchedule TwoEntries() {
  Schedule s{7, {Entry({"a", "b"}, {1, 2}), Entry({"c"}, {3})}};
  return ClientSchedule(s, {{"a", Req("a")}, {"b", Req("b", 8)}, {"c", Req("c")}});
}

std::vector<int64_t> Positions(const std::vector<ClientSchedule::Step>& steps) {
  std::vector<int64_t> out;
  for (const auto& s : steps) out.push_back(s.position);
  return out;
}

TEST(ClientScheduleTest, EntriesAreEnteredInOrderOnceEveryTensorIsSubmitted) {
  ClientSchedule s = TwoEntries();
  EXPECT_EQ(s.id(), 7);
  EXPECT_TRUE(s.Submit(Req("c"), 0));
  EXPECT_TRUE(s.TakeReady().empty()) << "entry 1 waits for entry 0";
  EXPECT_TRUE(s.Submit(Req("a"), 1));
  EXPECT_TRUE(s.TakeReady().empty());
  EXPECT_TRUE(s.Submit(Req("b", 8), 2));
  std::vector<ClientSchedule::Step> ready = s.TakeReady();
  EXPECT_EQ(Positions(ready), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ready[0].response.elements, (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(ready[0].vote_void);
  s.Completed(0);
  s.Completed(1);
  // The next round: positions 2 and 3.
  EXPECT_TRUE(s.Submit(Req("a"), 3));
  EXPECT_TRUE(s.Submit(Req("b", 8), 4));
  EXPECT_EQ(Positions(s.TakeReady()), (std::vector<int64_t>{2}));
}

TEST(ClientScheduleTest, ASubmissionTheScheduleDoesNotNameIsADeviation) {
  ClientSchedule s = TwoEntries();
  EXPECT_FALSE(s.Submit(Req("other"), 0));
  EXPECT_FALSE(s.Submit(Req("a", 5), 1)) << "another shape";
  TensorRequest in_set = Req("a");
  in_set.process_set = 1;
  EXPECT_FALSE(s.Submit(in_set, 2));
  EXPECT_FALSE(s.deviated()) << "the caller decides to deviate";
}

TEST(ClientScheduleTest, DeviatingVotesVoidAtTheFirstEntryNotEntered) {
  ClientSchedule s = TwoEntries();
  ASSERT_TRUE(s.Submit(Req("a"), 0));
  ASSERT_TRUE(s.Submit(Req("b", 8), 1));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  ASSERT_TRUE(s.Submit(Req("c"), 2));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  ASSERT_TRUE(s.Submit(Req("a"), 3));  // position 2, not enterable yet
  ClientSchedule::Step step = s.Deviate();
  EXPECT_EQ(step.position, 2);
  EXPECT_TRUE(step.vote_void);
  EXPECT_EQ(step.response.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(s.deviated());
  EXPECT_FALSE(s.Submit(Req("b", 8), 4));
  EXPECT_TRUE(s.TakeReady().empty());
}

TEST(ClientScheduleTest, EndingReturnsWhatWasSubmittedFromTheVoidEntryOnInSubmissionOrder) {
  ClientSchedule s = TwoEntries();
  ASSERT_TRUE(s.Submit(Req("c"), 10));
  ASSERT_TRUE(s.Submit(Req("b", 8), 11));
  ASSERT_TRUE(s.Submit(Req("a"), 12));
  ASSERT_EQ(s.TakeReady().size(), 2u);
  s.Completed(0);  // entry 0 went through; entry 1 (c) came back void
  std::vector<std::pair<uint64_t, TensorRequest>> back = s.Ended(1);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].first, 10u);
  EXPECT_EQ(back[0].second.name, "c");
  EXPECT_TRUE(s.deviated());
}

TEST(ClientScheduleTest, AWaitDeviatesOnlyForATensorWhoseEntryCannotBeEntered) {
  ClientSchedule s = TwoEntries();
  ASSERT_TRUE(s.Submit(Req("a"), 0));
  EXPECT_TRUE(s.WaitDeviates("a")) << "its entry also needs b";
  EXPECT_FALSE(s.WaitDeviates("c")) << "not submitted: nothing of this rank waits for it";
  ASSERT_TRUE(s.Submit(Req("b", 8), 1));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  EXPECT_FALSE(s.WaitDeviates("a")) << "entered: it completes when the others enter";
}

TEST(ClientScheduleTest, AScheduleNamingAnIdThisRankNeverLearnedIsIncomplete) {
  Schedule schedule{1, {Entry({"a"}, {1})}};
  ClientSchedule s(schedule, {});
  EXPECT_FALSE(s.complete());
  EXPECT_FALSE(s.Submit(Req("a"), 0));
}

}  // namespace
}  // namespace troika::internal
