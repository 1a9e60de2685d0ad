// Placement of operations on devices, as every build sees it — with or without the GPU data
// plane, with or without a GPU: what cannot run is refused at submission with the reason, and
// the context goes on serving host operations. The GPU paths themselves: gpu_test.cc.

#include <cstdlib>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

TEST(DevicePlacementTest, GpuOperationWithoutUsableGpuIsRefusedWithTheReason) {
  TestCluster cluster;
  auto contexts = cluster.Join("placement", 1);
  ASSERT_EQ(contexts.size(), 1u);
  Context& ctx = *contexts[0];
  // Device 4096 exists nowhere: refused whether or not this build has the GPU data plane.
  std::vector<float> data(8, 1.0f);
  AllreduceOptions options;
  options.device.ordinal = 4096;
  absl::Status s =
      ctx.Allreduce("far", data.data(), data.data(), DataType::kFloat32, {8}, options).Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("GPU 4096"));
  EXPECT_THAT(s.message(), AnyOf(HasSubstr("built without the GPU data plane"),
                                 HasSubstr("no usable CUDA device"), HasSubstr("does not exist")));
  // The refusal cost nothing: host operations go on.
  ASSERT_TRUE(ctx.Allreduce("host", data.data(), data.data(), DataType::kFloat32, {8}).Wait().ok());
  EXPECT_EQ(data[0], 1.0f);
}

TEST(DevicePlacementTest, CompressionAndStreamWaitsAreForGpuOperations) {
  TestCluster cluster;
  auto contexts = cluster.Join("placement-cpu", 1);
  ASSERT_EQ(contexts.size(), 1u);
  Context& ctx = *contexts[0];
  std::vector<float> data(8, 2.0f);
  AllreduceOptions compressed;
  compressed.compression = Compression::kFloat16;
  absl::Status s =
      ctx.Allreduce("c", data.data(), data.data(), DataType::kFloat32, {8}, compressed).Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("applies only to float32 allreduces on GPU"));

  Handle host = ctx.Allreduce("h", data.data(), data.data(), DataType::kFloat32, {8});
  absl::Status wait = host.WaitOnStream(nullptr);
  EXPECT_EQ(wait.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wait.message(), HasSubstr("runs on the host"));
  EXPECT_TRUE(host.Wait().ok());
}

TEST(DevicePlacementTest, DefaultCompressionComesFromTheEnvironment) {
  setenv("TROIKA_COORDINATOR", "127.0.0.1:1", 1);
  setenv("TROIKA_JOB", "j", 1);
  setenv("TROIKA_RANK", "0", 1);
  setenv("TROIKA_SIZE", "1", 1);
  setenv("TROIKA_COMPRESSION", "bfloat16", 1);
  absl::StatusOr<Options> options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->compression, Compression::kBFloat16);
  setenv("TROIKA_COMPRESSION", "fp8", 1);
  options = Options::FromEnvironment();
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.status().message(), HasSubstr("TROIKA_COMPRESSION='fp8'"));
  for (const char* name :
       {"TROIKA_COORDINATOR", "TROIKA_JOB", "TROIKA_RANK", "TROIKA_SIZE", "TROIKA_COMPRESSION"}) {
    unsetenv(name);
  }
}

TEST(DevicePlacementTest, NcclLibraryComesFromTheEnvironment) {
  setenv("TROIKA_COORDINATOR", "127.0.0.1:1", 1);
  setenv("TROIKA_JOB", "j", 1);
  setenv("TROIKA_RANK", "0", 1);
  setenv("TROIKA_SIZE", "1", 1);
  absl::StatusOr<Options> options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->nccl_library, "");  // search (docs/gpu.md, "Which NCCL")
  setenv("TROIKA_NCCL_LIBRARY", "/opt/nccl/lib/libnccl.so.2", 1);
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->nccl_library, "/opt/nccl/lib/libnccl.so.2");
  for (const char* name :
       {"TROIKA_COORDINATOR", "TROIKA_JOB", "TROIKA_RANK", "TROIKA_SIZE", "TROIKA_NCCL_LIBRARY"}) {
    unsetenv(name);
  }
}

}  // namespace
}  // namespace troika::testing
