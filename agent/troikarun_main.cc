// troikarun: starts N ranks of a training program on this machine through N/P troika-agent
// processes, with an embedded coordinator unless one is given, and supervises the agents.
// Parses the command line and wires objects; the behaviour lives in Supervisor and the agent.
// See kTroikarunUsage.

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/cli/command_line.h"
#include "agent/launch/control_pipe_launcher.h"
#include "agent/launch/line_forwarder.h"
#include "agent/launch/posix_process_launcher.h"
#include "agent/launch/rank_file_sink.h"
#include "agent/launch/supervisor.h"
#include "agent/launcher/agent_commands.h"
#include "agent/launcher/check_build.h"
#include "agent/launcher/discovery_loop.h"
#include "agent/launcher/elastic_hosts.h"
#include "agent/launcher/embedded_coordinator.h"
#include "agent/launcher/host_check.h"
#include "agent/launcher/host_discovery.h"
#include "agent/launcher/hosts.h"
#include "agent/launcher/layout.h"
#include "agent/launcher/ssh.h"
#include "agent/launcher/troikarun_options.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/tls.h"
#include "coordinator/coordinator.h"
#include "coordinator/state/secret.h"

namespace troika::agent {
namespace {

// The agents get this much longer than their ranks: they stop their ranks themselves.
constexpr absl::Duration kAgentGraceMargin = absl::Seconds(5);
// When one agent fails, the others normally end on their own (the coordinator aborts the job
// for them, and they give their ranks a second to exit); only then are they sent SIGTERM.
constexpr absl::Duration kAgentStopDelay = absl::Seconds(3);

// troika-agent, next to troikarun's own executable.
absl::StatusOr<std::string> AgentPath() {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::NotFoundError("cannot read /proc/self/exe");
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + "troika-agent";
  if (access(path.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot find troika-agent: ", path, " does not exist or is not executable"));
  }
  return path;
}

// `path` from troikarun's directory, for agents that start elsewhere.
std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? absl::StrCat(cwd, "/", path) : path;
}

// The contents of a /proc file; empty if it cannot be read (its process is gone).
std::string ReadProcFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fd);
  return n < 0 ? "" : text;
}

// Sends SIGKILL to every living child of this process; called once the supervisor has reaped
// the agents, when every child left is a stray. Returns how many children (zombies included)
// it found.
int KillStrayChildren() {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  int found = 0;
  const pid_t self = getpid();
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    // With read(2), not a stream: a process that exits meanwhile makes the read fail (ESRCH),
    // which libstdc++'s filebuf throws as an exception even with none enabled (it aborted
    // troikarun at the end of a job that had finished).
    const std::string text = ReadProcFile(absl::StrCat("/proc/", pid, "/stat"));
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    const size_t close = text.rfind(')');
    char state = 0;
    int ppid = 0;
    if (close == std::string::npos ||
        std::sscanf(text.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != self) {
      continue;
    }
    ++found;
    if (state != 'Z') kill(pid, SIGKILL);
  }
  closedir(proc);
  return found;
}

