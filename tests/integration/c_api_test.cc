// The C ABI end to end: two ranks as threads through a real coordinator.

#include "troika/c_api.h"

#include <algorithm>
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

    // The dtypes added for Horovod's: int16 and uint16 reduce as integers, bool's sum is a
    // logical or and its product a logical and, and average on bool is refused.
    int16_t shorts[3] = {static_cast<int16_t>(-300 * (rank + 1)), 32767, 5};
    ASSERT_EQ(troika_allreduce(ctx, "i16", shorts, shorts, TROIKA_INT16, shape, 1, TROIKA_SUM, 1.0,
                               1.0, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(shorts[0], -900);
    EXPECT_EQ(shorts[1], -2);  // wraps: 2 * 32767 - 65536
    EXPECT_EQ(shorts[2], 10);
    troika_handle_free(h);
    uint16_t ushorts[3] = {static_cast<uint16_t>(60000 + rank), 7, 0};
    ASSERT_EQ(troika_allreduce(ctx, "u16", ushorts, ushorts, TROIKA_UINT16, shape, 1, TROIKA_MAX,
                               1.0, 1.0, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(ushorts[0], 60001);
    EXPECT_EQ(ushorts[1], 7);
    troika_handle_free(h);
    uint8_t flags[3] = {static_cast<uint8_t>(rank), 0, 1};
    uint8_t any[3], all[3];
    ASSERT_EQ(
        troika_allreduce(ctx, "any", flags, any, TROIKA_BOOL, shape, 1, TROIKA_SUM, 1.0, 1.0, &h),
        0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(any[0], 1);
    EXPECT_EQ(any[1], 0);
    EXPECT_EQ(any[2], 1);
    troika_handle_free(h);
    ASSERT_EQ(troika_allreduce(ctx, "all", flags, all, TROIKA_BOOL, shape, 1, TROIKA_PRODUCT, 1.0,
                               1.0, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(all[0], 0);
    EXPECT_EQ(all[1], 0);
    EXPECT_EQ(all[2], 1);
    troika_handle_free(h);
    ASSERT_EQ(troika_allreduce(ctx, "avg", flags, flags, TROIKA_BOOL, shape, 1, TROIKA_AVERAGE, 1.0,
                               1.0, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 3);  // INVALID_ARGUMENT
    EXPECT_NE(std::string(troika_last_error()).find("average is not defined for bool"),
              std::string::npos)
        << troika_last_error();
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

// The code of a call, and whether troika_last_error() then contains `text`.
#define EXPECT_INVALID(call, text)                                            \
  do {                                                                        \
    EXPECT_EQ((call), 3) << #call;                                            \
    EXPECT_NE(std::string(troika_last_error()).find(text), std::string::npos) \
        << #call << ": " << troika_last_error();                              \
  } while (0)

// As EXPECT_INVALID for an operation that was submitted: its handle fails.
#define EXPECT_HANDLE_INVALID(call, text)                         \
  do {                                                            \
    troika_handle* h_ = nullptr;                                  \
    ASSERT_EQ((call), 0) << #call << ": " << troika_last_error(); \
    ASSERT_NE(h_, nullptr);                                       \
    EXPECT_INVALID(troika_handle_wait(h_), text);                 \
    troika_handle_free(h_);                                       \
  } while (0)

TEST(CApiTest, EveryEntryPointRefusesNullAndNegativeArguments) {
  // Before any context exists.
  troika_context* none = reinterpret_cast<troika_context*>(0x1);
  EXPECT_INVALID(troika_init(nullptr, "j", 0, 1, &none), "coordinator is NULL");
  EXPECT_EQ(none, nullptr);
  EXPECT_INVALID(troika_init("127.0.0.1:1", nullptr, 0, 1, &none), "job is NULL");
  EXPECT_INVALID(troika_init("127.0.0.1:1", "j", 0, 1, nullptr), "out is NULL");
  EXPECT_INVALID(troika_init_from_env(nullptr), "out is NULL");

  // A NULL context everywhere one is taken; queries return -1.
  troika_handle* h = reinterpret_cast<troika_handle*>(0x1);
  float x[2] = {1, 2};
  int64_t shape[1] = {2};
  EXPECT_INVALID(
      troika_allreduce(nullptr, "t", x, x, TROIKA_FLOAT32, shape, 1, TROIKA_SUM, 1, 1, &h),
      "troika_allreduce 't': ctx is NULL");
  EXPECT_EQ(h, nullptr);
  EXPECT_INVALID(troika_allgather(nullptr, "t", x, TROIKA_FLOAT32, shape, 1, &h), "ctx is NULL");
  EXPECT_INVALID(troika_broadcast(nullptr, "t", x, x, TROIKA_FLOAT32, shape, 1, 0, &h),
                 "ctx is NULL");
  EXPECT_INVALID(troika_alltoall(nullptr, "t", x, TROIKA_FLOAT32, shape, 1, nullptr, 0, &h),
                 "ctx is NULL");
  EXPECT_INVALID(
      troika_reducescatter(nullptr, "t", x, TROIKA_FLOAT32, shape, 1, TROIKA_SUM, 1, 1, &h),
      "ctx is NULL");
  EXPECT_INVALID(troika_barrier(nullptr, &h), "ctx is NULL");
  EXPECT_INVALID(troika_join(nullptr, &h), "ctx is NULL");
  EXPECT_INVALID(troika_shutdown(nullptr), "ctx is NULL");
  EXPECT_INVALID(troika_mark_step(nullptr, nullptr), "ctx is NULL");
  EXPECT_INVALID(troika_grouped_allreduce(nullptr, "g", 0, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, TROIKA_SUM, 1, 1, nullptr),
                 "ctx is NULL");
  EXPECT_EQ(troika_rank(nullptr), -1);
  EXPECT_NE(std::string(troika_last_error()).find("troika_rank: ctx is NULL"), std::string::npos);
  EXPECT_EQ(troika_size(nullptr), -1);
  EXPECT_EQ(troika_local_rank(nullptr), -1);
  EXPECT_EQ(troika_local_size(nullptr), -1);
  EXPECT_EQ(troika_cross_rank(nullptr), -1);
  EXPECT_EQ(troika_cross_size(nullptr), -1);

  // A NULL handle everywhere one is taken.
  EXPECT_EQ(troika_handle_poll(nullptr), -1);
  EXPECT_NE(std::string(troika_last_error()).find("handle is NULL"), std::string::npos);
  EXPECT_INVALID(troika_handle_wait(nullptr), "troika_handle_wait: handle is NULL");
  size_t bytes = 99;
  EXPECT_EQ(troika_handle_output(nullptr, &bytes), nullptr);
  EXPECT_EQ(bytes, 0u);
  EXPECT_NE(std::string(troika_last_error()).find("handle is NULL"), std::string::npos);
  int64_t dims[2];
  EXPECT_EQ(troika_handle_output_shape(nullptr, dims, 2), -1);
  EXPECT_EQ(troika_handle_received_splits(nullptr, dims, 2), -1);
  EXPECT_EQ(troika_handle_joined_last_rank(nullptr), -1);
  EXPECT_NE(std::string(troika_last_error()).find("handle is NULL"), std::string::npos);
  troika_handle_free(nullptr);  // no-ops
  troika_free(nullptr);
}

TEST(CApiTest, OperationsRefuseBadArgumentsAndTheJobGoesOn) {
  TestCluster cluster;
  const std::string address = cluster.address();
  OnEveryRank(2, [&](int rank) {
    troika_context* ctx = nullptr;
    ASSERT_EQ(troika_init(address.c_str(), "capi-bad", rank, 2, &ctx), 0) << troika_last_error();
    float x[4] = {1, 2, 3, 4};
    int64_t shape[2] = {2, 2};
    int64_t splits[2] = {1, 1};
    troika_handle* h = reinterpret_cast<troika_handle*>(0x1);

    // NULL name: refused before any C++ string is made from it.
    EXPECT_INVALID(
        troika_allreduce(ctx, nullptr, x, x, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, &h),
        "troika_allreduce: name is NULL");
    EXPECT_EQ(h, nullptr);
    EXPECT_INVALID(troika_allgather(ctx, nullptr, x, TROIKA_FLOAT32, shape, 2, &h), "name is NULL");
    EXPECT_INVALID(troika_broadcast(ctx, nullptr, x, x, TROIKA_FLOAT32, shape, 2, 0, &h),
                   "name is NULL");
    EXPECT_INVALID(troika_alltoall(ctx, nullptr, x, TROIKA_FLOAT32, shape, 2, nullptr, 0, &h),
                   "name is NULL");
    EXPECT_INVALID(
        troika_reducescatter(ctx, nullptr, x, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, &h),
        "name is NULL");

    // NULL handle out-parameter.
    EXPECT_INVALID(
        troika_allreduce(ctx, "t", x, x, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, nullptr),
        "troika_allreduce 't': handle (the out-parameter) is NULL");
    EXPECT_INVALID(troika_allgather(ctx, "t", x, TROIKA_FLOAT32, shape, 2, nullptr),
                   "handle (the out-parameter) is NULL");
    EXPECT_INVALID(troika_broadcast(ctx, "t", x, x, TROIKA_FLOAT32, shape, 2, 0, nullptr),
                   "handle (the out-parameter) is NULL");
    EXPECT_INVALID(troika_alltoall(ctx, "t", x, TROIKA_FLOAT32, shape, 2, nullptr, 0, nullptr),
                   "handle (the out-parameter) is NULL");
    EXPECT_INVALID(
        troika_reducescatter(ctx, "t", x, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, nullptr),
        "handle (the out-parameter) is NULL");
    EXPECT_INVALID(troika_barrier(ctx, nullptr), "handle (the out-parameter) is NULL");
    EXPECT_INVALID(troika_join(ctx, nullptr), "handle (the out-parameter) is NULL");

    // NULL shape with dims, negative ndim; the same for alltoall's splits.
    EXPECT_INVALID(
        troika_allreduce(ctx, "t", x, x, TROIKA_FLOAT32, nullptr, 2, TROIKA_SUM, 1, 1, &h),
        "troika_allreduce 't': shape is NULL but ndim is 2");
    EXPECT_INVALID(
        troika_allreduce(ctx, "t", x, x, TROIKA_FLOAT32, shape, -1, TROIKA_SUM, 1, 1, &h),
        "troika_allreduce 't': ndim is -1");
    EXPECT_INVALID(troika_allgather(ctx, "t", x, TROIKA_FLOAT32, nullptr, 1, &h),
                   "shape is NULL but ndim is 1");
    EXPECT_INVALID(troika_allgather(ctx, "t", x, TROIKA_FLOAT32, shape, -3, &h), "ndim is -3");
    EXPECT_INVALID(troika_broadcast(ctx, "t", x, x, TROIKA_FLOAT32, nullptr, 1, 0, &h),
                   "shape is NULL");
    EXPECT_INVALID(troika_broadcast(ctx, "t", x, x, TROIKA_FLOAT32, shape, -1, 0, &h), "ndim is");
    EXPECT_INVALID(troika_alltoall(ctx, "t", x, TROIKA_FLOAT32, nullptr, 1, nullptr, 0, &h),
                   "shape is NULL");
    EXPECT_INVALID(troika_alltoall(ctx, "t", x, TROIKA_FLOAT32, shape, -1, nullptr, 0, &h),
                   "ndim is");
    EXPECT_INVALID(troika_alltoall(ctx, "t", x, TROIKA_FLOAT32, shape, 2, nullptr, 2, &h),
                   "troika_alltoall 't': splits is NULL but nsplits is 2");
    EXPECT_INVALID(troika_alltoall(ctx, "t", x, TROIKA_FLOAT32, shape, 2, splits, -2, &h),
                   "nsplits is -2");
    EXPECT_INVALID(
        troika_reducescatter(ctx, "t", x, TROIKA_FLOAT32, nullptr, 2, TROIKA_SUM, 1, 1, &h),
        "shape is NULL");
    EXPECT_INVALID(
        troika_reducescatter(ctx, "t", x, TROIKA_FLOAT32, shape, -1, TROIKA_SUM, 1, 1, &h),
        "ndim is");

    // Grouped: every array, each name and shape.
    const char* names[1] = {"gt"};
    const void* ins[1] = {x};
    void* outs[1] = {x};
    int dtypes[1] = {TROIKA_FLOAT32};
    const int64_t* shapes[1] = {shape};
    int ndims[1] = {2};
    troika_handle* hs[1] = {nullptr};
    EXPECT_INVALID(troika_grouped_allreduce(ctx, nullptr, 1, names, ins, outs, dtypes, shapes,
                                            ndims, TROIKA_SUM, 1, 1, hs),
                   "group is NULL");
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", -1, names, ins, outs, dtypes, shapes, ndims,
                                            TROIKA_SUM, 1, 1, hs),
                   "n is -1");
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", 1, nullptr, ins, outs, dtypes, shapes, ndims,
                                            TROIKA_SUM, 1, 1, hs),
                   "'g': names is NULL but n is 1");
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", 1, names, ins, outs, dtypes, nullptr, ndims,
                                            TROIKA_SUM, 1, 1, hs),
                   "shapes is NULL");
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", 1, names, ins, outs, dtypes, shapes, ndims,
                                            TROIKA_SUM, 1, 1, nullptr),
                   "handles is NULL");
    const char* null_names[1] = {nullptr};
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", 1, null_names, ins, outs, dtypes, shapes,
                                            ndims, TROIKA_SUM, 1, 1, hs),
                   "names[0] is NULL");
    int bad_ndims[1] = {-1};
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", 1, names, ins, outs, dtypes, shapes,
                                            bad_ndims, TROIKA_SUM, 1, 1, hs),
                   "tensor 'gt': ndim is -1");
    const int64_t* null_shapes[1] = {nullptr};
    EXPECT_INVALID(troika_grouped_allreduce(ctx, "g", 1, names, ins, outs, dtypes, null_shapes,
                                            ndims, TROIKA_SUM, 1, 1, hs),
                   "shape is NULL but ndim is 2");

    // NULL buffers of a tensor with elements: submitted, the handle fails (the C++ check).
    EXPECT_HANDLE_INVALID(
        troika_allreduce(ctx, "t", nullptr, x, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, &h_),
        "allreduce 't' on rank " + std::to_string(rank) +
            ": the input buffer is null (shape [2,2], 4 elements)");
    EXPECT_HANDLE_INVALID(
        troika_allreduce(ctx, "t", x, nullptr, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, &h_),
        "allreduce 't' on rank " + std::to_string(rank) + ": the output buffer is null");
    EXPECT_HANDLE_INVALID(
        troika_allgather(ctx, "t", nullptr, TROIKA_FLOAT32, shape, 2, &h_),
        "allgather 't' on rank " + std::to_string(rank) + ": the input buffer is null");
    EXPECT_HANDLE_INVALID(
        troika_alltoall(ctx, "t", nullptr, TROIKA_FLOAT32, shape, 2, splits, 2, &h_),
        "alltoall 't' on rank " + std::to_string(rank) + ": the input buffer is null");
    EXPECT_HANDLE_INVALID(
        troika_reducescatter(ctx, "t", nullptr, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, &h_),
        "reducescatter 't' on rank " + std::to_string(rank) + ": the input buffer is null");
    // Broadcast: the root needs its input, every rank its output.
    EXPECT_HANDLE_INVALID(
        troika_broadcast(ctx, "t", nullptr, nullptr, TROIKA_FLOAT32, shape, 2, 0, &h_),
        rank == 0 ? "broadcast 't' on rank 0: the input buffer is null on the root"
                  : "broadcast 't' on rank 1: the output buffer is null");
    void* null_outs[1] = {nullptr};
    EXPECT_HANDLE_INVALID(
        troika_grouped_allreduce(ctx, "g", 1, names, ins, null_outs, dtypes, shapes, ndims,
                                 TROIKA_SUM, 1, 1, &h_),
        "allreduce 'gt' on rank " + std::to_string(rank) + ": the output buffer is null");

    // Valid uses of NULL: a non-root's broadcast input is never read; an empty tensor and a
    // scalar (ndim 0, NULL shape) are fine.
    float b[4] = {10.0f * rank, 1, 2, 3};
    ASSERT_EQ(
        troika_broadcast(ctx, "b", rank == 0 ? b : nullptr, b, TROIKA_FLOAT32, shape, 2, 0, &h), 0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(b[0], 0.0f);
    troika_handle_free(h);
    int64_t empty[1] = {0};
    ASSERT_EQ(troika_allreduce(ctx, "e", nullptr, nullptr, TROIKA_FLOAT32, empty, 1, TROIKA_SUM, 1,
                               1, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    troika_handle_free(h);
    float scalar = 1.0f + rank;
    ASSERT_EQ(troika_allreduce(ctx, "s", &scalar, &scalar, TROIKA_FLOAT32, nullptr, 0, TROIKA_SUM,
                               1, 1, &h),
              0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(scalar, 3.0f);
    int64_t dims[2];
    EXPECT_EQ(troika_handle_output_shape(h, nullptr, 2), -1);
    EXPECT_NE(std::string(troika_last_error()).find("NULL"), std::string::npos);
    EXPECT_EQ(troika_handle_output_shape(h, dims, -1), -1);
    EXPECT_EQ(troika_handle_received_splits(h, nullptr, 1), -1);
    EXPECT_EQ(troika_handle_output_shape(h, nullptr, 0), 0);  // only asks for the count
    troika_handle_free(h);

    // After all of that the job goes on.
    ASSERT_EQ(troika_allreduce(ctx, "t", x, x, TROIKA_FLOAT32, shape, 2, TROIKA_SUM, 1, 1, &h), 0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(x[3], 8.0f);
    troika_handle_free(h);
    EXPECT_EQ(troika_shutdown(ctx), 0);
    troika_free(ctx);
  });
}

TEST(CApiTest, CppAllreduceWithANullInputFailsItsHandleOnly) {
  TestCluster cluster;
  auto contexts = cluster.Join("cpp-null", 2);
  ASSERT_EQ(contexts.size(), 2u);
  OnEveryRank(2, [&](int rank) {
    Context& c = *contexts[rank];
    std::vector<float> out(6, -1.0f);
    absl::Status s = c.Allreduce("n", nullptr, out.data(), DataType::kFloat32, {2, 3}).Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("allreduce 'n'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("input buffer is null"), std::string::npos) << s;
    EXPECT_EQ(out[0], -1.0f);  // untouched
    s = c.Broadcast("nb", out.data(), nullptr, DataType::kFloat32, {6}, 0).Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("output buffer is null"), std::string::npos) << s;
    std::vector<float> in(6, 1.0f + rank);
    ASSERT_TRUE(c.Allreduce("n", in.data(), out.data(), DataType::kFloat32, {2, 3}).Wait().ok());
    EXPECT_EQ(out[5], 3.0f);
  });
}

TEST(CApiTest, IntoACallersBuffer) {
  TestCluster cluster;
  const std::string address = cluster.address();
  OnEveryRank(2, [&](int rank) {
    troika_context* ctx = nullptr;
    ASSERT_EQ(troika_init(address.c_str(), "capi-into", rank, 2, &ctx), 0) << troika_last_error();
    troika_handle* h = nullptr;
    // Allgather: rank r contributes r + 1 rows; 3 rows in all.
    std::vector<int32_t> rows(rank + 1, 7 + rank);
    int64_t gshape[1] = {rank + 1};
    std::vector<int32_t> out(4, -1);
    ASSERT_EQ(troika_allgather_into(ctx, "ag", rows.data(), out.data(), 4 * sizeof(int32_t),
                                    TROIKA_INT32, gshape, 1, &h),
              0);
    ASSERT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    size_t bytes = 0;
    EXPECT_EQ(troika_handle_output(h, &bytes), out.data());
    EXPECT_EQ(bytes, 3 * sizeof(int32_t));
    EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 8, -1}));
    troika_handle_free(h);

    // Alltoall: rank r sends 1 row to each; reducescatter: 2 rows, one each.
    int32_t a2a[2] = {10 * rank, 10 * rank + 1};
    int64_t ashape[1] = {2};
    int32_t received[2] = {-1, -1};
    ASSERT_EQ(troika_alltoall_into(ctx, "a2a", a2a, received, sizeof(received), TROIKA_INT32,
                                   ashape, 1, nullptr, 0, &h),
              0);
    ASSERT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(received[0], rank);
    EXPECT_EQ(received[1], 10 + rank);
    int64_t splits[2];
    EXPECT_EQ(troika_handle_received_splits(h, splits, 2), 2);
    troika_handle_free(h);
    float rs[2] = {1.0f, 2.0f};
    float mine = -1.0f;
    ASSERT_EQ(troika_reducescatter_into(ctx, "rs", rs, &mine, sizeof(mine), TROIKA_FLOAT32, ashape,
                                        1, TROIKA_SUM, 1, 1, &h),
              0);
    ASSERT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    EXPECT_EQ(mine, 2.0f * (rank + 1));
    troika_handle_free(h);

    // Too small on rank 0 only: OUT_OF_RANGE there, the result on rank 1.
    std::fill(out.begin(), out.end(), -1);
    ASSERT_EQ(
        troika_allgather_into(ctx, "ag2", rows.data(), out.data(),
                              (rank == 0 ? 2 : 3) * sizeof(int32_t), TROIKA_INT32, gshape, 1, &h),
        0);
    if (rank == 0) {
      EXPECT_EQ(troika_handle_wait(h), 11);  // OUT_OF_RANGE
      EXPECT_NE(std::string(troika_last_error()).find("needs 12 bytes"), std::string::npos)
          << troika_last_error();
      EXPECT_EQ(troika_handle_output(h, &bytes), nullptr);
      EXPECT_EQ(out[0], -1);
    } else {
      EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
      EXPECT_EQ(out[2], 8);
    }
    troika_handle_free(h);

    // The same with troika_allgather_into_or_owned: rank 0's result is handle-owned instead.
    std::fill(out.begin(), out.end(), -1);
    ASSERT_EQ(troika_allgather_into_or_owned(ctx, "ag3", rows.data(), out.data(),
                                             (rank == 0 ? 2 : 3) * sizeof(int32_t), TROIKA_INT32,
                                             gshape, 1, &h),
              0);
    ASSERT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    const auto* result = static_cast<const int32_t*>(troika_handle_output(h, &bytes));
    EXPECT_EQ(bytes, 3 * sizeof(int32_t));
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(std::vector<int32_t>(result, result + 3), (std::vector<int32_t>{7, 8, 8}));
    EXPECT_EQ(result == out.data(), rank == 1);  // rank 0's buffer was too small
    EXPECT_EQ(out[0], rank == 0 ? -1 : 7);
    troika_handle_free(h);

    // Argument checks as the other operations.
    EXPECT_INVALID(troika_allgather_into(ctx, nullptr, rows.data(), out.data(), 4, TROIKA_INT32,
                                         gshape, 1, &h),
                   "troika_allgather_into: name is NULL");
    EXPECT_INVALID(
        troika_alltoall_into(ctx, "x", a2a, received, 8, TROIKA_INT32, ashape, 1, nullptr, 1, &h),
        "splits is NULL but nsplits is 1");
    EXPECT_INVALID(troika_reducescatter_into(ctx, "x", rs, &mine, 4, TROIKA_FLOAT32, ashape, -1,
                                             TROIKA_SUM, 1, 1, &h),
                   "ndim is -1");
    EXPECT_HANDLE_INVALID(
        troika_allgather_into(ctx, "x", rows.data(), nullptr, 4, TROIKA_INT32, gshape, 1, &h_),
        "output buffer is null, but its size is given as 4 bytes");
    EXPECT_EQ(troika_shutdown(ctx), 0);
    troika_free(ctx);
  });
}

}  // namespace
}  // namespace troika::testing
