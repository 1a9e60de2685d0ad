// Bucketing on its own: what the reports teach about neighbouring tensors, the grouping of a
// period that follows, and the fewest collectives any rotation of the period runs in.

#include "coordinator/negotiation/bucketing.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using Grouping = std::vector<std::vector<std::string>>;

// Allreduces of the tensors `grouping` names, a response per group.
std::vector<Response> Period(const Grouping& grouping) {
  std::vector<Response> period;
  for (const std::vector<std::string>& names : grouping) period.emplace_back().names = names;
  return period;
}

Grouping Names(const std::vector<Response>& entries) {
  Grouping names;
  for (const Response& entry : entries) names.push_back(entry.names);
  return names;
}

class BucketingTest : public ::testing::Test {
 protected:
  Negotiator whole_job_{2, test_util::NoHold()};
  Bucketing bucketing_{/*enabled=*/true, whole_job_};
};

TEST_F(BucketingTest, NothingLearntKeepsNegotiationsFusion) {
  const std::vector<Response> period = Period({{"a"}, {"b", "c"}, {"d"}});
  EXPECT_EQ(Names(bucketing_.Bucket(period)), (Grouping{{"a"}, {"b", "c"}, {"d"}}));
  EXPECT_EQ(bucketing_.Fewest(period), 3u);
}

// Ranks wait for b before they submit c, and for the step's results before a.
TEST_F(BucketingTest, FewestIsWhatTheRotationThatStartsAfterAWaitRunsIn) {
  bucketing_.Learn({"a", "b", "c", "d"}, {1, 3});
  const std::vector<Response> aligned = Period({{"a", "b"}, {"c"}, {"d"}});
  EXPECT_EQ(Names(bucketing_.Bucket(aligned)), (Grouping{{"a", "b"}, {"c", "d"}}));
  EXPECT_EQ(bucketing_.Fewest(aligned), 2u);
  // The same step as a period that ends between c and d: nothing fuses across its end.
  const std::vector<Response> rotated = Period({{"d"}, {"a", "b"}, {"c"}});
  EXPECT_EQ(bucketing_.Bucket(rotated).size(), 3u);
  EXPECT_EQ(bucketing_.Fewest(rotated), 2u);
  // A period in which every pair may share a collective runs in one, from any rotation.
  bucketing_.Learn({"x", "y"}, {});
  EXPECT_EQ(Names(bucketing_.Bucket(Period({{"y"}, {"x"}}))), (Grouping{{"y", "x"}}));
  EXPECT_EQ(bucketing_.Fewest(Period({{"y"}, {"x"}})), 1u);
}

TEST_F(BucketingTest, APairOnceSeparableNeverJoinsAndEntriesThatDoNotFuseStayApart) {
  bucketing_.Learn({"a", "b", "c"}, {2});
  bucketing_.Learn({"a", "b", "c"}, {0, 2});
  bucketing_.Learn({"a", "b", "c"}, {2});
  EXPECT_EQ(Names(bucketing_.Bucket(Period({{"a"}, {"b"}, {"c"}}))), (Grouping{{"a"}, {"b", "c"}}));
  // An entry holding a separable pair (negotiation fused it) takes no neighbour either.
  EXPECT_EQ(bucketing_.Fewest(Period({{"a", "b"}, {"c"}})), 2u);
  std::vector<Response> period = Period({{"b"}, {"c"}});
  period[1].dtype = DataType::kFloat64;
  EXPECT_EQ(bucketing_.Bucket(period).size(), 2u);
  EXPECT_EQ(bucketing_.Fewest(period), 2u);
}

TEST_F(BucketingTest, TwoYoungEndsTurnItOffAsDoesBeingDisabled) {
  bucketing_.Learn({"a", "b"}, {});
  const std::vector<Response> period = Period({{"a"}, {"b"}});
  EXPECT_FALSE(bucketing_.EndedYoung());
  EXPECT_EQ(bucketing_.Bucket(period).size(), 1u);
  EXPECT_TRUE(bucketing_.EndedYoung());
  EXPECT_EQ(bucketing_.Bucket(period).size(), 2u);
  EXPECT_EQ(bucketing_.Fewest(period), 2u);

  Bucketing off(/*enabled=*/false, whole_job_);
  off.Learn({"a", "b"}, {});
  EXPECT_EQ(off.Bucket(period).size(), 2u);
  EXPECT_EQ(off.Fewest(period), 2u);
}

}  // namespace
}  // namespace troika::coordinator
