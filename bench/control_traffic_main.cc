// troika-control-bench: control-plane traffic per training step as the coordinator sees it —
// messages and bytes received on session streams — for the example trainer on N ranks over
// 2 simulated nodes, with ranks talking to the coordinator directly and through one
// troika-agent per node (aggregation), each with the response cache on (1024 entries, the
// default) and off. Real processes, an in-process coordinator per cache setting.
//
// Per-step figures are the difference between a long and a short run divided by the
// difference in steps, so start-up (attach, data-plane bootstrap, goodbye) cancels out.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flags_usage.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(int, np, 8, "ranks in the job");
ABSL_FLAG(int, nodes, 2, "simulated nodes (hosts); np must be a multiple");
ABSL_FLAG(int, short_steps, 5, "steps of the short run");
ABSL_FLAG(int, long_steps, 25, "steps of the long run");
ABSL_FLAG(std::string, trainer, "", "trainer binary; default: ../examples/troika-example-train");
ABSL_FLAG(std::string, agent, "", "agent binary; default: ../agent/troika-agent");
ABSL_FLAG(absl::Duration, cycle_time, absl::Milliseconds(1),
          "the coordinator's cycle time (troika-coordinator --cycle_time): ranks hold their "
          "requests this long to send them together; 0: each at once");
ABSL_FLAG(bool, schedules, false,
          "steady-state schedules (troika-coordinator --schedules): repeated steps run without "
          "requests");

extern char** environ;

namespace troika::bench {
namespace {

std::string BesideMe(const std::string& relative) {
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string(".");
  return dir.substr(0, dir.rfind('/')) + "/" + relative;
}

// Every process of a run carries the job's token (docs/security.md).
constexpr char kJobToken[] = "TROIKA_JOB_TOKEN=troika-control-bench";

pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> args, vars;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (char** e = environ; *e != nullptr; ++e) vars.push_back(*e);
  for (const auto& v : env) vars.push_back(const_cast<char*>(v.c_str()));
  vars.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int err = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), vars.data());
  posix_spawn_file_actions_destroy(&actions);
  return err == 0 ? pid : -1;
}

struct Traffic {
  int64_t messages = 0;
  int64_t bytes = 0;
  int64_t down_bytes = 0;

  Traffic operator-(const Traffic& o) const {
    return {messages - o.messages, bytes - o.bytes, down_bytes - o.down_bytes};
  }
};

Traffic Seen(const session::ControlStats& s) {
  return {s.up_messages.load(), s.up_bytes.load(), s.down_bytes.load()};
}

// Runs one job of `steps` steps; returns the session traffic the coordinator received (and
// sent: down_bytes).
Traffic RunJob(coordinator::Coordinator& c, bool agents, int steps, int run) {
  const int np = absl::GetFlag(FLAGS_np), nodes = absl::GetFlag(FLAGS_nodes);
  const int per_node = np / nodes;
  const std::string address = absl::StrCat("127.0.0.1:", c.port());
  const std::string job = absl::StrCat(agents ? "agents-" : "direct-", run);
  std::string trainer = absl::GetFlag(FLAGS_trainer);
  if (trainer.empty()) trainer = BesideMe("../examples/troika-example-train");
  std::string agent = absl::GetFlag(FLAGS_agent);
  if (agent.empty()) agent = BesideMe("../agent/troika-agent");
  const std::string steps_flag = absl::StrCat("--steps=", steps);
  Traffic before = Seen(c.control_stats());
  std::vector<pid_t> pids;
  for (int node = 0; node < nodes; ++node) {
    const std::string host = absl::StrCat("node-", node);
    if (agents) {
      pids.push_back(
          Spawn({agent, "--plaintext=true", "--coordinator=" + address, "--job=" + job,
                 absl::StrCat("--nnodes=", nodes), absl::StrCat("--nproc-per-node=", per_node),
                 absl::StrCat("--node_rank=", node), "--host=" + host, "--data_host=127.0.0.1",
                 "--", trainer, steps_flag},
                {kJobToken}));
      continue;
    }
    for (int local = 0; local < per_node; ++local) {
      pids.push_back(Spawn(
          {trainer, steps_flag},
          {"TROIKA_COORDINATOR=" + address, "TROIKA_JOB=" + job,
           absl::StrCat("TROIKA_RANK=", node * per_node + local), absl::StrCat("TROIKA_SIZE=", np),
           "TROIKA_HOST=" + host, "TROIKA_DATA_HOST=127.0.0.1", "TROIKA_PLAINTEXT=1", kJobToken}));
    }
  }
  for (pid_t pid : pids) {
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "troika-control-bench: a process of job %s failed\n", job.c_str());
      std::exit(1);
    }
  }
  return Seen(c.control_stats()) - before;
}

}  // namespace
}  // namespace troika::bench

int main(int argc, char** argv) {
  troika::ShowFlagsOf("bench/control_traffic_main.cc");
  absl::SetProgramUsageMessage(
      "Control-plane messages and bytes per training step received by the coordinator, with "
      "and without agent aggregation.\nUsage: troika-control-bench [--np 8] [--nodes 2]");
  troika::HandleHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const int np = absl::GetFlag(FLAGS_np), nodes = absl::GetFlag(FLAGS_nodes);
  if (nodes < 1 || np % nodes != 0) {
    std::fprintf(stderr, "--np must be a multiple of --nodes\n");
    return 2;
  }
  const int s1 = absl::GetFlag(FLAGS_short_steps), s2 = absl::GetFlag(FLAGS_long_steps);
  std::printf(
      "troika-control-bench: %d ranks on %d nodes, example trainer (5 allreduces per "
      "step), per-step = (run of %d steps - run of %d steps) / %d\n",
      np, nodes, s2, s1, s2 - s1);
  std::printf("%-36s %12s %14s %16s\n", "mode", "up msgs/step", "up bytes/step", "down bytes/step");
  int run = 0;
  for (int capacity : {1024, 0}) {
    troika::coordinator::CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.tls.plaintext = true;  // loopback
    options.registry.job.negotiator.cache_capacity = capacity;
    options.registry.job.negotiator.cycle_time = absl::GetFlag(FLAGS_cycle_time);
    options.registry.job.schedules = absl::GetFlag(FLAGS_schedules);
    auto c = troika::coordinator::Coordinator::Start(options);
    if (!c.ok()) return 1;
    for (bool agents : {false, true}) {
      auto a = troika::bench::RunJob(**c, agents, s1, run++);
      auto b = troika::bench::RunJob(**c, agents, s2, run++);
      const troika::bench::Traffic d = b - a;
      const std::string mode = absl::StrCat(agents ? "through agents (1/node)" : "direct (1/rank)",
                                            capacity > 0 ? ", cache on" : ", cache off");
      std::printf(
          "%-36s %12.1f %14.1f %16.1f\n", mode.c_str(), static_cast<double>(d.messages) / (s2 - s1),
          static_cast<double>(d.bytes) / (s2 - s1), static_cast<double>(d.down_bytes) / (s2 - s1));
    }
  }
  return 0;
}
