#include "coordinator/negotiation/response_cache.h"

#include <string>
#include <vector>

#include "coordinator/negotiation/negotiator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

// Every rank's request for one allreduce.
std::vector<TensorRequest> Ready(const std::string& name, int size, int64_t elements = 4) {
  std::vector<TensorRequest> out(size);
  for (int r = 0; r < size; ++r) {
    out[r].rank = r;
    out[r].name = name;
    out[r].shape = {elements};
  }
  return out;
}

// The request `rank` submitted under `id`, or nullptr if the id ended (ResponseCache::Find).
const TensorRequest* Resolve(ResponseCache& cache, int32_t id, int rank) {
  std::shared_ptr<const CachedTensor> tensor = cache.Find(id);
  return tensor ? &tensor->by_rank.at(rank) : nullptr;  // the cache keeps it alive
}

TEST(ResponseCacheTest, IdenticalRequestsHitTheSameId) {
  ResponseCache cache(8);
  ResponseCache::Assignment first = cache.Put(Ready("a", 2));
  EXPECT_NE(first.id, 0);
  EXPECT_FALSE(first.hit);
  ResponseCache::Assignment again = cache.Put(Ready("a", 2));
  EXPECT_EQ(again.id, first.id);
  EXPECT_TRUE(again.hit);
  const TensorRequest* resolved = Resolve(cache, first.id, 1);
  ASSERT_NE(resolved, nullptr);
  EXPECT_EQ(*resolved, Ready("a", 2)[1]);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_THAT(cache.TakeEnded(), IsEmpty());
}

TEST(ResponseCacheTest, ChangedRequestEndsTheOldIdAndGetsANewOne) {
  ResponseCache cache(8);
  const int32_t old_id = cache.Put(Ready("a", 2, 4)).id;
  ResponseCache::Assignment changed = cache.Put(Ready("a", 2, 5));
  EXPECT_FALSE(changed.hit);
  EXPECT_NE(changed.id, old_id);
  EXPECT_THAT(cache.TakeEnded(), ElementsAre(old_id));
  EXPECT_EQ(Resolve(cache, old_id, 0), nullptr);
  EXPECT_EQ(cache.stats().resends, 1);
  ASSERT_NE(Resolve(cache, changed.id, 0), nullptr);
  EXPECT_EQ(Resolve(cache, changed.id, 0)->shape, std::vector<int64_t>{5});
  EXPECT_EQ(cache.stats().entries, 1);
}

TEST(ResponseCacheTest, FullCacheEvictsTheLeastRecentlyUsedEntry) {
  ResponseCache cache(2);
  const int32_t a = cache.Put(Ready("a", 1)).id;
  const int32_t b = cache.Put(Ready("b", 1)).id;
  ASSERT_NE(Resolve(cache, a, 0), nullptr);  // a is now more recent than b
  const int32_t c = cache.Put(Ready("c", 1)).id;
  EXPECT_THAT(cache.TakeEnded(), ElementsAre(b));
  EXPECT_NE(Resolve(cache, a, 0), nullptr);
  EXPECT_EQ(Resolve(cache, b, 0), nullptr);
  EXPECT_NE(Resolve(cache, c, 0), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().entries, 2);
  // An evicted tensor coming back is a miss with a fresh id, never the old one.
  const int32_t b2 = cache.Put(Ready("b", 1)).id;
  EXPECT_NE(b2, b);
}

TEST(ResponseCacheTest, CapacityZeroAssignsNothing) {
  ResponseCache cache(0);
  EXPECT_EQ(cache.Put(Ready("a", 2)).id, 0);
  EXPECT_EQ(cache.Put(Ready("a", 2)).id, 0);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_THAT(cache.TakeEnded(), IsEmpty());
}

TEST(ResponseCacheTest, BarriersAreNotCached) {
  ResponseCache cache(4);
  std::vector<TensorRequest> barrier = Ready("troika/barrier/0", 2, 0);
  for (TensorRequest& r : barrier) r.type = CollectiveType::kBarrier;
  EXPECT_EQ(cache.Put(barrier).id, 0);
}

TEST(ResponseCacheTest, FailedAgreementEndsTheEntry) {
  ResponseCache cache(4);
  const int32_t id = cache.Put(Ready("a", 2)).id;
  cache.Erase("a");
  cache.Erase("never-cached");
  EXPECT_THAT(cache.TakeEnded(), ElementsAre(id));
  EXPECT_EQ(Resolve(cache, id, 0), nullptr);
}

