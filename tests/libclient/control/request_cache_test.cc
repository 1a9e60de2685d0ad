#include "libclient/control/request_cache.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TensorRequest Request(const std::string& name, int64_t elements = 4) {
  TensorRequest r;
  r.rank = 1;
  r.name = name;
  r.shape = {elements};
  return r;
}

// A down message announcing `ids` for `names` (one fused response).
DownMessage Announce(std::vector<std::string> names, std::vector<int32_t> ids) {
  DownMessage m;
  Response r;
  r.names = std::move(names);
  r.cache_ids = std::move(ids);
  m.responses.push_back(r);
  return m;
}

// A down message with one response sent as ids alone (every rank knows them).
DownMessage KnownIds(std::vector<int32_t> ids) {
  DownMessage m;
  Response r;
  r.cache_ids = std::move(ids);
  r.ids_known = true;
  m.responses.push_back(r);
  return m;
}

class RequestCacheTest : public ::testing::Test {
 protected:
  // Sends `request` and applies `down`; returns what went up.
  TensorRequest RoundTrip(const TensorRequest& request, DownMessage down) {
    TensorRequest sent = cache_.Compress(request);
    std::vector<TensorRequest> resend;
    EXPECT_TRUE(cache_.Apply(1, down, &resend).ok());
    EXPECT_THAT(resend, IsEmpty());
    return sent;
  }
  RequestCache cache_;
};

TEST_F(RequestCacheTest, RepeatedRequestGoesUpAsItsIdAlone) {
  EXPECT_EQ(RoundTrip(Request("a"), Announce({"a"}, {7})), Request("a"));  // first: in full
  TensorRequest sent = cache_.Compress(Request("a"));
  EXPECT_EQ(sent.cache_id, 7);
  EXPECT_EQ(sent.rank, 1);
  EXPECT_TRUE(sent.name.empty());
  EXPECT_TRUE(sent.shape.empty());
}

TEST_F(RequestCacheTest, ChangedRequestGoesUpInFull) {
  RoundTrip(Request("a"), Announce({"a"}, {7}));
  EXPECT_EQ(cache_.Compress(Request("a", 5)), Request("a", 5));
}

TEST_F(RequestCacheTest, ResponsesWithoutIdsTeachNothing) {
  RoundTrip(Request("a"), Announce({"a"}, {}));
  EXPECT_EQ(cache_.Compress(Request("a")).cache_id, 0);
  EXPECT_EQ(cache_.size(), 0);
}

TEST_F(RequestCacheTest, KnownIdsRestoreNames) {
  RoundTrip(Request("a"), Announce({"a", "b"}, {7, 8}));  // "b" was not ours: not learned
  cache_.Compress(Request("a"));
  DownMessage down = KnownIds({7});
  std::vector<TensorRequest> resend;
  ASSERT_TRUE(cache_.Apply(1, down, &resend).ok());
  EXPECT_THAT(down.responses[0].names, ElementsAre("a"));

  DownMessage bad = KnownIds({8});
  absl::Status s = cache_.Apply(1, bad, &resend);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cache id 8"));
}

TEST_F(RequestCacheTest, EndedIdsAreForgottenAfterTheResponsesOfTheirMessage) {
  RoundTrip(Request("a"), Announce({"a"}, {7}));
  cache_.Compress(Request("a"));
  DownMessage down = KnownIds({7});
  down.evicted_cache_ids = {7};
  std::vector<TensorRequest> resend;
  ASSERT_TRUE(cache_.Apply(1, down, &resend).ok());  // resolved before being forgotten
  EXPECT_THAT(down.responses[0].names, ElementsAre("a"));
  EXPECT_EQ(cache_.Compress(Request("a")).cache_id, 0);
}

TEST_F(RequestCacheTest, MissResendsThatRanksRequestInFull) {
  RoundTrip(Request("a"), Announce({"a"}, {7}));
  ASSERT_EQ(cache_.Compress(Request("a")).cache_id, 7);
  DownMessage down;
  down.misses = {{0, 7}, {1, 7}};  // rank 0's miss is not ours
  std::vector<TensorRequest> resend;
  ASSERT_TRUE(cache_.Apply(1, down, &resend).ok());
  EXPECT_THAT(resend, ElementsAre(Request("a")));
  EXPECT_EQ(cache_.Compress(Request("a")).cache_id, 0);  // the id is gone
}

TEST_F(RequestCacheTest, NewIdForTheSameNameReplacesTheOld) {
  RoundTrip(Request("a"), Announce({"a"}, {7}));
  RoundTrip(Request("a", 5), Announce({"a"}, {9}));
  EXPECT_EQ(cache_.size(), 1);
  EXPECT_EQ(cache_.Compress(Request("a", 5)).cache_id, 9);
}

}  // namespace
}  // namespace troika::internal
