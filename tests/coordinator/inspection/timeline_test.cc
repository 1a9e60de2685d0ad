#include "coordinator/inspection/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kOrigin = absl::UnixEpoch() + absl::Hours(1);

absl::Time At(int64_t us) { return kOrigin + absl::Microseconds(us); }

std::unique_ptr<Timeline> OpenOrDie(const std::string& path, int size,
                                    int64_t max_bytes = 1 << 20) {
  absl::StatusOr<std::unique_ptr<Timeline>> timeline =
      Timeline::Open(path, "job-1", size, max_bytes, kOrigin);
  EXPECT_TRUE(timeline.ok()) << timeline.status();
  return timeline.ok() ? std::move(*timeline) : nullptr;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The events of a closed trace, checked structurally: the writer puts the header on the first
// line, one event per line after it, and "]}" on the last.
std::vector<std::string> Events(const std::string& path) {
  const std::string text = ReadFile(path);
  EXPECT_TRUE(absl::StartsWith(text, "{\"displayTimeUnit\":\"ms\",")) << text.substr(0, 80);
  EXPECT_TRUE(absl::EndsWith(text, "\n]}\n"));
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  EXPECT_GE(lines.size(), 3u);
  if (lines.size() < 3) return {};
  EXPECT_TRUE(absl::EndsWith(lines.front(), "\"traceEvents\":[")) << lines.front();
  std::vector<std::string> events(lines.begin() + 1, lines.end() - 2);
  for (size_t i = 0; i < events.size(); ++i) {
    std::string& e = events[i];
    if (i + 1 < events.size()) {
      EXPECT_TRUE(absl::EndsWith(e, ",")) << e;
      if (!e.empty()) e.pop_back();
    }
    EXPECT_TRUE(absl::StartsWith(e, "{") && absl::EndsWith(e, "}")) << e;
  }
  return events;
}

int Count(const std::vector<std::string>& events, const std::string& needle) {
  int n = 0;
  for (const std::string& e : events) n += absl::StrContains(e, needle) ? 1 : 0;
  return n;
}

bool HavePython() { return std::system("python3 -c '' >/dev/null 2>&1") == 0; }

// Loads the trace with Python's json module, checking the fields the viewers need, and
// returns "<ph> <decoded name>" per event; nullopt (after a failure) if it does not load.
std::optional<std::vector<std::string>> LoadWithPython(const std::string& path) {
  const std::string script = absl::StrCat(path, ".check.py");
  const std::string out = absl::StrCat(path, ".names");
  std::ofstream(script) << R"(import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    d = json.load(f)
assert d["displayTimeUnit"] == "ms"
out = []
for e in d["traceEvents"]:
    assert type(e["pid"]) is int and type(e["tid"]) is int, e
    assert e["ph"] in ("X", "i", "M"), e
    if e["ph"] != "M":
        assert e["ts"] >= 0, e
    if e["ph"] == "X":
        assert e["dur"] >= 0, e
    if e["ph"] == "i":
        assert e["s"] in ("t", "g"), e
    out.append(e["ph"] + " " + e["name"].encode("utf-8").hex())
with open(sys.argv[2], "w") as f:
    f.write("\n".join(out))
)";
  const int rc = std::system(absl::StrCat("python3 ", script, " ", path, " ", out).c_str());
  EXPECT_EQ(rc, 0) << "python3 could not load " << path;
  const std::string names = ReadFile(out);
  std::remove(script.c_str());
  std::remove(out.c_str());
  if (rc != 0) return std::nullopt;
  std::vector<std::string> events;
  for (absl::string_view line : absl::StrSplit(names, '\n')) {
    std::pair<std::string, std::string> ph_name = absl::StrSplit(line, ' ');
    events.push_back(absl::StrCat(ph_name.first, " ", absl::HexStringToBytes(ph_name.second)));
  }
  return events;
}

