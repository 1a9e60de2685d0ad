// troikarun --output-filename: each rank's lines in DIR/rank.N/<stream>, without the prefix,
// and every line on to the terminal.

#include "agent/launch/rank_file_sink.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/memory_sink.h"

namespace troika::agent {
namespace {

using ::testing::HasSubstr;

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class RankFileSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/troika-output-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    root_ = dir;
  }
  void TearDown() override { ASSERT_EQ(system(absl::StrCat("rm -rf '", root_, "'").c_str()), 0); }
  std::string root_;
};

TEST_F(RankFileSinkTest, PadsRanksAsHorovodrun) {
  EXPECT_EQ(RankFileSink::PathOf("d", "stdout", 0, 1), "d/rank.0/stdout");
  EXPECT_EQ(RankFileSink::PathOf("d", "stdout", 3, 10), "d/rank.3/stdout") << "0 .. 9: one digit";
  EXPECT_EQ(RankFileSink::PathOf("d", "stderr", 3, 11), "d/rank.03/stderr") << "0 .. 10: two";
  EXPECT_EQ(RankFileSink::PathOf("d", "stdout", 7, 101), "d/rank.007/stdout");
  EXPECT_EQ(RankFileSink::PathOf("d", "stdout", 100, 101), "d/rank.100/stdout");
  EXPECT_EQ(RankFileSink::PathOf("d", "stdout", 12, 4), "d/rank.12/stdout")
      << "a rank beyond the first size (an elastic job grown) keeps its digits";
}

TEST_F(RankFileSinkTest, WritesEachRanksLinesWithoutThePrefixAndPassesEveryLineOn) {
  MemorySink terminal;
  const std::string dir = root_ + "/out/nested";
  auto sink = RankFileSink::Create(dir, "stdout", 11, terminal);
  ASSERT_TRUE(sink.ok()) << sink.status();
  for (int rank = 0; rank < 11; ++rank) {
    struct stat st;
    EXPECT_EQ(stat(RankFileSink::PathOf(dir, "stdout", rank, 11).c_str(), &st), 0)
        << "every rank's file exists from the start, as horovodrun makes them";
  }
  (*sink)->Write("[0] loss 0.5\n[10] loss 0.7\n");
  (*sink)->Write("troika-agent: rank 2 exited with code 1; stopping the others\n");
  (*sink)->Write("[0] [1] not a prefix inside a line\n[x] no rank\n[3]no space\n");
  (*sink)->Write("[12] grown\n");
  EXPECT_EQ(Contents(dir + "/rank.00/stdout"), "loss 0.5\n[1] not a prefix inside a line\n");
  EXPECT_EQ(Contents(dir + "/rank.10/stdout"), "loss 0.7\n");
  EXPECT_EQ(Contents(dir + "/rank.02/stdout"), "") << "the agent's message is no rank's line";
  EXPECT_EQ(Contents(dir + "/rank.12/stdout"), "grown\n");
  EXPECT_EQ(terminal.text(),
            "[0] loss 0.5\n[10] loss 0.7\n"
            "troika-agent: rank 2 exited with code 1; stopping the others\n"
            "[0] [1] not a prefix inside a line\n[x] no rank\n[3]no space\n[12] grown\n");
}

// A progress bar's pieces, each ended by a '\r' and prefixed (LineForwarder), go to their
// rank's file as the rank wrote them.
TEST_F(RankFileSinkTest, PiecesEndedByACarriageReturnGoToTheirRanksFile) {
  MemorySink terminal;
  auto sink = RankFileSink::Create(root_, "stderr", 2, terminal);
  ASSERT_TRUE(sink.ok()) << sink.status();
  (*sink)->Write("[1]  10%\r[1]  20%\r");
  (*sink)->Write("[0] dos\r\n[1]  30%\n");
  EXPECT_EQ(Contents(root_ + "/rank.1/stderr"), " 10%\r 20%\r 30%\n");
  EXPECT_EQ(Contents(root_ + "/rank.0/stderr"), "dos\r\n");
  EXPECT_EQ(terminal.text(), "[1]  10%\r[1]  20%\r[0] dos\r\n[1]  30%\n");
}

TEST_F(RankFileSinkTest, OneSinkPerStreamTruncatingEarlierRuns) {
  MemorySink out_terminal, err_terminal;
  const std::string dir = root_ + "/logs";
  {
    auto out = RankFileSink::Create(dir, "stdout", 2, out_terminal);
    ASSERT_TRUE(out.ok());
    (*out)->Write("[1] from an earlier run\n");
  }
  auto out = RankFileSink::Create(dir, "stdout", 2, out_terminal);
  auto err = RankFileSink::Create(dir, "stderr", 2, err_terminal);
  ASSERT_TRUE(out.ok() && err.ok());
  (*out)->Write("[1] out\n");
  (*err)->Write("[1] err\n");
  EXPECT_EQ(Contents(dir + "/rank.1/stdout"), "out\n");
  EXPECT_EQ(Contents(dir + "/rank.1/stderr"), "err\n");
  EXPECT_EQ(err_terminal.text(), "[1] err\n");
}

TEST_F(RankFileSinkTest, LinesFromManyThreadsStayWhole) {
  MemorySink terminal;
  auto sink = RankFileSink::Create(root_, "stdout", 4, terminal);
  ASSERT_TRUE(sink.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) (*sink)->Write(absl::StrCat("[", t % 2, "] line ", i, "\n"));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < 2; ++rank) {
    std::istringstream lines(Contents(absl::StrCat(root_, "/rank.", rank, "/stdout")));
    int count = 0;
    for (std::string line; std::getline(lines, line); ++count) {
      ASSERT_THAT(line, ::testing::MatchesRegex("line [0-9]+")) << line;
    }
    EXPECT_EQ(count, 1000);
  }
}

TEST_F(RankFileSinkTest, ADirectoryThatCannotBeMadeIsNamed) {
  MemorySink terminal;
  const std::string file = root_ + "/a-file";
  std::ofstream(file) << "x";
  auto sink = RankFileSink::Create(file + "/out", "stdout", 2, terminal);
  ASSERT_FALSE(sink.ok());
  EXPECT_THAT(std::string(sink.status().message()),
              HasSubstr("--output-filename: cannot create " + file + "/out/rank.0/stdout"));
  auto grown = RankFileSink::Create(root_ + "/ok", "stdout", 1, terminal);
  ASSERT_TRUE(grown.ok());
  std::ofstream(root_ + "/ok/rank.5") << "a file where rank 5's directory goes";
  (*grown)->Write("[5] lost\n[5] lost again\n");
  const std::string text = terminal.text();
  EXPECT_THAT(text, HasSubstr("troikarun: --output-filename: cannot create " + root_ +
                              "/ok/rank.5/stdout"));
  EXPECT_EQ(text.find("cannot create"), text.rfind("cannot create")) << "said once";
  EXPECT_THAT(text, HasSubstr("[5] lost again\n")) << "its lines still reach the terminal";
}

}  // namespace
}  // namespace troika::agent
