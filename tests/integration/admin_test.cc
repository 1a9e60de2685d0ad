// The admin RPCs and troikactl against a real coordinator with ranks as threads: what an
// operator sees of a job (pending tensors and the ranks they wait for), and cancellation.

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/admin_client.h"
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

}  // namespace
}  // namespace troika::testing
