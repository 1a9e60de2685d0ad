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

// horovodrun writes a '\r' (a progress bar redrawing its line) at once, with the prefix
// before what follows it; troikarun does the same (Horovod's test_prefix_connection_with_
// carriage_return and _does_stream).
TEST(LineForwarderTest, ACarriageReturnEndsAPieceWrittenAtOnce) {
  RecordingSink sink;
  LineForwarder forwarder("[5] ", sink);
  forwarder.Feed("epoch 1\rep");
  EXPECT_EQ(sink.writes, (std::vector<std::string>{"[5] epoch 1\r"})) << "not held for a newline";
  forwarder.Feed("och 2\ndone\n");
  EXPECT_EQ(sink.All(), "[5] epoch 1\r[5] epoch 2\n[5] done\n");
  forwarder.Feed(" 10%\r 20%\r 30%");
  EXPECT_EQ(sink.writes.back(), "[5]  10%\r[5]  20%\r");
  forwarder.Finish();
  EXPECT_EQ(sink.writes.back(), "[5]  30%\n");
}

TEST(LineForwarderTest, ACarriageReturnBeforeANewlineEndsOneLine) {
  RecordingSink sink;
  LineForwarder forwarder("[0] ", sink);
  forwarder.Feed("dos\r\nline\r\n\r\n");
  EXPECT_EQ(sink.All(), "[0] dos\r\n[0] line\r\n[0] \r\n");
}

// Text passes as bytes: characters of several bytes arrive whole however the reads cut them
// (Horovod's test_prefix_connection_with_unicode and _with_multibyte_unicode).
TEST(LineForwarderTest, MultibyteCharactersPassWholeAcrossFeeds) {
  RecordingSink sink;
  LineForwarder forwarder("[1] ", sink);
  const std::string block = "\u2200\u2203\u2588\u2593\u2592\u2591\U0001F600";  // 3 and 4 bytes
  std::string line;
  for (int i = 0; i < 1500; ++i) line += block;  // 33000 bytes: below the bound
  const std::string text = line + "\n" + line + "\n";
  for (size_t at = 0; at < text.size(); at += 1000) forwarder.Feed(text.substr(at, 1000));
  EXPECT_EQ(sink.All(), "[1] " + line + "\n[1] " + line + "\n");
}

TEST(LineForwarderTest, AnOverlongLineIsNeverCutInsideACharacter) {
  RecordingSink sink;
  LineForwarder forwarder("> ", sink, /*max_line_bytes=*/8);
  forwarder.Feed("abc\u2200\u2200\u2200\n");  // 3 + 3 * 3 bytes: the bound cuts the second
  EXPECT_EQ(sink.All(), "> abc\u2200\n> \u2200\u2200\n");
  sink.writes.clear();
  forwarder.Feed("abcdefg\U0001F600h\n");  // 7 + 4 bytes
  EXPECT_EQ(sink.All(), "> abcdefg\n> \U0001F600h\n");
  sink.writes.clear();
  forwarder.Feed("abcdefg\xff\xfe\n");  // not UTF-8: cut at the bound
  EXPECT_EQ(sink.All(), "> abcdefg\xff\n> \xfe\n");
}

}  // namespace
}  // namespace troika::agent