// The negotiator's side: ids go down with responses, come back as requests, and fused
// responses of known ids travel as ids alone.
TEST(ResponseCacheTest, NegotiatorResolvesIdsAndMarksKnownResponses) {
  NegotiatorOptions options;
  options.cycle_time = absl::ZeroDuration();
  Negotiator n(2, options);
  auto submit_all = [&](const std::vector<TensorRequest>& requests) {
    for (const TensorRequest& r : requests) ASSERT_TRUE(n.Submit(r, kT0).ok());
  };
  submit_all(Ready("a", 2));
  submit_all(Ready("b", 2));
  absl::Time next;
  std::vector<Response> first = n.Poll(kT0, &next);
  ASSERT_EQ(first.size(), 1u);  // fused
  ASSERT_EQ(first[0].cache_ids.size(), 2u);
  EXPECT_FALSE(first[0].ids_known);  // new ids: the names travel with them

  for (int32_t id : first[0].cache_ids) {
    for (int rank = 0; rank < 2; ++rank) {
      absl::StatusOr<bool> known = n.SubmitCached(rank, id, kT0);
      ASSERT_TRUE(known.ok()) << known.status();
      EXPECT_TRUE(*known);
    }
  }
  std::vector<Response> second = n.Poll(kT0, &next);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_THAT(second[0].names, ElementsAre("a", "b"));
  EXPECT_EQ(second[0].cache_ids, first[0].cache_ids);
  EXPECT_TRUE(second[0].ids_known);
  EXPECT_EQ(n.cache_stats().hits, 2);

  EXPECT_FALSE(*n.SubmitCached(0, 999, kT0)) << "an ended id is a miss";
  TensorRequest unknown;
  unknown.cache_id = 999;
  EXPECT_FALSE(n.Submit(unknown, kT0).ok());  // an unresolved id is never negotiated
}

TEST(ResponseCacheTest, IdAndFullRequestOfOneTensorNegotiateTogether) {
  // Rank 0 sends the id, rank 1 the request in full with a changed shape: the tensor is
  // negotiated from both, the mismatch is reported, and the entry ends.
  NegotiatorOptions options;
  options.cycle_time = absl::ZeroDuration();
  Negotiator n(2, options);
  for (const TensorRequest& r : Ready("a", 2)) ASSERT_TRUE(n.Submit(r, kT0).ok());
  absl::Time next;
  const int32_t id = n.Poll(kT0, &next).at(0).cache_ids.at(0);
  ASSERT_TRUE(*n.SubmitCached(0, id, kT0));
  std::vector<TensorRequest> changed = Ready("a", 2, 7);
  ASSERT_TRUE(n.Submit(changed[1], kT0).ok());
  std::vector<Response> responses = n.Poll(kT0, &next);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_THAT(responses[0].error, ::testing::HasSubstr("Mismatched allreduce shapes"));
  EXPECT_FALSE(*n.SubmitCached(1, id, kT0)) << "a failed tensor's id ends";
  // The same id twice from one rank is refused like any name in flight.
  for (const TensorRequest& r : Ready("b", 2)) ASSERT_TRUE(n.Submit(r, kT0).ok());
  const int32_t b = n.Poll(kT0, &next).at(0).cache_ids.at(0);
  ASSERT_TRUE(*n.SubmitCached(0, b, kT0));
  EXPECT_EQ(n.SubmitCached(0, b, kT0).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(ResponseCacheTest, NegotiatorMismatchEndsTheEntryAndReportsIt) {
  NegotiatorOptions options;
  options.cycle_time = absl::ZeroDuration();
  Negotiator n(2, options);
  for (const TensorRequest& r : Ready("a", 2)) ASSERT_TRUE(n.Submit(r, kT0).ok());
  absl::Time next;
  const int32_t id = n.Poll(kT0, &next).at(0).cache_ids.at(0);
  std::vector<TensorRequest> mismatched = Ready("a", 2);
  mismatched[1].shape = {7};
  for (const TensorRequest& r : mismatched) ASSERT_TRUE(n.Submit(r, kT0).ok());
  std::vector<Response> out = n.Poll(kT0, &next);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_error());
  EXPECT_THAT(out[0].cache_ids, IsEmpty());
  EXPECT_THAT(n.TakeEndedCacheIds(), ElementsAre(id));
}

}  // namespace
}  // namespace troika::coordinator