// Removes the traces it named once the test is over.
class TimelineTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }
  std::string TracePath(const std::string& name) {
    paths_.push_back(absl::StrCat(::testing::TempDir(), "timeline-", name, "-", getpid(), ".json"));
    return paths_.back();
  }

 private:
  std::vector<std::string> paths_;
};

TEST_F(TimelineTest, AMembershipChangeIsAGlobalMarkAndNamesTheRanksItAdds) {
  const std::string path = TracePath("membership");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 2);
  ASSERT_NE(timeline, nullptr);
  timeline->MembershipChange(At(5000), "2 ranks on \"c\" joined at a commit", 4);
  timeline->RankPhase(3, PhaseKind::kCollective, At(6000), At(7000), {"w"});
  timeline->MembershipChange(At(9000), "rank 3 was lost", 3);
  ASSERT_TRUE(timeline->Close().ok());

  const std::vector<std::string> events = Events(path);
  EXPECT_THAT(events,
              Contains("{\"name\":\"membership change\",\"cat\":\"elastic\",\"ph\":\"i\","
                       "\"pid\":1,\"tid\":0,\"ts\":5000.000,\"s\":\"g\",\"args\":{"
                       "\"reason\":\"2 ranks on \\\"c\\\" joined at a commit\",\"size\":4}}"));
  EXPECT_EQ(Count(events, "\"name\":\"membership change\""), 2);
  EXPECT_EQ(Count(events, "\"args\":{\"name\":\"rank 3\"}"), 1) << "named once, when it came";
  EXPECT_EQ(Count(events, "\"name\":\"collective\",\"cat\":\"exec\""), 1)
      << "rank 3's phase is kept";
  if (HavePython()) {
    EXPECT_TRUE(LoadWithPython(path).has_value());
  }
}

TEST_F(TimelineTest, NegotiationIsOneSpanWithATickPerKnownArrival) {
  const std::string path = TracePath("negotiation");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 4);
  ASSERT_NE(timeline, nullptr);
  timeline->Negotiation("grad/fc1", "allreduce", At(1000), At(8000),
                        {At(1000), At(4000), At(2500), absl::InfinitePast()}, false);
  ASSERT_TRUE(timeline->Close().ok());

  const std::vector<std::string> events = Events(path);
  EXPECT_THAT(events, Contains("{\"name\":\"grad/fc1\",\"cat\":\"negotiation\",\"ph\":\"X\","
                               "\"pid\":1,\"tid\":1,\"ts\":1000.000,\"dur\":7000.000,"
                               "\"args\":{\"op\":\"allreduce\",\"cached\":false,\"ranks\":3,"
                               "\"last_rank\":1}}"));
  EXPECT_EQ(Count(events, "\"ph\":\"i\""), 3);
  const std::string tick = "{\"name\":\"arrive\",\"cat\":\"negotiation\",\"ph\":\"i\",\"pid\":1,";
  EXPECT_THAT(events,
              Contains(tick + "\"tid\":1,\"ts\":1000.000,\"s\":\"t\",\"args\":{\"rank\":0}}"));
  EXPECT_THAT(events,
              Contains(tick + "\"tid\":1,\"ts\":4000.000,\"s\":\"t\",\"args\":{\"rank\":1}}"));
  EXPECT_THAT(events,
              Contains(tick + "\"tid\":1,\"ts\":2500.000,\"s\":\"t\",\"args\":{\"rank\":2}}"));
  EXPECT_EQ(Count(events, "{\"rank\":3}"), 0);
  EXPECT_EQ(Count(events, "\"args\":{\"name\":\"negotiation\"}"), 1);
  EXPECT_EQ(Count(events, "\"args\":{\"name\":\"rank 3\"}"), 1);
}