// troikarun is a child subreaper: ranks whose agent died (and their children) become its
// children instead of init's. Once the agents are gone, none of them may outlive troikarun:
// they are killed and reaped (bounded, in case new ones keep appearing).
void ReapStrayChildren() {
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (KillStrayChildren() > 0 && absl::Now() < deadline) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

int Run(const TroikarunOptions& options) {
  absl::StatusOr<std::string> agent = AgentPath();
  if (!agent.ok()) {
    std::fprintf(stderr, "troikarun: %s\n", std::string(agent.status().message()).c_str());
    return 1;
  }
  PosixProcessLauncher posix;
  ControlPipeLauncher launcher(posix);
  SshOptions ssh;
  ssh.command = SshCommandFromEnvironment(std::getenv("TROIKA_SSH_COMMAND"));
  ssh.port = options.ssh_port;
  ssh.identity_file = options.ssh_identity_file;
  ssh.connect_timeout = options.start_timeout;
  // An elastic job across hosts starts on the hosts its discovery script lists.
  TroikarunOptions launch_options = options;
  if (!options.host_discovery_script.empty()) {
    absl::StatusOr<std::vector<HostSlots>> first = FirstHosts(options, posix);
    if (!first.ok()) {
      std::fprintf(stderr, "troikarun: %s\n", std::string(first.status().message()).c_str());
      return 1;
    }
    launch_options.hosts = *std::move(first);
  }
  FdSink err(STDERR_FILENO);
  absl::StatusOr<Layout> layout = PlanAgents(launch_options, posix, ssh, *agent, err);
  if (!layout.ok()) {
    std::fprintf(stderr, "troikarun: %s\n", std::string(layout.status().message()).c_str());
    return layout.status().code() == absl::StatusCode::kInvalidArgument &&
                   layout.status().message().find("--network-interface") == std::string::npos
               ? 2
               : 1;
  }
  std::unique_ptr<coordinator::Coordinator> embedded;
  std::string address = options.coordinator;
  if (address.empty()) {
    // Other hosts' agents reach it at the address their ssh connection came from; it listens
    // on every interface then, in plaintext, and only the job's token (random, never on a
    // command line) admits an agent or rank to the job.
    const bool ipv6 =
        std::any_of(layout->launcher_addresses.begin(), layout->launcher_addresses.end(),
                    [](const std::string& a) { return a.find(':') != std::string::npos; });
    const std::string listen = !layout->remote && options.host_discovery_script.empty()
                                   ? "127.0.0.1:0"
                               : ipv6 ? "[::]:0"
                                      : "0.0.0.0:0";
    const coordinator::CoordinatorOptions coordinator_options =
        EmbeddedCoordinatorOptions(options, listen);
    auto started = coordinator::Coordinator::Start(coordinator_options);
    if (!started.ok()) {
      std::fprintf(stderr, "troikarun: cannot start the embedded coordinator: %s\n",
                   started.status().ToString().c_str());
      return 1;
    }
    embedded = *std::move(started);
    address = absl::StrCat("127.0.0.1:", embedded->port());
  }
  for (size_t i = 0; i < layout->agents.size(); ++i) {
    layout->agents[i].coordinator =
        embedded == nullptr ? options.coordinator
                            : AddressWithPort(layout->launcher_addresses[i], embedded->port());
  }
  const std::string job = options.job.empty() ? absl::StrCat("troikarun-", getpid()) : options.job;
  // The job's token: the one the environment gives (a job on a shared coordinator), else a
  // fresh one that only this troikarun's agents get.
  absl::StatusOr<ClientSecurity> env = SecurityFromEnvironment();
  if (!env.ok()) {
    std::fprintf(stderr, "troikarun: %s\n", std::string(env.status().message()).c_str());
    return 2;
  }
  const std::string job_token =
      env->job_token.empty() ? coordinator::Secret::Generate() : env->job_token;
  // Held, so the abort reason can still be read once the registry has dropped the job: its
  // lineage, which keeps the job in force (an elastic job's generations, or a job formed anew
  // as its ranks shut down and attach again, are successors) but not every one before it.
  std::shared_ptr<coordinator::JobLineage> lineage;
  std::shared_ptr<coordinator::Job> embedded_job;  // the first, until the agents start
  if (embedded != nullptr) {
    bool created = false;
    auto found = embedded->registry().CreateJob(job, options.np, &created,
                                                coordinator::Secret::Of(job_token), options.min_np,
                                                options.max_np);
    if (found.ok()) {
      embedded_job = *found;
      lineage = std::make_shared<coordinator::JobLineage>(embedded_job);
      embedded_job->Track(lineage);
    }
  }
  // The job in force.
  auto current = [&lineage]() -> std::shared_ptr<coordinator::Job> {
    return lineage != nullptr ? coordinator::JobRegistry::Latest(lineage->anchor()) : nullptr;
  };
  if (embedded != nullptr && options.max_np > options.np && launch_options.hosts.empty()) {
    // The embedded coordinator is reachable on this machine only: how to grow the job here.
    std::fprintf(stderr,
                 "troikarun: job '%s' takes up to %d ranks; to add %d more on this machine:\n"
                 "  TROIKA_JOB_TOKEN=%s %s --coordinator=%s --plaintext=true --job=%s "
                 "--nnodes=1 --nproc-per-node=%d --min_np=%d --max_np=%d -- %s\n",
                 job.c_str(), options.max_np, options.RanksPerAgent(), job_token.c_str(),
                 agent->c_str(), address.c_str(), job.c_str(), options.RanksPerAgent(),
                 options.min_np, options.max_np, ShellJoin(options.command).c_str());
  }
  if (embedded_job != nullptr && !options.timeline.empty()) {
    constexpr int64_t kTimelineMaxBytes = int64_t{1} << 30;  // as troikactl's default
    if (absl::Status s = embedded_job->StartTimeline(options.timeline, kTimelineMaxBytes);
        !s.ok()) {
      std::fprintf(stderr, "troikarun: --timeline %s: %s\n", options.timeline.c_str(),
                   std::string(s.message()).c_str());
      return 1;
    }
  }

  // SIGINT/SIGTERM were blocked in every thread by main(); they are read here instead.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);

  // The agents' hosts, by the supervisor's index ("" on this machine without -H).
  std::mutex hosts_mu;
  std::vector<std::string> agent_hosts;  // guarded by hosts_mu
  for (const AgentPlacement& placement : layout->agents) agent_hosts.push_back(placement.host);
  // "agent 1 on h2 exited with code 255 (...)": an agent's end, in words.
  auto agent_ended = [&](int index, const ExitStatus& exit) {
    std::string host;
    {
      std::lock_guard<std::mutex> lock(hosts_mu);
      if (static_cast<size_t>(index) < agent_hosts.size()) host = agent_hosts[index];
    }
    const bool remote = !host.empty() && !IsThisHost(host);
    return absl::StrCat("agent ", index, host.empty() ? "" : " on ", host, " ", exit.ToString(),
                        remote && exit.code == 255 && exit.signal == 0
                            ? " (ssh's code: the connection to the host failed, or the agent "
                              "there was killed)"
                            : "");
  };
  SupervisorOptions supervisor_options;
  supervisor_options.grace_period = options.grace_period + kAgentGraceMargin;
  supervisor_options.stop_delay = kAgentStopDelay;
  supervisor_options.signal_fd = signal_fd;
  supervisor_options.noun = "agent";
  supervisor_options.prefix_output = false;  // the agents prefix their ranks' lines
  // An elastic job goes on without a lost node (the coordinator ends the generation); any
  // other job stops when one agent fails.
  supervisor_options.stop_on_failure = options.min_np == 0;
  embedded_job.reset();
  if (lineage != nullptr) {
    // An agent that failed without its ranks' exits aborting the job (it could not start
    // them, or it died): the other agents learn it at once.
    supervisor_options.on_first_failure = [&](int node, const ExitStatus& exit) {
      const std::shared_ptr<coordinator::Job> job = current();
      // An elastic job that runs goes on without the node (the coordinator ends the
      // generation for its ranks); one whose ranks never all attached (its first generation
      // still attaching) cannot.
      if (options.min_np > 0 &&
          (job->epoch() > 1 || job->state() != coordinator::Job::State::kAttaching)) {
        return;
      }
      job->Abort(coordinator::AbortCause::kRankExit, agent_ended(node, exit));
    };
  }
  FdSink terminal_out(STDOUT_FILENO);
  // --output-filename: each rank's lines also go to DIR/rank.N/stdout and stderr.
  std::unique_ptr<RankFileSink> out_files, err_files;
  if (!options.output_filename.empty()) {
    absl::StatusOr<std::unique_ptr<RankFileSink>> made_out =
        RankFileSink::Create(options.output_filename, "stdout", options.np, terminal_out);
    absl::StatusOr<std::unique_ptr<RankFileSink>> made_err =
        made_out.ok() ? RankFileSink::Create(options.output_filename, "stderr", options.np, err)
                      : made_out.status();
    if (!made_err.ok()) {
      err.Write(absl::StrCat("troikarun: --output-filename: ", made_err.status().message(), "\n"));
      return 1;
    }
    out_files = *std::move(made_out);
    err_files = *std::move(made_err);
  }
  OutputSink& out = out_files != nullptr ? static_cast<OutputSink&>(*out_files) : terminal_out;
  OutputSink& rank_err = err_files != nullptr ? static_cast<OutputSink&>(*err_files) : err;
  JobLaunch launch;
  launch.agent = *agent;
  launch.job = job;
  launch.plaintext = embedded != nullptr && options.tls_cert.empty();
  launch.data_interfaces = layout->data_interfaces;
  launch.environment = CurrentEnvironment();
  // Every agent (and through it every rank) carries the job's token.
  if (!job_token.empty()) launch.variables["TROIKA_JOB_TOKEN"] = job_token;
  for (const auto& [name, value] : options.rank_env) launch.variables[name] = value;
  if (!options.tls_ca.empty()) launch.variables["TROIKA_TLS_CA"] = AbsolutePath(options.tls_ca);
  for (const std::string& entry : options.extra_env) {  // -x wins
    const size_t eq = entry.find('=');
    launch.variables[entry.substr(0, eq)] = eq == std::string::npos ? "" : entry.substr(eq + 1);
  }
  if (char cwd[PATH_MAX]; getcwd(cwd, sizeof(cwd)) != nullptr) launch.working_directory = cwd;
  launch.ssh = ssh;
  std::vector<ProcessSpec> specs;
  for (const AgentPlacement& placement : layout->agents) {
    specs.push_back(AgentSpec(options, launch, placement));
    if (options.verbose) {
      std::fprintf(stderr, "troikarun: agent %d: %s\n", placement.node_rank,
                   ShellJoin(specs.back().argv).c_str());
    }
  }
  // An elastic job across hosts: the discovery loop adds and drains hosts while it runs.
  std::unique_ptr<ElasticHosts> elastic_hosts;
  std::unique_ptr<DiscoveryLoop> discovery;
  Supervisor* supervising = nullptr;
  if (!options.host_discovery_script.empty()) {
    std::mt19937_64 random{std::random_device{}()};
    elastic_hosts = std::make_unique<ElasticHosts>(
        options.max_np, HostBlacklist(options.blacklist_cooldown_range, [random]() mutable {
          return std::uniform_real_distribution<double>(0, 1)(random);
        }));
    for (const AgentPlacement& placement : layout->agents) {
      elastic_hosts->Started(placement.host, placement.ranks);
    }
    supervisor_options.on_exit = [&](int index, const ExitStatus& exit) {
      std::string host;
      {
        std::lock_guard<std::mutex> lock(hosts_mu);
        host = agent_hosts.at(static_cast<size_t>(index));
      }
      discovery->AgentExited(host, exit);
    };
    DiscoveryLoop::Hooks hooks;
    hooks.start = [&](const std::string& host, int ranks) {
      const std::shared_ptr<coordinator::Job> now = current();
      if (now == nullptr || (now->state() != coordinator::Job::State::kRunning &&
                             now->state() != coordinator::Job::State::kAttaching)) {
        return true;  // the job is ending: nothing joins it
      }
      const bool remote = !IsThisHost(host);
      std::string reaches = "127.0.0.1";
      if (remote) {
        absl::StatusOr<std::vector<HostProbe>> probe =
            ProbeHosts(posix, ssh, {host}, *agent, options.start_timeout);
        absl::StatusOr<std::vector<std::string>> interfaces =
            probe.ok() ? ChooseInterfaces(*probe, layout->data_interfaces)
                       : absl::StatusOr<std::vector<std::string>>(probe.status());
        if (!interfaces.ok()) {
          err.Write(absl::StrCat("troikarun: cannot add ", host, ": ",
                                 interfaces.status().message(), "\n"));
          return false;
        }
        reaches = probe->front().launcher_address;
      }
      // A joining agent's --nnodes only has to make a job of at least --min-np ranks (the
      // job exists; its size is not the agent's to set).
      const int nnodes = std::max(1, (options.min_np + ranks - 1) / ranks);
      ProcessSpec spec =
          AgentSpec(options, launch,
                    {host, remote, -1, nnodes, ranks, AddressWithPort(reaches, embedded->port())});
      std::lock_guard<std::mutex> lock(hosts_mu);
      const int index = supervising->Add(std::move(spec));
      if (index < 0) return true;  // the job is being stopped
      if (agent_hosts.size() <= static_cast<size_t>(index)) agent_hosts.resize(index + 1);
      agent_hosts[static_cast<size_t>(index)] = host;
      err.Write(absl::StrCat("troikarun: ", host, " was discovered: its ", ranks,
                             ranks == 1 ? " rank joins" : " ranks join",
                             " the job at its next commit\n"));
      return true;
    };
    hooks.drain = [&](const std::string& host) {
      const std::shared_ptr<coordinator::Job> now = current();
      return now != nullptr ? now->Drain(host) : absl::OkStatus();
    };
    hooks.resets = [&] {
      const std::shared_ptr<coordinator::Job> now = current();
      return now != nullptr ? static_cast<int>(now->epoch() - 1) : 0;
    };
    hooks.fail = [&](const std::string& reason) {
      if (const std::shared_ptr<coordinator::Job> now = current(); now != nullptr) {
        now->Abort(coordinator::AbortCause::kCancelled, reason);
      }
    };
    discovery = std::make_unique<DiscoveryLoop>(
        DiscoveryLoop::Settings{options.host_discovery_script, std::max(options.slots_per_host, 1),
                                options.reset_limit},
        *elastic_hosts, posix, std::move(hooks), err);
  }
  Supervisor supervisor(launcher, out, rank_err, supervisor_options);
  supervising = &supervisor;
  if (absl::Status status = supervisor.Start(specs); !status.ok()) {
    err.Write(absl::StrCat("troikarun: ", status.message(), "\n"));
    return 1;
  }
  if (discovery != nullptr) discovery->Start();
  SupervisorResult result = supervisor.Run();
  if (discovery != nullptr) discovery->Stop();
  ReapStrayChildren();
  // The job's last generation (an elastic job's successors) says how the job ended.
  const std::shared_ptr<coordinator::Job> last = current();
  int code = result.ExitCode();
  if (code != 0 && options.min_np > 0 && result.signal == 0) {
    // An elastic job finished without the nodes it lost: it succeeded. (With another
    // coordinator troikarun cannot ask: an agent that exited 0 says its ranks finished.)
    const bool finished = last != nullptr
                              ? last->state() == coordinator::Job::State::kFinished
                              : std::any_of(result.exits.begin(), result.exits.end(),
                                            [](const ExitStatus& exit) { return exit.ok(); });
    if (finished) {
      err.Write(
          absl::StrCat("troikarun: the job finished; it went on after ", result.Summary(), "\n"));
      code = 0;
    }
  }
  if (code != 0) {
    const std::string cause = last != nullptr ? last->abort_reason() : "";
    err.Write(absl::StrCat("troikarun: job failed: ",
                           result.signal == 0 && !cause.empty() ? cause : result.Summary(), "\n"));
  }
  if (embedded != nullptr) embedded->Shutdown(absl::Seconds(1));
  if (signal_fd >= 0) close(signal_fd);
  return code;
}

}  // namespace
}  // namespace troika::agent

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread (gRPC's included) inherits the mask.
  troika::BlockTerminationSignals();
  // A closed stdout must not kill troikarun (and with it the agents' supervision).
  signal(SIGPIPE, SIG_IGN);

  auto options =
      troika::agent::ParseTroikarunArgs(std::vector<std::string>(argv + 1, argv + argc),
                                        troika::agent::HorovodEnvironment::FromProcess());
  if (!options.ok()) {
    std::fprintf(stderr, "troikarun: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(troika::agent::kTroikarunUsage, stdout);
    return 0;
  }
  if (options->check_build || options->version) {
    const troika::agent::BuildFeatures build = troika::agent::BuildFeatures::OfThisBuild();
    std::fputs((options->check_build ? troika::agent::CheckBuildReport(build, options->verbose)
                                     : troika::agent::VersionReport(build))
                   .c_str(),
               stdout);
    return 0;
  }
  for (const std::string& warning : options->warnings) {
    std::fprintf(stderr, "troikarun: %s\n", warning.c_str());
  }
  troika::LogSeverity severity;
  if (!troika::ParseLogSeverity(options->log_level, &severity)) {
    std::fprintf(stderr, "troikarun: unknown --log_level '%s' (see troikarun --help)\n",
                 options->log_level.c_str());
    return 2;
  }
  troika::SetMinLogSeverity(severity);
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // see ReapStrayChildren()
  return troika::agent::Run(*options);
}
