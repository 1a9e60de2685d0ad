// Timeline and autotuning end to end: a real coordinator, ranks as threads, troikactl for the
// timeline. The written trace is loaded by Python's JSON parser and checked for what an
// operator looks for; the autotuner runs its whole budget on a live job.

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/tuning/autotuner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

// This process's own directory for timelines, autotune files and scripts: ctest runs this
// binary's tests in parallel processes, and other builds may run them at the same time.
const std::string& Scratch() {
  static const std::string dir = MakeScratchDir("telemetry");
  return dir;
}

// Runs troikactl against `cluster`; returns its exit code, output in `output`.
int Troikactl(TestCluster& cluster, const std::string& args, std::string* output) {
  return RunCommand(absl::StrCat(TROIKACTL_BINARY, " --coordinator=", cluster.address(), " ", args),
                    output);
}

// `steps` steps of three allreduces on every rank, checking the sums.
void Steps(std::vector<std::unique_ptr<Context>>& contexts, int steps) {
  OnEveryRank(kRanks, [&](int rank) {
    for (int step = 0; step < steps; ++step) {
      std::vector<float> a(64, 1.0f), b(3, 2.0f), c(1000, 1.0f);
      Handle ha = contexts[rank]->Allreduce("grad/a", a.data(), a.data(), DataType::kFloat32, {64});
      Handle hb = contexts[rank]->Allreduce("grad/b", b.data(), b.data(), DataType::kFloat32, {3});
      Handle hc =
          contexts[rank]->Allreduce("grad/c", c.data(), c.data(), DataType::kFloat32, {1000});
      ASSERT_TRUE(ha.Wait().ok() && hb.Wait().ok() && hc.Wait().ok());
      ASSERT_EQ(a[0], kRanks);
      ASSERT_EQ(b[2], 2 * kRanks);
    }
  });
}

// Runs Python `script` with `args`.
int RunPython(const std::string& script, const std::string& args, std::string* output) {
  const std::string path = absl::StrCat(
      Scratch(), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".py");
  std::ofstream(path) << script;
  const int code = RunCommand(absl::StrCat("python3 ", path, " ", args), output);
  std::remove(path.c_str());
  return code;
}

void WaitUntilReleased(TestCluster& cluster, const std::string& job) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (cluster.coordinator().registry().Find(job).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_FALSE(cluster.coordinator().registry().Find(job).ok()) << "job never released";
}

// Checks the trace at `path` of a job of kRanks ranks; prints what it found on failure.
constexpr char kCheckTrace[] = R"(
import json, sys
path, size = sys.argv[1], int(sys.argv[2])
events = json.load(open(path))["traceEvents"]
spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "negotiation"]
cached = [e for e in spans if e["args"]["cached"]]
ticks = [e for e in events if e.get("ph") == "i" and e.get("name") == "arrive"]
problems = []
if len(cached) < 30: problems.append("%d cached negotiation spans, expected >= 30" % len(cached))
for span in cached:
    if span["args"]["ranks"] != size:
        problems.append("cached span %s has %s ranks" % (span["name"], span["args"]["ranks"]))
        continue
    mine = [t for t in ticks if t["tid"] == span["tid"] and
            span["ts"] - 0.002 <= t["ts"] <= span["ts"] + span["dur"] + 0.002]
    if sorted(set(t["args"]["rank"] for t in mine)) != list(range(size)):
        problems.append("cached span %s at %s lacks a tick per rank" % (span["name"], span["ts"]))
for rank in range(size):
    phases = set(e["name"] for e in events if e.get("pid") == rank + 2 and e.get("cat") == "exec")
    if "collective" not in phases or "queue" not in phases:
        problems.append("rank %d has phases %s" % (rank, sorted(phases)))
print("\n".join(problems[:10]) or "ok: %d spans (%d cached), %d ticks" %
      (len(spans), len(cached), len(ticks)))
sys.exit(1 if problems else 0)
)";

