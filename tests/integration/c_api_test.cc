// The C ABI end to end: two ranks as threads through a real coordinator.

#include "troika/c_api.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

TEST(CApiTest, CollectivesAndErrorsThroughTheCAbi) {
  TestCluster cluster;
  const std::string address = cluster.address();
  OnEveryRank(2, [&](int rank) {
    troika_context* ctx = nullptr;
    ASSERT_EQ(troika_init(address.c_str(), "capi", rank, 2, &ctx), 0) << troika_last_error();
    EXPECT_EQ(troika_rank(ctx), rank);
    EXPECT_EQ(troika_size(ctx), 2);
    EXPECT_EQ(troika_local_size(ctx), 2);

    float grad[3] = {1.0f + rank, 2.0f, 3.0f};
    int64_t shape[1] = {3};
    troika_handle* h = nullptr;
    ASSERT_EQ(troika_allreduce(ctx, "g", grad, grad, TROIKA_FLOAT32, shape, 1, TROIKA_AVERAGE, 1.0,
                               1.0, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(troika_handle_poll(h), 1);
    EXPECT_FLOAT_EQ(grad[0], 1.5f);
    EXPECT_FLOAT_EQ(grad[2], 3.0f);
    troika_handle_free(h);

    // Allgather: rank r contributes r + 1 rows.
    std::vector<int32_t> rows(rank + 1, rank);
    int64_t gshape[1] = {rank + 1};
    ASSERT_EQ(troika_allgather(ctx, "ag", rows.data(), TROIKA_INT32, gshape, 1, &h), 0);
    ASSERT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    size_t bytes = 0;
    const int32_t* out = static_cast<const int32_t*>(troika_handle_output(h, &bytes));
    int64_t dims[4];
    ASSERT_EQ(troika_handle_output_shape(h, dims, 4), 1);
    EXPECT_EQ(dims[0], 3);
    ASSERT_EQ(bytes, 3 * sizeof(int32_t));
    EXPECT_EQ(out[0], 0);
    EXPECT_EQ(out[1], 1);
    EXPECT_EQ(out[2], 1);
    troika_handle_free(h);

    // An invalid request fails on its handle with a message.
    ASSERT_EQ(troika_broadcast(ctx, "b", grad, grad, TROIKA_FLOAT32, shape, 1, 7, &h), 0);
    EXPECT_EQ(troika_handle_wait(h), 3);  // INVALID_ARGUMENT
    EXPECT_NE(std::string(troika_last_error()).find("root rank 7"), std::string::npos);
    troika_handle_free(h);

    ASSERT_EQ(troika_barrier(ctx, &h), 0);
    EXPECT_EQ(troika_handle_wait(h), 0);
    troika_handle_free(h);
    EXPECT_EQ(troika_shutdown(ctx), 0);
    troika_free(ctx);
  });
}

TEST(CApiTest, InitFromEnvironmentNamesMissingVariables) {
  unsetenv("TROIKA_COORDINATOR");
  troika_context* ctx = nullptr;
  EXPECT_EQ(troika_init_from_env(&ctx), 3);
  EXPECT_NE(std::string(troika_last_error()).find("TROIKA_COORDINATOR"), std::string::npos);
  EXPECT_EQ(ctx, nullptr);
}

}  // namespace
}  // namespace troika::testing
