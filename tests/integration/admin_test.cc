// The admin RPCs and troikactl against a real coordinator with ranks as threads: what an
// operator sees of a job (pending tensors and the ranks they wait for), and cancellation.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/admin/admin_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using coordinator::AdminClient;
using coordinator::JobInfo;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Describes `job` until `until` holds (or 20 s pass); returns the last description.
JobInfo DescribeUntil(AdminClient& admin, const std::string& job,
                      const std::function<bool(const JobInfo&)>& until) {
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  JobInfo info;
  while (absl::Now() < deadline) {
    auto described = admin.DescribeJob(job);
    EXPECT_TRUE(described.ok()) << described.status();
    if (!described.ok()) break;
    info = *std::move(described);
    if (until(info)) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return info;
}

bool HasPending(const JobInfo& info) { return !info.pending.empty(); }

// Runs troikactl with `args`; returns its exit code and fills `output` (stdout and stderr).
int RunTroikactl(const std::string& args, std::string* output) {
  return RunCommand(absl::StrCat(TROIKACTL_BINARY, " ", args), output);
}

class AdminTest : public ::testing::Test {
 protected:
  TestCluster cluster_;
  AdminClient admin_{cluster_.address(), {.plaintext = true}, kTestAdminToken};
};

TEST_F(AdminTest, DescribeJobShowsPendingTensorWithMissingRankUntilItCompletes) {
  auto contexts = cluster_.Join("job", 2);
  float x0 = 1.0f, x1 = 2.0f;
  Handle h0 = contexts[0]->Allreduce("grad/w", &x0, &x0, DataType::kFloat32, {1});

  JobInfo info = DescribeUntil(admin_, "job", HasPending);
  EXPECT_EQ(info.name, "job");
  EXPECT_EQ(info.size, 2);
  EXPECT_EQ(info.state, "running");
  EXPECT_EQ(info.epoch, 1);
  ASSERT_EQ(info.pending.size(), 1u);
  EXPECT_EQ(info.pending[0].name, "grad/w");
  EXPECT_THAT(info.pending[0].missing_ranks, ElementsAre(1));
  ASSERT_EQ(info.ranks.size(), 2u);
  for (const coordinator::RankInfo& rank : info.ranks) {
    EXPECT_TRUE(rank.attached);
    EXPECT_EQ(rank.host, "localhost");
    EXPECT_TRUE(rank.connected);
    EXPECT_FALSE(rank.departed);
  }
  EXPECT_EQ(info.negotiation.fusion_threshold_bytes, int64_t{64} << 20);

  Handle h1 = contexts[1]->Allreduce("grad/w", &x1, &x1, DataType::kFloat32, {1});
  ASSERT_TRUE(h0.Wait().ok());
  ASSERT_TRUE(h1.Wait().ok());
  EXPECT_EQ(x0, 3.0f);
  info = DescribeUntil(admin_, "job", [](const JobInfo& i) { return i.stragglers.tensors > 0; });
  EXPECT_TRUE(info.pending.empty());
  EXPECT_EQ(info.stragglers.tensors, 1);
  EXPECT_EQ(info.stragglers.ranks.size(), 2u);
}

TEST_F(AdminTest, CancelJobAbortsTheJobAndPendingOpsFailWithTheReason) {
  auto contexts = cluster_.Join("job", 2);
  float x = 1.0f;
  Handle pending = contexts[0]->Allreduce("grad/w", &x, &x, DataType::kFloat32, {1});
  DescribeUntil(admin_, "job", HasPending);

  ASSERT_TRUE(admin_.CancelJob("job", "maintenance window").ok());

  absl::Status status = pending.Wait();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("cancelled by troikactl: maintenance window"));
  float y = 1.0f;
  absl::Status later = contexts[1]->Allreduce("grad/v", &y, &y, DataType::kFloat32, {1}).Wait();
  EXPECT_THAT(std::string(later.message()), HasSubstr("cancelled by troikactl"));
  // Once the ranks' sessions end the job is released, so it is either described as
  // aborted or gone.
  auto info = admin_.DescribeJob("job");
  if (info.ok()) {
    EXPECT_EQ(info->state, "aborted");
    EXPECT_EQ(info->abort_reason, "cancelled by troikactl: maintenance window");
  } else {
    EXPECT_EQ(info.status().code(), absl::StatusCode::kNotFound);
  }
  // Cancelling again fails: the job is already aborted, or gone.
  EXPECT_FALSE(admin_.CancelJob("job", "again").ok());
}

TEST_F(AdminTest, CancelUnknownJobIsNotFound) {
  absl::Status status = admin_.CancelJob("nosuchjob", "");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no job named 'nosuchjob'"));
}