TEST_F(TimelineTest, EachTensorNameGetsOneThreadNamedOnce) {
  const std::string path = TracePath("threads");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 2);
  ASSERT_NE(timeline, nullptr);
  timeline->Negotiation("a", "allreduce", At(0), At(10), {At(0), At(10)}, false);
  timeline->Negotiation("b", "allgather", At(5), At(20), {At(20), At(5)}, false);
  timeline->Negotiation("a", "allreduce", At(30), At(40), {At(40), At(30)}, true);
  ASSERT_TRUE(timeline->Close().ok());

  const std::vector<std::string> events = Events(path);
  EXPECT_EQ(Count(events,
                  "\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
                  "\"args\":{\"name\":\"a\"}"),
            1);
  EXPECT_EQ(Count(events,
                  "\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,"
                  "\"args\":{\"name\":\"b\"}"),
            1);
  EXPECT_EQ(
      Count(events, "{\"name\":\"a\",\"cat\":\"negotiation\",\"ph\":\"X\",\"pid\":1,\"tid\":1,"),
      2);
  EXPECT_EQ(
      Count(events, "{\"name\":\"b\",\"cat\":\"negotiation\",\"ph\":\"X\",\"pid\":1,\"tid\":2,"),
      1);
  EXPECT_EQ(Count(events, "\"cached\":true,\"ranks\":2,\"last_rank\":0}"), 1);
  EXPECT_EQ(Count(events, "\"op\":\"allgather\""), 1);
}

TEST_F(TimelineTest, TimestampsAreMicrosecondsSinceOriginClampedAtZero) {
  const std::string path = TracePath("timestamps");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 1);
  ASSERT_NE(timeline, nullptr);
  timeline->RankPhase(0, PhaseKind::kCopyIn, At(-5000), At(2000), {"x"});
  timeline->RankPhase(0, PhaseKind::kCollective, kOrigin + absl::Nanoseconds(1500),
                      kOrigin + absl::Nanoseconds(3001), {"x"});
  timeline->RankPhase(0, PhaseKind::kCopyOut, At(9000), At(8000), {"x"});  // ends before start
  ASSERT_TRUE(timeline->Close().ok());

  const std::vector<std::string> events = Events(path);
  EXPECT_EQ(Count(events,
                  "\"name\":\"copy_in\",\"cat\":\"exec\",\"ph\":\"X\",\"pid\":2,\"tid\":9,"
                  "\"ts\":0.000,\"dur\":2000.000,"),
            1);
  EXPECT_EQ(Count(events,
                  "\"name\":\"collective\",\"cat\":\"exec\",\"ph\":\"X\",\"pid\":2,"
                  "\"tid\":17,\"ts\":1.500,\"dur\":1.501,"),
            1);
  EXPECT_EQ(Count(events,
                  "\"name\":\"copy_out\",\"cat\":\"exec\",\"ph\":\"X\",\"pid\":2,"
                  "\"tid\":25,\"ts\":9000.000,\"dur\":0.000,"),
            1);
  EXPECT_EQ(Count(events, "\"ts\":-"), 0);
  EXPECT_EQ(Count(events, "\"dur\":-"), 0);
}

TEST_F(TimelineTest, NamesAreEscapedAndInvalidUtf8IsReplaced) {
  const std::string path = TracePath("escape");
  const std::string name = "a\"b\\c\n\x01\t\xff\xc3\xa9/\xed\xa0\x80";  // ..., é, a surrogate
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 1);
  ASSERT_NE(timeline, nullptr);
  timeline->Negotiation(name, "allreduce", At(0), At(1), {At(0)}, false);
  timeline->RankPhase(0, PhaseKind::kQueue, At(0), At(1), {name, "plain"});
  ASSERT_TRUE(timeline->Close().ok());

  const std::string escaped = "\"a\\\"b\\\\c\\n\\u0001\\t\\ufffd\xc3\xa9/\\ufffd\\ufffd\\ufffd\"";
  const std::vector<std::string> events = Events(path);
  EXPECT_EQ(Count(events, "{\"name\":" + escaped + ",\"cat\":\"negotiation\""), 1);
  EXPECT_EQ(Count(events, "\"args\":{\"name\":" + escaped + "}"), 1);  // its thread
  EXPECT_EQ(Count(events, "\"args\":{\"tensors\":" + escaped.substr(0, escaped.size() - 1) +
                              ",plain\",\"count\":2}"),
            1);

  if (!HavePython()) GTEST_SKIP() << "python3 not found: the JSON parser check is skipped";
  std::optional<std::vector<std::string>> loaded = LoadWithPython(path);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_THAT(*loaded, Contains("X a\"b\\c\n\x01\t\xef\xbf\xbd\xc3\xa9/\xef\xbf\xbd\xef\xbf\xbd"
                                "\xef\xbf\xbd"));
}

