// troikarun's hosts as horovodrun and Open MPI write them: -H's list and --hostfile's lines.

#include "agent/launcher/host_flags.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ErrorOf(const absl::StatusOr<std::vector<HostSlots>>& hosts) {
  EXPECT_FALSE(hosts.ok());
  if (hosts.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(hosts.status()));
  return std::string(hosts.status().message());
}

TEST(HostFlagsTest, HostListTakesHostsWithAndWithoutSlots) {
  auto hosts = ParseHostList("worker-0:2, worker_1.example.com:4 ,10.0.0.3");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSlots{"worker-0", 2}, HostSlots{"worker_1.example.com", 4},
                                  HostSlots{"10.0.0.3", 1}));
  EXPECT_EQ(TotalSlots(*hosts), 7);
}

TEST(HostFlagsTest, HostListErrorsNameTheEntry) {
  EXPECT_THAT(ErrorOf(ParseHostList("a:2,,b:2")), HasSubstr("-H: '' is not HOST or HOST:SLOTS"));
  EXPECT_THAT(ErrorOf(ParseHostList("a:2,")), HasSubstr("'' is not HOST or HOST:SLOTS"));
  EXPECT_THAT(ErrorOf(ParseHostList("a b:2")), HasSubstr("'a b:2' is not HOST or HOST:SLOTS"));
  EXPECT_THAT(ErrorOf(ParseHostList("a:two")), HasSubstr("slots 'two' is not a number"));
  EXPECT_THAT(ErrorOf(ParseHostList("a:0")), HasSubstr("slots must be between 1 and 1024, got 0"));
  EXPECT_THAT(ErrorOf(ParseHostList("a:2:3")), HasSubstr("slots '2:3' is not a number"));
  EXPECT_THAT(ErrorOf(ParseHostList(":2")), HasSubstr("':2' is not HOST or HOST:SLOTS"));
}

TEST(HostFlagsTest, HostfileReadsOpenMpiLinesCommentsAndBlankLines) {
  const std::string text =
      "# the cluster\n"
      "172.31.32.7 slots=8\n"
      "\n"
      "172.31.33.9   slots = 4   # a comment after the slots\n"
      "node-3:2\r\n"
      "node-4\n"
      "\tnode-5 slots=2 max_slots=4\n";
  auto hosts = ParseHostfile(text, "hosts.txt");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              ElementsAre(HostSlots{"172.31.32.7", 8}, HostSlots{"172.31.33.9", 4},
                          HostSlots{"node-3", 2}, HostSlots{"node-4", 1}, HostSlots{"node-5", 2}));
}

TEST(HostFlagsTest, HostfileErrorsNameTheFileAndLine) {
  EXPECT_THAT(ErrorOf(ParseHostfile("a slots=2\nb slots=x\n", "h.txt")),
              HasSubstr("--hostfile h.txt:2: slots 'x' is not a number"));
  EXPECT_THAT(ErrorOf(ParseHostfile("\n\na cpus=2\n", "h.txt")),
              HasSubstr("--hostfile h.txt:3: 'cpus=2' is not slots=N"));
  EXPECT_THAT(ErrorOf(ParseHostfile("a:2 slots=2\n", "h.txt")),
              HasSubstr("h.txt:1: the slots of 'a' are given twice"));
  EXPECT_THAT(ErrorOf(ParseHostfile("a slots=0\n", "h.txt")),
              HasSubstr("h.txt:1: slots must be between 1 and 1024, got 0"));
  EXPECT_THAT(ErrorOf(ParseHostfile("a/b\n", "h.txt")), HasSubstr("h.txt:1: 'a/b' is not HOST"));
  EXPECT_THAT(ErrorOf(ParseHostfile("# nothing\n\n", "h.txt")),
              HasSubstr("--hostfile h.txt names no host"));
}

TEST(HostFlagsTest, ReadHostfileReadsARealFile) {
  char path[] = "/tmp/troika-hostfile-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "172.31.32.7 slots=8\n172.31.33.9 slots=8\n";
  auto hosts = ReadHostfile(path);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSlots{"172.31.32.7", 8}, HostSlots{"172.31.33.9", 8}));
  unlink(path);
  EXPECT_THAT(ErrorOf(ReadHostfile(path)), HasSubstr("cannot read it"));
}

}  // namespace
}  // namespace troika::agent
