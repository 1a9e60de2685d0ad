// NCCL is found at run time (NcclLibrary), at the GPU data plane's first GPU operation: a
// process that loads libtroika has no NCCL and no shared CUDA runtime until then, and an NCCL
// that cannot be used is refused with a message naming what was found and what is needed.
// Needs no GPU (dlopen and ncclGetVersion work without one), except the last test.
//
// The first test must see the process as libtroika left it: ctest runs each test alone
// (gtest_discover_tests); run by hand, the tests run in file order.

#include "libclient/cuda/nccl_library.h"

#include <dlfcn.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libclient/execution/device_plane.h"
#include "tests/no_gpu.h"
#include "troika/troika.h"

namespace troika::cuda {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Whether a library of this soname is loaded in this process (loads nothing).
bool Loaded(const char* soname) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

TEST(NcclLibraryTest, LinkingLibtroikaLoadsNeitherNcclNorTheSharedCudaRuntime) {
  // This test program links libtroika (its symbol here keeps the link): whatever libtroika
  // needs is loaded by now. A framework imported after it must find no NCCL or CUDA runtime
  // of Troika's, or it is handed ours by soname.
  volatile auto keep_libtroika = &troika::Options::FromEnvironment;
  ASSERT_NE(keep_libtroika, nullptr);
  EXPECT_FALSE(Loaded(kNcclSoname)) << "libtroika loaded an NCCL by itself";
  EXPECT_FALSE(Loaded("libcudart.so.13")) << "libtroika loaded the shared CUDA runtime";
  EXPECT_FALSE(Loaded("libcudart.so")) << "libtroika loaded the shared CUDA runtime";
}

TEST(NcclLibraryTest, ExplicitLibraryThatDoesNotLoadIsNamedWithTheVersionNeeded) {
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({.path = "/nonexistent/libnccl.so.2"});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nccl.status().message(),
              AllOf(HasSubstr("TROIKA_NCCL_LIBRARY=/nonexistent/libnccl.so.2 does not load"),
                    HasSubstr("No such file"), HasSubstr("needs NCCL 2.17.1 or newer"),
                    HasSubstr(absl::StrCat("built with ", NcclVersionString(NCCL_VERSION_CODE)))));
  EXPECT_FALSE(Loaded(kNcclSoname));
}

TEST(NcclLibraryTest, ExplicitLibraryThatIsNotNcclIsRefused) {
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({.path = "libm.so.6"});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nccl.status().message(),
              AllOf(HasSubstr("libm.so.6"), HasSubstr("is not NCCL (no ncclGetVersion)")));
}

TEST(NcclLibraryTest, TooOldNcclIsRefusedAndUnloaded) {
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({.path = FAKE_NCCL_OLD});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nccl.status().message(),
              AllOf(HasSubstr(FAKE_NCCL_OLD), HasSubstr("(TROIKA_NCCL_LIBRARY)"),
                    HasSubstr("is NCCL 2.14.5, too old"), HasSubstr("needs NCCL 2.17.1")));
  // Not left in the process for a framework to be handed.
  EXPECT_EQ(dlopen(FAKE_NCCL_OLD, RTLD_NOW | RTLD_NOLOAD), nullptr);
}

TEST(NcclLibraryTest, NcclLackingAFunctionIsRefusedNamingIt) {
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({.path = FAKE_NCCL_INCOMPLETE});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nccl.status().message(),
              AllOf(HasSubstr("is NCCL 2.30.1 but lacks ncclGetErrorString"),
                    HasSubstr("ncclCommInitRankConfig"), HasSubstr("ncclGroupEnd")));
}

TEST(NcclLibraryTest, VersionCodesReadAsNcclWritesThem) {
  EXPECT_EQ(NcclVersionString(22809), "2.28.9");
  EXPECT_EQ(NcclVersionString(21701), "2.17.1");
  EXPECT_EQ(NcclVersionString(2804), "2.8.4");  // NCCL's encoding before 2.9
}

TEST(NcclLibraryTest, SearchFindsTheMachinesNcclThenReusesIt) {
  // This build found NCCL at configure time: the search (or its last resort, the build's
  // library) finds one, new enough.
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_GE(nccl->version, kMinNcclVersion);
  EXPECT_FALSE(nccl->path.empty());
  EXPECT_NE(nccl->AllReduce, nullptr);
  EXPECT_NE(nccl->GroupEnd, nullptr);
  EXPECT_TRUE(Loaded(kNcclSoname));
  // Once in the process, that one is used: as a framework's would be.
  absl::StatusOr<NcclLibrary> again = NcclLibrary::Load({});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->origin, "already loaded in this process");
  EXPECT_EQ(again->path, nccl->path);
  EXPECT_EQ(again->AllReduce, nccl->AllReduce);
}

TEST(NcclLibraryTest, SearchThatFindsNothingUsableNamesEveryPlaceTried) {
  // A soname no machine has, and a build's library that is too old.
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load(
      {.path = "", .build_library = FAKE_NCCL_OLD, .soname = "libtroika_absent_nccl.so.2"});
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nccl.status().message(),
              AllOf(HasSubstr("no libtroika_absent_nccl.so.2 loaded in this process; "
                              "libtroika_absent_nccl.so.2: cannot open shared object file"),
                    HasSubstr(absl::StrCat(FAKE_NCCL_OLD, " (the build's NCCL) is NCCL 2.14.5")),
                    HasSubstr("needs NCCL 2.17.1 or newer"), HasSubstr("TROIKA_NCCL_LIBRARY")));
}

TEST(NcclLibraryTest, SearchFallsBackToTheBuildsLibrary) {
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load(
      {.path = "", .build_library = FAKE_NCCL_COMPLETE, .soname = "libtroika_absent_nccl.so.2"});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ(nccl->version, 29902);
  EXPECT_EQ(nccl->origin, "the build's NCCL");
  EXPECT_EQ(nccl->path, FAKE_NCCL_COMPLETE);
}

TEST(NcclLibraryTest, GpuOperationFailsWithTheLoadersErrorWhenNcclCannotBeUsed) {
  if (const std::string why = testing::NoGpu(); !why.empty()) GTEST_SKIP() << why;
  // Creating the plane loads nothing; the first GPU operation (its device check at
  // submission) does, and fails with the reason rather than the process failing to start.
  internal::DevicePlaneOptions options;
  options.nccl_library = "/nonexistent/libnccl.so.2";
  absl::StatusOr<std::unique_ptr<internal::DevicePlane>> plane =
      internal::CreateDevicePlane(std::move(options));
  ASSERT_TRUE(plane.ok()) << plane.status();
  absl::Status status = (*plane)->CheckDevice(0);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("TROIKA_NCCL_LIBRARY=/nonexistent/libnccl.so.2"));
  (*plane)->Stop();
}

}  // namespace
}  // namespace troika::cuda