TEST(TelemetryTest, TimelineHasArrivalTicksForCachedStepsAndEveryRanksPhases) {
  if (std::system("python3 -c pass") != 0) GTEST_SKIP() << "python3 is not installed";
  coordinator::CoordinatorOptions options;
  options.service.timeline_dir = Scratch();
  TestCluster cluster(options);
  auto contexts = cluster.Join("job", kRanks);
  Steps(contexts, 3);  // the tensors are cached from here on

  std::string out;
  ASSERT_EQ(Troikactl(cluster, "timeline start job trace.json", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("trace.json"));
  Steps(contexts, 20);
  out.clear();
  ASSERT_EQ(Troikactl(cluster, "show job", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("Timeline:        writing"));
  // Leaving sends each rank's last phases; the job's end closes the timeline.
  for (auto& c : contexts) ASSERT_TRUE(c->Shutdown().ok());
  WaitUntilReleased(cluster, "job");

  std::string report;
  EXPECT_EQ(RunPython(kCheckTrace, absl::StrCat(Scratch(), "/trace.json ", kRanks), &report), 0)
      << report;
  std::printf("%s", report.c_str());
}

// Whether a trace shows, on every rank, one collective covering all `count` tensors.
constexpr char kCheckFused[] = R"(
import json, sys
path, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = json.load(open(path))["traceEvents"]
bad = []
for rank in range(size):
    fused = [e for e in events if e.get("pid") == rank + 2 and e.get("name") == "collective"
             and e["args"]["count"] == count]
    if len(fused) != 1:
        bad.append("rank %d: %d collectives of %d tensors" % (rank, len(fused), count))
print("\n".join(bad) or "ok")
sys.exit(1 if bad else 0)
)";

TEST(TelemetryTest, GroupedAllreduceOfFiftyTensorsRunsAsOneFusedCollective) {
  if (std::system("python3 -c pass") != 0) GTEST_SKIP() << "python3 is not installed";
  constexpr int kTensors = 50;
  coordinator::CoordinatorOptions options;
  options.service.timeline_dir = Scratch();
  TestCluster cluster(options);
  auto contexts = cluster.Join("grouped", kRanks);
  std::string out;
  ASSERT_EQ(Troikactl(cluster, "timeline start grouped grouped.json", &out), 0) << out;
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<std::vector<float>> data(kTensors);
    std::vector<GroupTensor> tensors;
    for (int i = 0; i < kTensors; ++i) {
      data[i].assign(i + 1, static_cast<float>(rank));
      tensors.push_back(
          {absl::StrCat("grad/", i), data[i].data(), data[i].data(), DataType::kFloat32, {i + 1}});
    }
    for (Handle& h : contexts[rank]->GroupedAllreduce("step", tensors)) {
      ASSERT_TRUE(h.Wait().ok());
    }
    for (int i = 0; i < kTensors; ++i) ASSERT_EQ(data[i][i], 6.0f);  // 0 + 1 + 2 + 3
  });
  for (auto& c : contexts) ASSERT_TRUE(c->Shutdown().ok());
  WaitUntilReleased(cluster, "grouped");
  std::string report;
  EXPECT_EQ(RunPython(kCheckFused, absl::StrCat(Scratch(), "/grouped.json ", kRanks, " ", kTensors),
                      &report),
            0)
      << report;
}

