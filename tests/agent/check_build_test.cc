// troikarun --check-build: what this build has, in horovodrun's layout.

#include "agent/launcher/check_build.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(CheckBuildTest, ReportsEachPartInHorovodrunsLayout) {
  BuildFeatures build;
  build.version = "9.8.7";
  build.torch = true;
  build.mxnet = true;
  std::string report = CheckBuildReport(build, false);
  EXPECT_EQ(report,
            "Troika v9.8.7:\n"
            "\n"
            "Available Frameworks:\n"
            "    [ ] TensorFlow\n"
            "    [X] PyTorch\n"
            "    [X] MXNet\n"
            "\n"
            "Available Controllers:\n"
            "    [ ] MPI\n"
            "    [ ] Gloo\n"
            "    [X] Troika coordinator\n"
            "\n"
            "Available Tensor Operations:\n"
            "    [ ] NCCL\n"
            "    [ ] DDL\n"
            "    [ ] CCL\n"
            "    [ ] MPI\n"
            "    [X] Gloo\n"
            "    [X] Shared memory\n");
  build.tensorflow = true;
  build.nccl = true;
  report = CheckBuildReport(build, false);
  EXPECT_THAT(report, HasSubstr("[X] TensorFlow\n"));
  EXPECT_THAT(report, HasSubstr("[X] NCCL\n"));
}

TEST(CheckBuildTest, VerboseSaysWhyAPartIsMissing) {
  BuildFeatures build;
  build.version = "1";
  build.torch = true;
  const std::string report = CheckBuildReport(build, true);
  EXPECT_THAT(report, StartsWith("\nTroika v1:\n"));
  EXPECT_THAT(report, HasSubstr("TensorFlow: troika.tensorflow's op library was not built"));
  EXPECT_THAT(report, HasSubstr("MXNet: troika.mxnet's engine operations were not built"));
  EXPECT_THAT(report, HasSubstr("NCCL: this build has no GPU data plane"));
  build.torch = false;
  EXPECT_THAT(CheckBuildReport(build, true), HasSubstr("troika._troika was not built"));
  build.torch = build.mxnet = build.tensorflow = build.nccl = true;
  EXPECT_THAT(CheckBuildReport(build, true), Not(HasSubstr("not built")));
}

TEST(CheckBuildTest, ThisBuildIsWhatTheBuildSystemMade) {
  const BuildFeatures build = BuildFeatures::OfThisBuild();
  EXPECT_EQ(build.version, TROIKA_TEST_VERSION);
  EXPECT_EQ(build.torch, TROIKA_TEST_PYTHON_MODULE != 0);
  EXPECT_EQ(build.tensorflow, TROIKA_TEST_TF_OPS != 0);
  EXPECT_EQ(build.nccl, TROIKA_TEST_GPU_PLANE != 0);
  EXPECT_EQ(VersionReport(build), std::string("Troika ") + TROIKA_TEST_VERSION + "\n");
}

}  // namespace
}  // namespace troika::agent
