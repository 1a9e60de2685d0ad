#include "agent/node/agent_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::HasSubstr;

TEST(AgentOptionsTest, ParsesEveryFlagAndKeepsTheCommandUntouched) {
  auto o = ParseAgentArgs({"--coordinator=10.0.0.1:7070",
                           "--job",
                           "j1",
                           "--nnodes=2",
                           "--nproc-per-node",
                           "8",
                           "--node_rank=1",
                           "--min_np=4",
                           "--max_np=24",
                           "--max_restarts=3",
                           "--host=node-b",
                           "--data_host=10.1.0.2",
                           "--socket_dir=/run/troika",
                           "--grace_period=250ms",
                           "--liveness_timeout=4s",
                           "--aggregation_window=0",
                           "--attach_timeout=2m",
                           "--connect_timeout=3s",
                           "--stop_with_parent=true",
                           "--log_level=info",
                           "--metrics_listen=0.0.0.0:9091",
                           "--",
                           "./train",
                           "--nnodes",
                           "5",
                           "--"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "10.0.0.1:7070");
  EXPECT_EQ(o->job, "j1");
  EXPECT_EQ(o->nnodes, 2);
  EXPECT_EQ(o->nproc_per_node, 8);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->min_np, 4);
  EXPECT_EQ(o->max_np, 24);
  EXPECT_EQ(o->max_restarts, 3);
  EXPECT_EQ(o->host, "node-b");
  EXPECT_EQ(o->data_host, "10.1.0.2");
  EXPECT_EQ(o->socket_dir, "/run/troika");
  EXPECT_EQ(o->grace_period, absl::Milliseconds(250));
  EXPECT_EQ(o->liveness_timeout, absl::Seconds(4));
  EXPECT_EQ(o->aggregation_window, absl::ZeroDuration());
  EXPECT_EQ(o->connect_timeout, absl::Seconds(3));
  EXPECT_EQ(o->attach_timeout, absl::Minutes(2));
  EXPECT_TRUE(o->stop_with_parent);
  EXPECT_EQ(o->log_level, "info");
  EXPECT_EQ(o->metrics_listen, "0.0.0.0:9091");
  EXPECT_EQ(o->command, (std::vector<std::string>{"./train", "--nnodes", "5", "--"}));
}

TEST(AgentOptionsTest, DefaultsAndUnderscoreSpellings) {
  auto o = ParseAgentArgs({"--coordinator=unix:/tmp/c.sock", "--job=j", "--nnodes=1",
                           "--nproc_per_node=2", "--", "true"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, 2);
  EXPECT_EQ(o->node_rank, -1);
  EXPECT_FALSE(o->host.empty()) << "gethostname()";
  EXPECT_EQ(o->data_host, "");
  EXPECT_EQ(o->socket_dir, "/tmp");
  EXPECT_EQ(o->grace_period, absl::Seconds(5));
  EXPECT_EQ(o->liveness_timeout, absl::Seconds(10));
  EXPECT_EQ(o->aggregation_window, absl::Milliseconds(2));
  EXPECT_EQ(o->attach_timeout, absl::Seconds(60));
  EXPECT_EQ(o->connect_timeout, absl::Seconds(10));
  EXPECT_FALSE(o->stop_with_parent);
  EXPECT_EQ(o->log_level, "warning");
  EXPECT_EQ(o->metrics_listen, "");
}

TEST(AgentOptionsTest, HelpNeedsNothingElseAndDescribesEveryOption) {
  auto o = ParseAgentArgs({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
  const std::string usage = kAgentUsage;
  for (const char* text : {"--coordinator",
                           "--job",
                           "--nnodes",
                           "--nproc-per-node",
                           "--node_rank",
                           "--min_np",
                           "--host",
                           "--data_host",
                           "--socket_dir",
                           "--grace_period",
                           "--liveness_timeout",
                           "--aggregation_window",
                           "--attach_timeout",
                           "--connect_timeout",
                           "--stop_with_parent",
                           "--log_level",
                           "--metrics_listen",
                           "TROIKA_COORDINATOR",
                           "TROIKA_LOCAL_SIZE",
                           "TROIKA_DEVICE",
                           "TROIKA_DATA_HOST",
                           "Exit status",
                           "127"}) {
    EXPECT_THAT(usage, HasSubstr(text));
  }
}

TEST(AgentOptionsTest, UsageErrorsNameTheProblem) {
  const std::vector<std::string> base = {"--coordinator=h:1", "--job=j", "--nnodes=2",
                                         "--nproc-per-node=2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--job=j", "--nnodes=1", "--nproc-per-node=1", "--", "x"}, "--coordinator is required"},
      {{"--coordinator=h:1", "--nnodes=1", "--nproc-per-node=1", "--", "x"}, "--job is required"},
      {{"--coordinator=h:1", "--job=j", "--nproc-per-node=1", "--", "x"}, "--nnodes is required"},
      {{"--coordinator=h:1", "--job=j", "--nnodes=1", "--", "x"}, "--nproc-per-node is required"},
      {with({"--node_rank=2", "--", "x"}), "--node_rank 2 is not below --nnodes 2"},
      {with({"--min_np=5", "--", "x"}), "--min_np 5 is above the job's 4 ranks"},
      {with({"--max_np=8", "--", "x"}), "--max_np needs --min_np (an elastic job)"},
      {with({"--max_restarts=1", "--", "x"}), "--max_restarts needs --min_np (an elastic job)"},
      {with({"--min_np=2", "--max_np=3", "--", "x"}), "--max_np 3 is below the job's 4 ranks"},
      {with({"--nproc-per-node=0", "--", "x"}), "between 1 and 1024, got 0"},
      {with({"--coordinator=nohost", "--", "x"}),
       "--coordinator: coordinator address 'nohost' is invalid: no port (expected host:port, "
       "[ipv6]:port or unix:/path/to/socket)"},
      {with({"--coordinator=h:0", "--", "x"}), "port 0 is out of range (1-65535)"},
      {with({"--coordinator=unix:", "--", "x"}), "'unix:' is invalid: empty socket path"},
      {with({"--liveness_timeout=0", "--", "x"}), "> 0"},
      {with({"--connect_timeout=0", "--", "x"}), "--connect_timeout must be finite and > 0"},
      {with({"--grace_period=soon", "--", "x"}), "not a duration"},
      {with({"--stop_with_parent=yes", "--", "x"}), "true or false"},
      {with({"--bogus=1", "--", "x"}), "unknown option 'bogus'"},
      {with({"--metrics_listen=9091", "--", "x"}), "--metrics_listen must be HOST:PORT"},
      {with({"--metrics_listen=:http", "--", "x"}), "--metrics_listen must be HOST:PORT"},
      {with({"./train"}), "the command goes after \"--\""},
      {with({}), "missing \"--\""},
  };
  for (const Case& c : cases) {
    auto o = ParseAgentArgs(c.args);
    ASSERT_FALSE(o.ok()) << c.message;
    EXPECT_TRUE(absl::IsInvalidArgument(o.status()));
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("(see troika-agent --help)"));
  }
}

}  // namespace
}  // namespace troika::agent