TEST_F(AdminTest, ListJobsListsEveryLiveJob) {
  auto running = cluster_.Join("alpha", 2);
  bool created = false;
  ASSERT_TRUE(cluster_.coordinator().registry().CreateJob("beta", 3, &created).ok());

  auto jobs = admin_.ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  const coordinator::JobSummary& alpha = (*jobs)[0];
  const coordinator::JobSummary& beta = (*jobs)[1];
  EXPECT_EQ(alpha.name, "alpha");
  EXPECT_EQ(alpha.size, 2);
  EXPECT_EQ(alpha.state, "running");
  EXPECT_EQ(alpha.attached_ranks, 2);
  EXPECT_EQ(alpha.pending_tensors, 0);
  EXPECT_EQ(beta.name, "beta");
  EXPECT_EQ(beta.size, 3);
  EXPECT_EQ(beta.state, "attaching");
  EXPECT_EQ(beta.attached_ranks, 0);
}

TEST_F(AdminTest, TroikactlShowPrintsThePendingTensorAndItsMissingRank) {
  auto contexts = cluster_.Join("job", 2);
  float x0 = 1.0f, x1 = 1.0f;
  Handle h0 = contexts[0]->Allreduce("grad/w", &x0, &x0, DataType::kFloat32, {1});
  DescribeUntil(admin_, "job", HasPending);

  std::string output;
  EXPECT_EQ(RunTroikactl(absl::StrCat("--coordinator=", cluster_.address(), " show job"), &output),
            0)
      << output;
  EXPECT_THAT(output, HasSubstr("State:           running"));
  EXPECT_THAT(output, HasSubstr("Pending tensors (1):"));
  EXPECT_THAT(output, ::testing::ContainsRegex("grad/w +[0-9.]+m?s +rank 1\n"));

  output.clear();
  EXPECT_EQ(RunTroikactl(absl::StrCat("--coordinator=", cluster_.address(), " list"), &output), 0)
      << output;
  EXPECT_THAT(output, ::testing::ContainsRegex("job +2 +running +2/2 +1 "));

  ASSERT_TRUE(contexts[1]->Allreduce("grad/w", &x1, &x1, DataType::kFloat32, {1}).Wait().ok());
  ASSERT_TRUE(h0.Wait().ok());
}

TEST_F(AdminTest, TroikactlReportsRpcErrorsWithExitCode1AndUsageErrorsWith2) {
  std::string output;
  EXPECT_EQ(
      RunTroikactl(absl::StrCat("--coordinator=", cluster_.address(), " show nosuchjob"), &output),
      1);
  EXPECT_THAT(output, HasSubstr("no job named 'nosuchjob'"));

  output.clear();
  EXPECT_EQ(
      RunTroikactl(absl::StrCat("--coordinator=", cluster_.address(), " frobnicate"), &output), 2);
  EXPECT_THAT(output, HasSubstr("unknown command 'frobnicate'"));
  output.clear();
  EXPECT_EQ(RunTroikactl("--no_such_flag list", &output), 2);
  output.clear();
  EXPECT_EQ(RunTroikactl("show", &output), 2);
}

// Writes `token` to a fresh file under the test temp dir; returns its path.
std::string WriteTokenFile(const std::string& name, const std::string& token) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, "-", getpid());
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(token.c_str(), f);
    std::fclose(f);
  }
  return path;
}

TEST_F(AdminTest, TroikactlShowWorksWithOnlyTheJobsOwnTokenAndRefusesAWrongOne) {
  auto contexts = cluster_.Join("job", 2);
  // troikactl without the admin token (the test process's environment has both tokens), with
  // `env` (NAME=VALUE, or nothing) in its environment.
  auto troikactl_with = [this](const std::string& env) {
    return absl::StrCat("env -u TROIKA_ADMIN_TOKEN -u TROIKA_ADMIN_TOKEN_FILE -u TROIKA_JOB_TOKEN",
                        " -u TROIKA_JOB_TOKEN_FILE ", env, " ", TROIKACTL_BINARY,
                        " --coordinator=", cluster_.address(), " ");
  };
  const std::string troikactl = troikactl_with("");
  const std::string good = WriteTokenFile("job-token", kTestJobToken);
  const std::string wrong = WriteTokenFile("wrong-job-token", "not-the-job-token");

  std::string output;
  EXPECT_EQ(RunCommand(troikactl + "--job_token_file=" + good + " show job", &output), 0) << output;
  EXPECT_THAT(output, HasSubstr("State:           running"));
  output.clear();
  EXPECT_EQ(
      RunCommand(troikactl_with(absl::StrCat("TROIKA_JOB_TOKEN=", kTestJobToken)) + "show job",
                 &output),
      0)
      << output;
  EXPECT_THAT(output, HasSubstr("State:           running"));
  output.clear();
  EXPECT_EQ(RunCommand(troikactl_with("TROIKA_JOB_TOKEN_FILE=" + good) + "show job", &output), 0)
      << output;
  EXPECT_THAT(output, HasSubstr("State:           running"));

  // A wrong job token, or none, is refused, and shows nothing of the job.
  output.clear();
  EXPECT_EQ(RunCommand(troikactl + "--job_token_file=" + wrong + " show job", &output), 1)
      << output;
  EXPECT_THAT(output, HasSubstr("wrong job token"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("State:")));
  output.clear();
  EXPECT_EQ(RunCommand(troikactl_with("TROIKA_JOB_TOKEN=not-the-job-token") + "show job", &output),
            1)
      << output;
  EXPECT_THAT(output, HasSubstr("wrong job token"));
  output.clear();
  EXPECT_EQ(RunCommand(troikactl + "show job", &output), 1) << output;
  EXPECT_THAT(output, HasSubstr("carries no job token"));
  EXPECT_THAT(output, HasSubstr("no admin token"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("State:")));

  // The job's token describes that job only; everything else still needs the admin token.
  output.clear();
  EXPECT_EQ(RunCommand(troikactl + "--job_token_file=" + good + " list", &output), 1) << output;
  EXPECT_THAT(output, HasSubstr("no admin token"));
  output.clear();
  EXPECT_EQ(RunCommand(troikactl + "--job_token_file=" + good + " cancel job", &output), 1)
      << output;
  // The refused cancel changed nothing: the job still trains.
  float x0 = 1.0f, x1 = 2.0f;
  Handle h0 = contexts[0]->Allreduce("grad/w", &x0, &x0, DataType::kFloat32, {1});
  Handle h1 = contexts[1]->Allreduce("grad/w", &x1, &x1, DataType::kFloat32, {1});
  ASSERT_TRUE(h0.Wait().ok());
  ASSERT_TRUE(h1.Wait().ok());
  EXPECT_EQ(x0, 3.0f);
}

