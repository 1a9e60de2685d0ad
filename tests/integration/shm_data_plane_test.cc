// The shared-memory data plane end to end: a job through troikarun with
// TROIKA_TRANSPORT=shm (every rank on this host), its ranks checking allreduce, allgather and
// broadcast results (troika-test-check-rank), and nothing in /dev/shm.

#include <dirent.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

// Files in /dev/shm named like a segment of ours: the data plane's segments are memfds, with no
// name there, so none may exist.
std::vector<std::string> NamedSegments() {
  std::vector<std::string> named;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return named;
  while (const dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, "troika-shm")) named.push_back(entry->d_name);
  }
  closedir(dir);
  return named;
}

TEST(ShmDataPlaneTest, FourRanksThroughTroikarunGetCorrectAllreduceAllgatherAndBroadcast) {
  const std::string dir = MakeScratchDir("shm-data-plane");
  const CommandResult r = RunShell(
      absl::StrCat("TROIKA_TRANSPORT=shm exec ", TROIKARUN_BINARY, " -np 4 -- ", CHECK_RANK_BINARY),
      dir, absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("check ok on rank ", rank, " of 4")));
  }
  EXPECT_THAT(r.out, HasSubstr("), data plane shm\n"));
  EXPECT_THAT(NamedSegments(), ::testing::IsEmpty());
}

TEST(ShmDataPlaneTest, UnknownDataPlaneFailsTheJobNamingTheChoices) {
  const std::string dir = MakeScratchDir("shm-data-plane-unknown");
  const CommandResult r = RunShell(absl::StrCat("TROIKA_TRANSPORT=carrier-pigeon exec ",
                                                TROIKARUN_BINARY, " -np 2 -- ", CHECK_RANK_BINARY),
                                   dir, absl::Seconds(60));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out + r.err, HasSubstr("valid choices: auto, gloo, shm, hierarchical, memory"));
}

}  // namespace
}  // namespace troika::testing
