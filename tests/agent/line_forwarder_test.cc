#include "agent/launch/line_forwarder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troika::agent {
namespace {

// Records every Write() separately, so tests can check that lines are written whole.
class RecordingSink : public OutputSink {
 public:
  void Write(std::string_view text) override { writes.emplace_back(text); }
  std::string All() const {
    std::string all;
    for (const std::string& w : writes) all += w;
    return all;
  }
  std::vector<std::string> writes;
};

TEST(LineForwarderTest, PrefixesEveryCompleteLine) {
  RecordingSink sink;
  LineForwarder forwarder("[3] ", sink);
  forwarder.Feed("a\nbb\n");
  EXPECT_EQ(sink.All(), "[3] a\n[3] bb\n");
  ASSERT_EQ(sink.writes.size(), 1u) << "lines completed by one Feed go out in one write";
}

TEST(LineForwarderTest, JoinsALineSplitAcrossFeeds) {
  RecordingSink sink;
  LineForwarder forwarder("[0] ", sink);
  forwarder.Feed("hel");
  EXPECT_TRUE(sink.writes.empty());
  forwarder.Feed("lo\nwor");
  forwarder.Feed("ld\n");
  EXPECT_EQ(sink.writes, (std::vector<std::string>{"[0] hello\n", "[0] world\n"}));
}

TEST(LineForwarderTest, FinishFlushesAnUnfinishedLineWithANewline) {
  RecordingSink sink;
  LineForwarder forwarder("[1] ", sink);
  forwarder.Feed("done\npartial");
  forwarder.Finish();
  EXPECT_EQ(sink.All(), "[1] done\n[1] partial\n");
  forwarder.Finish();  // nothing left
  forwarder.Feed("again\n");
  EXPECT_EQ(sink.All(), "[1] done\n[1] partial\n[1] again\n");
}

TEST(LineForwarderTest, EmptyLinesArePreserved) {
  RecordingSink sink;
  LineForwarder forwarder("[0] ", sink);
  forwarder.Feed("\n\nx\n");
  EXPECT_EQ(sink.All(), "[0] \n[0] \n[0] x\n");
}

TEST(LineForwarderTest, OverlongLineIsSplitIntoBoundedPieces) {
  RecordingSink sink;
  LineForwarder forwarder("> ", sink, /*max_line_bytes=*/4);
  forwarder.Feed("abcdefghij");
  EXPECT_EQ(sink.All(), "> abcd\n> efgh\n");
  forwarder.Feed("\n");
  EXPECT_EQ(sink.All(), "> abcd\n> efgh\n> ij\n");
  forwarder.Feed("wxyz\n");  // exactly the limit: one line
  EXPECT_EQ(sink.All(), "> abcd\n> efgh\n> ij\n> wxyz\n");
}

}  // namespace
}  // namespace troika::agent