TEST_F(AdminTest, TroikactlCancelAbortsTheJob) {
  auto contexts = cluster_.Join("job", 2);
  std::string output;
  EXPECT_EQ(RunTroikactl(
                absl::StrCat("--coordinator=", cluster_.address(), " cancel job --reason=bad-data"),
                &output),
            0)
      << output;
  EXPECT_THAT(output, HasSubstr("job 'job' cancelled"));
  float x = 1.0f;
  absl::Status status = contexts[0]->Allreduce("grad/w", &x, &x, DataType::kFloat32, {1}).Wait();
  EXPECT_THAT(std::string(status.message()), HasSubstr("cancelled by troikactl: bad-data"));
}

// A bad --coordinator fails troikactl at once (exit 1), naming the address and what is wrong
// with it or why it cannot be reached.
TEST(TroikactlAddressTest, BadCoordinatorFailsAtOnceNamingTheAddressAndTheCause) {
  struct Case {
    std::string address;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"no-port-here", "coordinator address 'no-port-here' is invalid: no port"},
           {"localhost:0", "coordinator address 'localhost:0' is invalid: port 0 is out of range"},
           {"[::1", "coordinator address '[::1' is invalid: '[' without a closing ']'"},
           {"unix:/nonexistent/troika.sock",
            "cannot reach the coordinator at unix:/nonexistent/troika.sock: no socket at "
            "/nonexistent/troika.sock"},
           {"troika-no-such-host.invalid:7070",  // RFC 6761: never resolves
            "cannot reach the coordinator at troika-no-such-host.invalid:7070: cannot resolve "
            "host 'troika-no-such-host.invalid'"},
           {"127.0.0.1:1", "cannot reach the coordinator at 127.0.0.1:1 ("},
       }) {
    SCOPED_TRACE(c.address);
    std::string output;
    const absl::Time start = absl::Now();
    EXPECT_EQ(RunTroikactl(absl::StrCat("--plaintext --admin_token_file= --coordinator='",
                                        c.address, "' list"),
                           &output),
              1);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_THAT(output, HasSubstr(absl::StrCat("troikactl: ", c.message))) << output;
  }
}

// Every program a user runs answers --help (and -h) with its usage on stdout and exit 0,
// naming itself and no source path of the build machine (Abseil's own --help exits 1 and
// prints "Flags from /path/to/main.cc").
TEST(HelpTest, EveryProgramAnswersHelpWithExit0NamingItselfAndNoSourcePath) {
  const struct {
    const char* binary;
    const char* name;
    const char* flag;  // one flag its help must list
  } programs[] = {
      {COORDINATOR_BINARY, "troika-coordinator", "--listen"},
      {TROIKACTL_BINARY, "troikactl", "--job_token_file"},
      {AGENT_BINARY, "troika-agent", "--job_token_file"},
      {TROIKARUN_BINARY, "troikarun", "--nproc-per-node"},
      {EXAMPLE_TRAIN_BINARY, "troika-example-train", "--steps"},
  };
  for (const auto& program : programs) {
    for (const char* help : {"--help", "-h"}) {
      SCOPED_TRACE(absl::StrCat(program.name, " ", help));
      std::string output;
      // stdout only: help is an answer, not an error.
      EXPECT_EQ(
          RunCommand(absl::StrCat("{ ", program.binary, " ", help, " 2>/dev/null; }"), &output), 0)
          << output;
      EXPECT_THAT(output, HasSubstr(program.name));
      EXPECT_THAT(output, HasSubstr(program.flag));
      EXPECT_THAT(output, ::testing::Not(HasSubstr(TROIKA_SOURCE_DIR)));
      EXPECT_THAT(output, ::testing::Not(HasSubstr("Flags from")));
      EXPECT_THAT(output, ::testing::Not(::testing::ContainsRegex("/[^ ]*\\.cc")));
    }
  }
}

}  // namespace
}  // namespace troika::testing