TEST_F(TimelineTest, OverlappingPhasesOfOneRankGoToSeparateLanes) {
  const std::string path = TracePath("lanes");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 2);
  ASSERT_NE(timeline, nullptr);
  timeline->RankPhase(1, PhaseKind::kQueue, At(0), At(10), {"a"});
  timeline->RankPhase(1, PhaseKind::kQueue, At(5), At(15), {"b"});   // overlaps: lane 2
  timeline->RankPhase(1, PhaseKind::kQueue, At(12), At(20), {"c"});  // lane 1 is free again
  timeline->RankPhase(0, PhaseKind::kQueue, At(6), At(7), {"d"});    // another rank: own lanes
  const int64_t before = timeline->bytes_written();
  timeline->RankPhase(2, PhaseKind::kQueue, At(0), At(1), {"e"});   // no such rank
  timeline->RankPhase(-1, PhaseKind::kQueue, At(0), At(1), {"e"});  // no such rank
  EXPECT_EQ(timeline->bytes_written(), before);
  ASSERT_TRUE(timeline->Close().ok());

  const std::vector<std::string> events = Events(path);
  const std::string queue = "{\"name\":\"queue\",\"cat\":\"exec\",\"ph\":\"X\",";
  EXPECT_THAT(events, Contains(queue + "\"pid\":3,\"tid\":1,\"ts\":0.000,\"dur\":10.000,"
                                       "\"args\":{\"tensors\":\"a\",\"count\":1}}"));
  EXPECT_THAT(events, Contains(queue + "\"pid\":3,\"tid\":2,\"ts\":5.000,\"dur\":10.000,"
                                       "\"args\":{\"tensors\":\"b\",\"count\":1}}"));
  EXPECT_THAT(events, Contains(queue + "\"pid\":3,\"tid\":1,\"ts\":12.000,\"dur\":8.000,"
                                       "\"args\":{\"tensors\":\"c\",\"count\":1}}"));
  EXPECT_THAT(events, Contains(queue + "\"pid\":2,\"tid\":1,\"ts\":6.000,\"dur\":1.000,"
                                       "\"args\":{\"tensors\":\"d\",\"count\":1}}"));
  EXPECT_EQ(Count(events, "\"pid\":3,\"tid\":2,\"args\":{\"name\":\"queue 2\"}"), 1);
  EXPECT_EQ(Count(events, "\"pid\":3,\"tid\":1,\"args\":{\"name\":\"queue\"}"), 1);
  EXPECT_EQ(Count(events, "\"tensors\":\"e\""), 0);
}

TEST_F(TimelineTest, LongTensorListsAreCut) {
  const std::string path = TracePath("tensors");
  std::vector<std::string> many;
  for (int i = 0; i < 100; ++i) many.push_back(absl::StrCat("tensor/", 100 + i));  // 10 bytes
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 1);
  ASSERT_NE(timeline, nullptr);
  timeline->RankPhase(0, PhaseKind::kCollective, At(0), At(1), many);
  timeline->RankPhase(0, PhaseKind::kCollective, At(2), At(3), {std::string(1000, 'x'), "y"});
  ASSERT_TRUE(timeline->Close().ok());

  const std::vector<std::string> events = Events(path);
  // 23 names of 10 bytes and 22 commas fit in 256 bytes.
  std::string kept = "tensor/100";
  for (int i = 1; i < 23; ++i) absl::StrAppend(&kept, ",tensor/", 100 + i);
  EXPECT_EQ(Count(events, "\"tensors\":\"" + kept + " (+77 more)\",\"count\":100}"), 1);
  EXPECT_EQ(Count(events, "\"tensors\":\"" + std::string(Timeline::kMaxTensorsArg, 'x') +
                              "... (+1 more)\",\"count\":2}"),
            1);
}