TEST(TelemetryTest, TroikactlStopsATimelineAndRefusesPathsOutsideTheTimelineDir) {
  coordinator::CoordinatorOptions options;
  options.service.timeline_dir = Scratch();
  TestCluster cluster(options);
  auto contexts = cluster.Join("job", kRanks);
  std::string out;
  EXPECT_EQ(Troikactl(cluster, "timeline start job ../escape.json", &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("plain file name"));
  out.clear();
  EXPECT_EQ(Troikactl(cluster, "timeline stop job", &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("not writing a timeline"));
  out.clear();
  ASSERT_EQ(Troikactl(cluster, "timeline start job stopped.json --max_bytes=100000", &out), 0)
      << out;
  Steps(contexts, 2);
  out.clear();
  ASSERT_EQ(Troikactl(cluster, "timeline stop job", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("stopped.json written"));
  std::ifstream file(Scratch() + "/stopped.json");
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_THAT(text.str(), ::testing::EndsWith("]}\n"));
  out.clear();
  ASSERT_EQ(Troikactl(cluster, "show job", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("Timeline:        last written to"));
  for (auto& c : contexts) ASSERT_TRUE(c->Shutdown().ok());
}

// Whether every rank but `rank` submitted `name` and `rank` did not (as the coordinator
// sees it).
bool PendingOnlyOn(coordinator::Job& job, const std::string& name, int rank) {
  for (const coordinator::PendingTensorInfo& p : job.Describe().pending) {
    if (p.name == name && p.missing_ranks == std::vector<int>{rank}) return true;
  }
  return false;
}

TEST(TelemetryTest, RankSleeping50MsBeforeEachAllreduceIsTheStragglerInTroikactl) {
  TestCluster cluster;
  auto contexts = cluster.Join("slow", kRanks);
  auto job = cluster.coordinator().registry().Find("slow");
  ASSERT_TRUE(job.ok()) << job.status();
  OnEveryRank(kRanks, [&](int rank) {
    for (int step = 0; step < 12; ++step) {
      if (rank == 2) {
        // Last for every tensor however the machine delays the others: it submits once theirs
        // arrived (a not-hung bound), then 50 ms late.
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        while (!PendingOnlyOn(**job, "grad", 2) && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        absl::SleepFor(absl::Milliseconds(50));
      }
      float x = 1;
      ASSERT_TRUE(contexts[rank]->Allreduce("grad", &x, &x, DataType::kFloat32, {1}).Wait().ok());
    }
  });
  std::string out;
  ASSERT_EQ(Troikactl(cluster, "show slow", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("Stragglers (12 tensors, window of 12): rank 2 straggling")) << out;
  // Rank 2's row: last for every tensor of the window.
  EXPECT_THAT(out, ::testing::ContainsRegex("\n2 +12 +[0-9.]+ms +[0-9.]+ms +12 +12/12 ")) << out;
  for (auto& c : contexts) ASSERT_TRUE(c->Shutdown().ok());
}

TEST(TelemetryTest, AutotunerRunsItsBudgetOnALiveJobAndSavesTheBest) {
  coordinator::CoordinatorOptions options;
  coordinator::AutotuneOptions& autotune = options.registry.job.autotune.emplace().options;
  autotune.warmup_samples = 1;
  autotune.steps_per_sample = 3;
  autotune.max_samples = 4;
  options.registry.autotune_dir = Scratch();
  TestCluster cluster(options);
  auto contexts = cluster.Join("tuned", kRanks);
  auto job = cluster.coordinator().registry().Find("tuned");
  ASSERT_TRUE(job.ok());
  // Every rank trains until rank 0 sees tuning done (its verdict travels by allreduce).
  OnEveryRank(kRanks, [&](int rank) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (;;) {
      std::vector<float> a(4096, 1.0f), b(512, 1.0f);
      Handle ha = contexts[rank]->Allreduce("w/a", a.data(), a.data(), DataType::kFloat32, {4096});
      Handle hb = contexts[rank]->Allreduce("w/b", b.data(), b.data(), DataType::kFloat32, {512});
      ASSERT_TRUE(ha.Wait().ok() && hb.Wait().ok());
      ASSERT_EQ(a[7], kRanks);
      float go = rank == 0 && !(*job)->Describe().autotune.done && absl::Now() < deadline;
      ASSERT_TRUE(contexts[rank]->Allreduce("go", &go, &go, DataType::kFloat32, {1}).Wait().ok());
      if (go == 0) break;
    }
  });
  const coordinator::JobInfo info = (*job)->Describe();
  ASSERT_TRUE(info.autotune.done) << "tuning did not finish within 60 s: "
                                  << info.autotune.evaluations << " evaluations, "
                                  << info.autotune.warmup_left << " warm-up samples left";
  EXPECT_EQ(info.autotune.evaluations, 4);
  EXPECT_GT(info.autotune.best_score, 0);
  // The best configuration is in force and saved for a later job.
  EXPECT_EQ(info.negotiation.fusion_threshold_bytes, info.autotune.best.fusion_threshold_bytes);
  EXPECT_EQ(info.negotiation.cycle_time, info.autotune.best.cycle_time);
  auto saved = coordinator::LoadTuningParams(Scratch() + "/tuned-autotune.params");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->fusion_threshold_bytes, info.autotune.best.fusion_threshold_bytes);
  std::ifstream csv(Scratch() + "/tuned-autotune.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << "a header and one row per configuration";
  EXPECT_THAT(lines[0], HasSubstr("fusion_threshold_bytes"));
  for (auto& c : contexts) ASSERT_TRUE(c->Shutdown().ok());
}

}  // namespace
}  // namespace troika::testing
