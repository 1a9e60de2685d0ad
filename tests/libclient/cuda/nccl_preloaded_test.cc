// A framework's NCCL already in the process is the one the GPU data plane uses. This program
// needs a stand-in libnccl.so.2 (fake_nccl.cc, NCCL "2.99.1") the way PyTorch's
// libtorch_cuda.so needs its own: loaded at start-up, before anything of Troika's runs.

#include <dlfcn.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libclient/cuda/nccl_library.h"

namespace troika::cuda {
namespace {

using ::testing::EndsWith;

TEST(NcclPreloadedTest, TheNcclAlreadyLoadedIsUsedNotTheMachines) {
  // A call of our own keeps the stand-in among this program's needed libraries.
  int linked = 0;
  ASSERT_EQ(ncclGetVersion(&linked), ncclSuccess);
  ASSERT_EQ(linked, 29901);
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ(nccl->version, 29901);
  EXPECT_EQ(nccl->origin, "already loaded in this process");
  EXPECT_THAT(nccl->path, EndsWith("fake_nccl/libnccl.so.2"));
  EXPECT_EQ(nccl->GetVersion, &ncclGetVersion);
}

TEST(NcclPreloadedTest, AnExplicitLibraryIsLoadedBesideIt) {
  // TROIKA_NCCL_LIBRARY names a file: that file, even with another NCCL loaded (each
  // communicator belongs to one of them).
  absl::StatusOr<NcclLibrary> nccl = NcclLibrary::Load({.path = FAKE_NCCL_INCOMPLETE});
  ASSERT_FALSE(nccl.ok());
  EXPECT_THAT(std::string(nccl.status().message()), ::testing::HasSubstr("2.30.1 but lacks"));
}

}  // namespace
}  // namespace troika::cuda
