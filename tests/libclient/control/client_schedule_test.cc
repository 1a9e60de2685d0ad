// ClientSchedule: which entry each submission belongs to, when entries can be entered, where a
// rank deviates, what goes back to negotiation when the schedule ends, and the progress it
// reports.

#include "libclient/control/client_schedule.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

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

std::vector<int64_t> Positions(absl::Span<const ClientSchedule::Step> steps) {
  std::vector<int64_t> out;
  for (const auto& s : steps) out.push_back(s.position);
  return out;
}

TEST(ClientScheduleTest, EntriesAreEnteredInOrderOnceEveryTensorIsSubmitted) {
  ClientSchedule s = TwoEntries();
  EXPECT_EQ(s.id(), 7);
  EXPECT_TRUE(s.Submit(Req("c"), 0, kT0));
  EXPECT_TRUE(s.TakeReady().empty()) << "entry 1 waits for entry 0";
  EXPECT_TRUE(s.Submit(Req("a"), 1, kT0));
  EXPECT_TRUE(s.TakeReady().empty());
  EXPECT_TRUE(s.Submit(Req("b", 8), 2, kT0));
  auto ready = s.TakeReady();
  EXPECT_EQ(Positions(ready), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ready[0].response->elements, (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(ready[0].vote_void);
  s.Completed(0, kT0);
  s.Completed(1, kT0);
  // The next round: positions 2 and 3.
  EXPECT_TRUE(s.Submit(Req("a"), 3, kT0));
  EXPECT_TRUE(s.Submit(Req("b", 8), 4, kT0));
  EXPECT_EQ(Positions(s.TakeReady()), (std::vector<int64_t>{2}));
}

TEST(ClientScheduleTest, ATensorEntersAloneWhenItsEntryIsNextAndHasNoOtherTensor) {
  ClientSchedule s = TwoEntries();
  const int a = s.Match(Req("a")), b = s.Match(Req("b", 8)), c = s.Match(Req("c"));
  EXPECT_FALSE(s.EntersAlone(c)) << "entry 1 waits for entry 0";
  EXPECT_FALSE(s.EntersAlone(a)) << "entry 0 needs b too";
  s.Take(a, 0, kT0);
  s.Take(b, 1, kT0);
  EXPECT_EQ(Positions(s.TakeReady()), (std::vector<int64_t>{0}));
  ASSERT_TRUE(s.EntersAlone(c));
  s.Take(c, 2, kT0);
  EXPECT_EQ(Positions(s.TakeReady()), (std::vector<int64_t>{1})) << "its entry, first";
  s.Deviate();
  EXPECT_FALSE(s.EntersAlone(a));
}

// Match tries the tensor after the last one taken before any lookup: submissions in the
// period's order, out of it, wrapping to the next round, and one that differs from the
// expected tensor only in its shape each get their own answer.
TEST(ClientScheduleTest, EachSubmissionMatchesItsOwnTensorInOrAgainstThePeriodsOrder) {
  ClientSchedule s = TwoEntries();  // tensors a (0), b (1), c (2)
  EXPECT_EQ(s.Match(Req("a")), 0);
  s.Take(0, 0, kT0);
  EXPECT_EQ(s.Match(Req("b", 5)), -1) << "b, expected next, with another shape";
  EXPECT_EQ(s.Match(Req("c")), 2) << "out of order";
  s.Take(2, 1, kT0);
  EXPECT_EQ(s.Match(Req("a")), 0) << "after the period's last tensor, the first";
  EXPECT_EQ(s.Match(Req("c", 8)), -1);
  EXPECT_EQ(s.Match(Req("b", 8)), 1);
  s.Take(1, 2, kT0);
  EXPECT_EQ(s.Match(Req("c")), 2);
  EXPECT_EQ(s.Match(Req("other")), -1);
}

TEST(ClientScheduleTest, ASubmissionTheScheduleDoesNotNameIsADeviation) {
  ClientSchedule s = TwoEntries();
  EXPECT_FALSE(s.Submit(Req("other"), 0, kT0));
  EXPECT_FALSE(s.Submit(Req("a", 5), 1, kT0)) << "another shape";
  TensorRequest in_set = Req("a");
  in_set.process_set = 1;
  EXPECT_FALSE(s.Submit(in_set, 2, kT0));
  EXPECT_FALSE(s.deviated()) << "the caller decides to deviate";
}

TEST(ClientScheduleTest, DeviatingVotesVoidAtTheFirstEntryNotEntered) {
  ClientSchedule s = TwoEntries();
  ASSERT_TRUE(s.Submit(Req("a"), 0, kT0));
  ASSERT_TRUE(s.Submit(Req("b", 8), 1, kT0));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  ASSERT_TRUE(s.Submit(Req("c"), 2, kT0));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  ASSERT_TRUE(s.Submit(Req("a"), 3, kT0));  // position 2, not enterable yet
  ClientSchedule::Step step = s.Deviate();
  EXPECT_EQ(step.position, 2);
  EXPECT_TRUE(step.vote_void);
  EXPECT_EQ(step.response->names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(s.deviated());
  EXPECT_FALSE(s.Submit(Req("b", 8), 4, kT0));
  EXPECT_TRUE(s.TakeReady().empty());
}

TEST(ClientScheduleTest, EndingReturnsWhatWasSubmittedFromTheVoidEntryOnInSubmissionOrder) {
  ClientSchedule s = TwoEntries();
  ASSERT_TRUE(s.Submit(Req("c"), 10, kT0));
  ASSERT_TRUE(s.Submit(Req("b", 8), 11, kT0));
  ASSERT_TRUE(s.Submit(Req("a"), 12, kT0));
  ASSERT_EQ(s.TakeReady().size(), 2u);
  s.Completed(0, kT0);  // entry 0 went through; entry 1 (c) came back void
  std::vector<std::pair<uint64_t, TensorRequest>> back = s.Ended(1);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].first, 10u);
  EXPECT_EQ(back[0].second.name, "c");
  EXPECT_TRUE(s.deviated());
}

TEST(ClientScheduleTest, AWaitDeviatesOnlyForATensorWhoseEntryCannotBeEntered) {
  ClientSchedule s = TwoEntries();
  ASSERT_TRUE(s.Submit(Req("a"), 0, kT0));
  EXPECT_TRUE(s.WaitDeviates("a")) << "its entry also needs b";
  EXPECT_FALSE(s.WaitDeviates("c")) << "not submitted: nothing of this rank waits for it";
  ASSERT_TRUE(s.Submit(Req("b", 8), 1, kT0));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  EXPECT_FALSE(s.WaitDeviates("a")) << "entered: it completes when the others enter";
}

TEST(ClientScheduleTest, AScheduleNamingAnIdThisRankNeverLearnedIsIncomplete) {
  Schedule schedule{1, {Entry({"a"}, {1})}};
  ClientSchedule s(schedule, {});
  EXPECT_FALSE(s.complete());
  EXPECT_FALSE(s.Submit(Req("a"), 0, kT0));
}

std::vector<int64_t> Micros(const std::vector<absl::Duration>& ds) {
  std::vector<int64_t> out;
  for (absl::Duration d : ds) out.push_back(absl::ToInt64Microseconds(d));
  return out;
}

TEST(ClientScheduleTest, ProgressHasEachCompletedRoundsSubmissionAndCompletionTimes) {
  ClientSchedule s = TwoEntries();
  auto at = [](int ms) { return kT0 + absl::Milliseconds(ms); };
  // Round 0: b, a, c submitted at 1, 2, 3 ms; entries complete at 5 and 6 ms.
  ASSERT_TRUE(s.Submit(Req("b", 8), 0, at(1)));
  ASSERT_TRUE(s.Submit(Req("a"), 1, at(2)));
  ASSERT_TRUE(s.Submit(Req("c"), 2, at(3)));
  ASSERT_EQ(s.TakeReady().size(), 2u);
  s.Completed(0, at(5));
  // Round 1's a arrives before round 0 completes.
  ASSERT_TRUE(s.Submit(Req("a"), 3, at(5)));
  s.Completed(1, at(6));
  ScheduleProgress p = s.TakeProgress(at(10), absl::Seconds(1));
  EXPECT_EQ(p.schedule, 7);
  EXPECT_EQ(p.first_round, 0);
  // Tensors in period order (a, b, c), microseconds before the report.
  EXPECT_EQ(Micros(p.submitted_ago), (std::vector<int64_t>{8000, 9000, 7000}));
  EXPECT_EQ(Micros(p.completed_ago), (std::vector<int64_t>{5000, 4000}));
  EXPECT_TRUE(p.waiting.empty()) << "round 1's a waited 5 ms, not a second";
  EXPECT_FALSE(p.empty());

  // Nothing new: empty. Once a tensor waits a second, every waiting tensor is listed.
  EXPECT_TRUE(s.TakeProgress(at(20), absl::Seconds(1)).empty());
  ASSERT_TRUE(s.Submit(Req("c"), 4, at(900)));
  p = s.TakeProgress(at(1005), absl::Seconds(1));
  EXPECT_TRUE(p.submitted_ago.empty());
  ASSERT_EQ(p.waiting.size(), 2u);
  EXPECT_EQ(p.waiting[0].tensor, 0);  // a (by name)
  EXPECT_EQ(p.waiting[0].round, 1);
  EXPECT_EQ(p.waiting[0].submitted_ago, absl::Milliseconds(1000));
  EXPECT_EQ(p.waiting[1].tensor, 2);  // c
  EXPECT_EQ(p.waiting[1].submitted_ago, absl::Milliseconds(105));

  // Round 1 completes: reported from round 1 on.
  ASSERT_TRUE(s.Submit(Req("b", 8), 5, at(1010)));
  ASSERT_EQ(s.TakeReady().size(), 2u);
  s.Completed(2, at(1011));
  s.Completed(3, at(1012));
  p = s.TakeProgress(at(1012), absl::Seconds(1));
  EXPECT_EQ(p.first_round, 1);
  EXPECT_EQ(Micros(p.submitted_ago), (std::vector<int64_t>{1007000, 2000, 112000}));
  EXPECT_TRUE(p.waiting.empty());
}

// Rounds overlap (a round's first tensor is submitted before the round before it completes),
// and their times land in reused storage: each round reports its own times, whatever an
// earlier round left there.
TEST(ClientScheduleTest, ProgressOfManyOverlappingRoundsHasEachRoundsOwnTimes) {
  ClientSchedule s = TwoEntries();
  auto at = [](int64_t us) { return kT0 + absl::Microseconds(us); };
  constexpr int64_t kRounds = 20;
  uint64_t order = 0;
  ASSERT_TRUE(s.Submit(Req("a"), order++, at(0)));
  std::vector<int64_t> submitted, completed;  // expected, in report order (microseconds)
  for (int64_t r = 0; r < kRounds; ++r) {
    const int64_t t = 1000 * (r + 1);
    ASSERT_TRUE(s.Submit(Req("b", 8), order++, at(t + 1)));
    ASSERT_EQ(s.TakeReady().size(), 1u);
    s.Completed(2 * r, at(t + 2));
    // The next round's a before this round's c.
    ASSERT_TRUE(s.Submit(Req("a"), order++, at(t + 3)));
    ASSERT_TRUE(s.Submit(Req("c"), order++, at(t + 4 + r)));
    ASSERT_EQ(s.TakeReady().size(), 1u);
    s.Completed(2 * r + 1, at(t + 5 + r));
    const int64_t a = r == 0 ? 0 : t - 1000 + 3;
    submitted.insert(submitted.end(), {a, t + 1, t + 4 + r});
    completed.insert(completed.end(), {t + 2, t + 5 + r});
  }
  const int64_t now = 1000 * (kRounds + 2);
  ScheduleProgress p = s.TakeProgress(at(now), absl::Seconds(1));
  EXPECT_EQ(p.first_round, 0);
  for (int64_t& v : submitted) v = now - v;
  for (int64_t& v : completed) v = now - v;
  EXPECT_EQ(Micros(p.submitted_ago), submitted);
  EXPECT_EQ(Micros(p.completed_ago), completed);
}

// A completion seen between two submissions (the count of them changed) cuts the tensors
// apart: the later one may depend on a result. Tensors in period order: a, b, c.
TEST(ClientScheduleTest, ProgressNamesTheNeighboursARankSawACompletionBetween) {
  ClientSchedule s = TwoEntries();
  auto round = [&](uint64_t first, uint64_t order, std::vector<uint64_t> observed) {
    // Submitted c, b, a (not the period's order), seeing observed[n] completions before each.
    ASSERT_TRUE(s.Submit(Req("c"), order, kT0, first + observed[2]));
    ASSERT_TRUE(s.Submit(Req("b", 8), order + 1, kT0, first + observed[1]));
    ASSERT_TRUE(s.Submit(Req("a"), order + 2, kT0, first + observed[0]));
    auto ready = s.TakeReady();
    ASSERT_EQ(ready.size(), 2u);
    for (const ClientSchedule::Step& step : ready) s.Completed(step.position, kT0);
  };
  round(10, 0, {0, 0, 0});  // no completion seen in between
  EXPECT_TRUE(s.TakeProgress(kT0, absl::Seconds(1)).cut_after.empty());
  // One seen between c and b (submitted c, then b): b and c are cut apart, and so are the
  // round before's c and this round's a (submitted after it too).
  round(10, 3, {1, 1, 0});
  EXPECT_EQ(s.TakeProgress(kT0, absl::Seconds(1)).cut_after, (std::vector<int32_t>{1, 2}));
  // One seen between the round before's last tensor (c, at 10) and this round's first (a).
  round(11, 6, {0, 0, 0});
  EXPECT_EQ(s.TakeProgress(kT0, absl::Seconds(1)).cut_after, (std::vector<int32_t>{2}));
  // Between a and b, and b and c, of two rounds in one report: each cut once.
  round(11, 9, {0, 1, 2});
  round(13, 12, {0, 0, 1});
  EXPECT_EQ(s.TakeProgress(kT0, absl::Seconds(1)).cut_after, (std::vector<int32_t>{0, 1}));
}

TEST(ClientScheduleTest, BlockedForCountsFromTheLastSubmissionOfTheOldestEnteredEntry) {
  ClientSchedule s = TwoEntries();
  auto at = [](int ms) { return kT0 + absl::Milliseconds(ms); };
  ASSERT_TRUE(s.Submit(Req("a"), 0, at(0)));
  EXPECT_EQ(s.BlockedFor(at(50)), absl::ZeroDuration()) << "entry 0 not entered: not blocked";
  ASSERT_TRUE(s.Submit(Req("b", 8), 1, at(10)));
  ASSERT_TRUE(s.Submit(Req("c"), 2, at(20)));
  ASSERT_EQ(s.TakeReady().size(), 2u);
  EXPECT_EQ(s.BlockedFor(at(50)), absl::Milliseconds(40)) << "entry 0, entered at 10 ms";
  s.Completed(0, at(60));
  EXPECT_EQ(s.BlockedFor(at(70)), absl::Milliseconds(50)) << "entry 1, entered at 20 ms";
  s.Completed(1, at(80));
  EXPECT_EQ(s.BlockedFor(at(90)), absl::ZeroDuration());
}

TEST(ClientScheduleTest, ProgressKeepsAtMostItsLimitOfConsecutiveRounds) {
  Schedule schedule{3, {Entry({"x"}, {1})}};
  ClientSchedule s(schedule, {{"x", Req("x")}});
  const int64_t limit = static_cast<int64_t>(ClientSchedule::kMaxReportedTensors);
  for (int64_t i = 0; i < limit + 5; ++i) {
    ASSERT_TRUE(s.Submit(Req("x"), static_cast<uint64_t>(i), kT0));
    ASSERT_EQ(s.TakeReady().size(), 1u);
    s.Completed(i, kT0);
  }
  ScheduleProgress p = s.TakeProgress(kT0, absl::Seconds(1));
  EXPECT_EQ(p.first_round, 0);
  EXPECT_EQ(static_cast<int64_t>(p.submitted_ago.size()), limit);
  // After the report, the next round starts the next one.
  ASSERT_TRUE(s.Submit(Req("x"), 1u << 20, kT0));
  ASSERT_EQ(s.TakeReady().size(), 1u);
  s.Completed(limit + 5, kT0);
  p = s.TakeProgress(kT0, absl::Seconds(1));
  EXPECT_EQ(p.first_round, limit + 5);
  EXPECT_EQ(p.submitted_ago.size(), 1u);
}

}  // namespace
}  // namespace troika::internal
