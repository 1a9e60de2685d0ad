// The command-line reader's flag shapes: switches, pairs, standalone flags and a command
// without "--" (FlagSyntax), as troikarun reads horovodrun's command line.

#include "agent/cli/command_line.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

struct Parsed {
  absl::StatusOr<CommandLine> line;
  std::vector<std::pair<std::string, std::string>> flags;  // what `set` got, in order
};

Parsed Parse(const std::vector<std::string>& args, const FlagSyntax& syntax) {
  Parsed parsed;
  parsed.line = ParseCommandLine(
      args, "prog",
      [&](const std::string& name, const std::string& value) {
        parsed.flags.emplace_back(name, value);
        return absl::OkStatus();
      },
      syntax);
  return parsed;
}

FlagSyntax Horovodrun() {
  FlagSyntax syntax;
  syntax.switches = {"verbose", "check_build"};
  syntax.pairs = {"range"};
  syntax.standalone = {"check_build"};
  syntax.bare_command = true;
  return syntax;
}

TEST(CommandLineTest, SwitchesTakeNoValueAndPairsTakeTwo) {
  Parsed p = Parse({"--verbose", "--range", "60", "300", "-np", "2", "--", "x"}, Horovodrun());
  ASSERT_TRUE(p.line.ok()) << p.line.status();
  ASSERT_EQ(p.flags.size(), 3u);
  EXPECT_THAT(p.flags[0], Pair("verbose", ""));
  EXPECT_EQ(p.flags[1].first, "range");
  EXPECT_EQ(JoinedValues(p.flags[1].second), std::make_pair(std::string("60"), std::string("300")));
  EXPECT_THAT(p.flags[2], Pair("np", "2"));
  EXPECT_THAT(p.line->command, ElementsAre("x"));
}

TEST(CommandLineTest, MisshapenFlagsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--verbose=yes", "x"}, "option '--verbose' takes no value"},
           {{"--range", "60"}, "option '--range' needs two values, as in --range A B"},
           {{"--range", "60", "--", "x"}, "needs two values"},
           {{"--range=60", "300", "x"}, "needs two values"},
           {{"-np"}, "option '-np' needs a value"},
           {{"-np", "2"}, "no command: prog [options] COMMAND"},
       }) {
    Parsed p = Parse(c.args, Horovodrun());
    ASSERT_FALSE(p.line.ok()) << c.message;
    EXPECT_TRUE(absl::IsInvalidArgument(p.line.status()));
    EXPECT_THAT(std::string(p.line.status().message()), HasSubstr(c.message));
  }
}

TEST(CommandLineTest, BareCommandBeginsAtTheFirstArgumentThatIsNoOption) {
  Parsed p = Parse({"-np", "2", "--verbose", "python3", "t.py", "--verbose", "--"}, Horovodrun());
  ASSERT_TRUE(p.line.ok()) << p.line.status();
  EXPECT_THAT(p.line->command, ElementsAre("python3", "t.py", "--verbose", "--"));
  EXPECT_EQ(p.flags.size(), 2u) << "the command's own flags are not read";
  FlagSyntax dashes_only = Horovodrun();
  dashes_only.bare_command = false;
  Parsed strict = Parse({"-np", "2", "python3"}, dashes_only);
  ASSERT_FALSE(strict.line.ok());
  EXPECT_THAT(std::string(strict.line.status().message()),
              HasSubstr("the command goes after \"--\""));
  Parsed missing = Parse({"-np", "2"}, FlagSyntax{});
  ASSERT_FALSE(missing.line.ok());
  EXPECT_THAT(std::string(missing.line.status().message()), HasSubstr("missing \"--\""));
}

TEST(CommandLineTest, AStandaloneSwitchNeedsNoCommand) {
  Parsed p = Parse({"--check_build", "--verbose"}, Horovodrun());
  ASSERT_TRUE(p.line.ok()) << p.line.status();
  EXPECT_TRUE(p.line->command.empty());
  Parsed plain = Parse({"--verbose"}, Horovodrun());
  EXPECT_FALSE(plain.line.ok()) << "verbose alone is no reason to run nothing";
}

TEST(CommandLineTest, ReadFlagFileNamesTheFlagAndFile) {
  char path[] = "/tmp/troika-flag-file-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "a\nb";
  absl::StatusOr<std::string> text = ReadFlagFile("prog", "--hostfile", path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "a\nb");
  unlink(path);
  absl::StatusOr<std::string> gone = ReadFlagFile("prog", "--hostfile", path);
  ASSERT_FALSE(gone.ok());
  EXPECT_THAT(std::string(gone.status().message()),
              HasSubstr(std::string("--hostfile ") + path + ": cannot read it: No such file"));
  absl::StatusOr<std::string> dir = ReadFlagFile("prog", "--config-file", "/tmp");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("Is a directory"));
}

}  // namespace
}  // namespace troika::agent