TEST_F(TimelineTest, SizeCapDropsLaterEventsAndKeepsTheFileValid) {
  const std::string path = TracePath("cap");
  constexpr int64_t kCap = Timeline::kMinMaxBytes;
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 8, kCap);
  ASSERT_NE(timeline, nullptr);
  const std::vector<absl::Time> arrivals = {At(0), At(1), At(2), At(3), At(4), At(5), At(6), At(7)};
  int i = 0;
  for (; i < 1000 && !timeline->truncated(); ++i) {
    timeline->Negotiation(absl::StrCat("grad/", i), "allreduce", At(i * 100), At(i * 100 + 50),
                          arrivals, false);
  }
  ASSERT_TRUE(timeline->truncated());
  EXPECT_GT(i, 2);  // some negotiations fit
  const int64_t at_cap = timeline->bytes_written();
  timeline->Negotiation("late", "allreduce", At(0), At(1), arrivals, false);
  timeline->RankPhase(0, PhaseKind::kQueue, At(0), At(1), {"late"});
  EXPECT_EQ(timeline->bytes_written(), at_cap);
  ASSERT_TRUE(timeline->Close().ok());
  EXPECT_LE(timeline->bytes_written(), kCap);
  EXPECT_EQ(static_cast<int64_t>(ReadFile(path).size()), timeline->bytes_written());

  const std::vector<std::string> events = Events(path);
  ASSERT_FALSE(events.empty());
  EXPECT_THAT(events.back(), HasSubstr("\"name\":\"timeline truncated at size cap\""));
  EXPECT_THAT(events.back(), HasSubstr("\"s\":\"g\""));
  EXPECT_EQ(Count(events, "timeline truncated at size cap"), 1);
  EXPECT_EQ(Count(events, "late"), 0);
  // Every written negotiation is whole: its span and all eight ticks.
  EXPECT_EQ(Count(events, "\"ph\":\"i\",\"pid\":1,\"tid\":0,"), 1);  // the marker
  EXPECT_EQ(Count(events, "\"name\":\"arrive\""), 8 * Count(events, "\"ph\":\"X\""));

  if (!HavePython()) GTEST_SKIP() << "python3 not found: the JSON parser check is skipped";
  std::optional<std::vector<std::string>> loaded = LoadWithPython(path);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->back(), "i timeline truncated at size cap");
}

TEST_F(TimelineTest, FileNeverExceedsTheCapWhereverTheCutFalls) {
  const std::string path = TracePath("cap-sweep");
  const std::vector<absl::Time> arrivals = {At(0), At(1), At(2), At(3)};
  // Negotiations take about 600 bytes; caps one byte apart move where the cut falls.
  for (int64_t cap = Timeline::kMinMaxBytes; cap < Timeline::kMinMaxBytes + 700; cap += 7) {
    std::unique_ptr<Timeline> timeline = OpenOrDie(path, 4, cap);
    ASSERT_NE(timeline, nullptr);
    for (int i = 0; !timeline->truncated(); ++i) {
      timeline->Negotiation(absl::StrCat("t", i), "allreduce", At(i), At(i + 1), arrivals, false);
    }
    ASSERT_TRUE(timeline->Close().ok());
    EXPECT_LE(timeline->bytes_written(), cap);
    const std::vector<std::string> events = Events(path);
    ASSERT_FALSE(events.empty());
    EXPECT_THAT(events.back(), HasSubstr("timeline truncated at size cap")) << "cap " << cap;
  }
}

TEST_F(TimelineTest, CloseIsIdempotentAndLaterEventsAreIgnored) {
  const std::string path = TracePath("close");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 1);
  ASSERT_NE(timeline, nullptr);
  timeline->RankPhase(0, PhaseKind::kQueue, At(0), At(1), {"a"});
  ASSERT_TRUE(timeline->Close().ok());
  const std::string closed = ReadFile(path);
  const int64_t bytes = timeline->bytes_written();
  EXPECT_EQ(static_cast<int64_t>(closed.size()), bytes);
  EXPECT_TRUE(timeline->Close().ok());
  timeline->RankPhase(0, PhaseKind::kQueue, At(2), At(3), {"b"});
  timeline.reset();  // the destructor must not write either
  EXPECT_EQ(ReadFile(path), closed);
  EXPECT_EQ(Events(path).size(), 7u);  // 2 processes x (name, sort), thread (name, sort), phase
}

TEST_F(TimelineTest, DestructorCloses) {
  const std::string path = TracePath("destructor");
  OpenOrDie(path, 3)->Negotiation("a", "broadcast", At(0), At(1), {At(0), At(1), At(0)}, false);
  EXPECT_EQ(Count(Events(path), "\"op\":\"broadcast\""), 1);
}

TEST_F(TimelineTest, OpenOnADirectoryFailsNamingThePath) {
  const std::string dir = ::testing::TempDir();
  absl::StatusOr<std::unique_ptr<Timeline>> timeline =
      Timeline::Open(dir, "job-1", 2, 1 << 20, kOrigin);
  ASSERT_FALSE(timeline.ok());
  EXPECT_THAT(timeline.status().message(), HasSubstr(absl::StrCat("'", dir, "'")));
  EXPECT_THAT(timeline.status().message(), HasSubstr(strerrordesc_np(EISDIR)));
}

TEST_F(TimelineTest, OpenRejectsBadArguments) {
  const std::string path = TracePath("bad");
  EXPECT_EQ(Timeline::Open(path, "j", 0, 1 << 20, kOrigin).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Timeline::Open(path, "j", 2, Timeline::kMinMaxBytes - 1, kOrigin).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TimelineTest, WriteErrorIsReportedByClose) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  absl::StatusOr<std::unique_ptr<Timeline>> timeline =
      Timeline::Open("/dev/full", "job-1", 2, 1 << 20, kOrigin);
  ASSERT_TRUE(timeline.ok()) << timeline.status();  // stdio buffers the header
  (*timeline)->RankPhase(0, PhaseKind::kQueue, At(0), At(1), {"a"});
  const absl::Status status = (*timeline)->Close();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("'/dev/full'"));
  EXPECT_THAT(status.message(), HasSubstr(strerrordesc_np(ENOSPC)));
  EXPECT_EQ((*timeline)->Close(), status);
}

TEST_F(TimelineTest, MixedTraceLoadsWithPython) {
  const std::string path = TracePath("mixed");
  std::unique_ptr<Timeline> timeline = OpenOrDie(path, 2);
  ASSERT_NE(timeline, nullptr);
  timeline->Negotiation("w", "allreduce", At(10), At(30), {At(10), At(30)}, false);
  timeline->RankPhase(0, PhaseKind::kQueue, At(30), At(40), {"w"});
  timeline->RankPhase(1, PhaseKind::kCopyOut, At(50), At(60), {"w"});
  ASSERT_TRUE(timeline->Close().ok());
  EXPECT_THAT(Events(path), Not(Contains(HasSubstr("\"name\":\"timeline truncated"))));

  if (!HavePython()) GTEST_SKIP() << "python3 not found: the JSON parser check is skipped";
  std::optional<std::vector<std::string>> loaded = LoadWithPython(path);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_THAT(*loaded, Contains("X w"));
  EXPECT_THAT(*loaded, Contains("X queue"));
  EXPECT_THAT(*loaded, Contains("X copy_out"));
  EXPECT_EQ(std::count(loaded->begin(), loaded->end(), "i arrive"), 2);
  EXPECT_EQ(std::count(loaded->begin(), loaded->end(), "M process_name"), 3);
}

}  // namespace
}  // namespace troika::coordinator
