// troikarun: starts N ranks of a training program on this machine, with an embedded
// coordinator unless one is given, and supervises them. Parses the command line and wires
// objects; the behaviour lives in Supervisor and PosixProcessLauncher. See kTroikarunUsage.

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/line_forwarder.h"
#include "agent/posix_process_launcher.h"
#include "agent/supervisor.h"
#include "agent/troikarun_options.h"
#include "common/logging.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"

extern char** environ;

namespace troika::agent {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::vector<ProcessSpec> RankSpecs(const TroikarunOptions& options, const std::string& address,
                                   const std::string& job) {
  std::vector<std::string> base;
  for (char** var = environ; *var != nullptr; ++var) base.emplace_back(*var);
  const std::string host = HostName();
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < options.np; ++rank) {
    std::map<std::string, std::string> vars = {
        {"TROIKA_COORDINATOR", address},
        {"TROIKA_JOB", job},
        {"TROIKA_RANK", std::to_string(rank)},
        {"TROIKA_SIZE", std::to_string(options.np)},
        {"TROIKA_LOCAL_RANK", std::to_string(rank)},
        {"TROIKA_HOST", host},
    };
    specs.push_back({options.command, MergeEnvironment(base, vars)});
  }
  return specs;
}

int LaunchFailureCode(const absl::Status& status) {
  if (absl::IsNotFound(status)) return 127;
  if (absl::IsPermissionDenied(status)) return 126;
  return 1;
}

int Run(const TroikarunOptions& options) {
  std::unique_ptr<coordinator::Coordinator> embedded;
  std::string address = options.coordinator;
  if (address.empty()) {
    coordinator::CoordinatorOptions coordinator_options;
    coordinator_options.listen_address = "127.0.0.1:0";
    auto started = coordinator::Coordinator::Start(coordinator_options);
    if (!started.ok()) {
      std::fprintf(stderr, "troikarun: cannot start the embedded coordinator: %s\n",
                   started.status().ToString().c_str());
      return 1;
    }
    embedded = *std::move(started);
    address = absl::StrCat("127.0.0.1:", embedded->port());
  }
  const std::string job = options.job.empty() ? absl::StrCat("troikarun-", getpid()) : options.job;

  // SIGINT/SIGTERM were blocked in every thread by main(); they are read here instead.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);

  SupervisorOptions supervisor_options;
  supervisor_options.grace_period = options.grace_period;
  supervisor_options.signal_fd = signal_fd;
  if (embedded != nullptr) {
    // The other ranks learn the reason at once instead of waiting on the dead rank.
    supervisor_options.on_first_failure = [&](int rank, const ExitStatus& exit) {
      if (auto found = embedded->registry().Find(job); found.ok()) {
        (*found)->Abort(absl::StrCat("rank ", rank, " ", exit.ToString()));
      }
    };
  }
  FdSink out(STDOUT_FILENO);
  FdSink err(STDERR_FILENO);
  PosixProcessLauncher launcher;
  Supervisor supervisor(launcher, out, err, supervisor_options);
  if (absl::Status status = supervisor.Start(RankSpecs(options, address, job)); !status.ok()) {
    err.Write(absl::StrCat("troikarun: ", status.message(), "\n"));
    return LaunchFailureCode(status);
  }
  SupervisorResult result = supervisor.Run();
  if (result.ExitCode() != 0)
    err.Write(absl::StrCat("troikarun: job failed: ", result.Summary(), "\n"));
  if (embedded != nullptr) embedded->Shutdown(absl::Seconds(1));
  if (signal_fd >= 0) close(signal_fd);
  return result.ExitCode();
}

}  // namespace
}  // namespace troika::agent

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread (gRPC's included) inherits the mask.
  troika::BlockTerminationSignals();
  // A closed stdout must not kill troikarun (and with it the ranks' supervision).
  signal(SIGPIPE, SIG_IGN);

  auto options = troika::agent::ParseTroikarunArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!options.ok()) {
    std::fprintf(stderr, "troikarun: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(troika::agent::kTroikarunUsage, stdout);
    return 0;
  }
  troika::LogSeverity severity;
  if (!troika::ParseLogSeverity(options->log_level, &severity)) {
    std::fprintf(stderr, "troikarun: unknown --log_level '%s' (see troikarun --help)\n",
                 options->log_level.c_str());
    return 2;
  }
  troika::SetMinLogSeverity(severity);
  return troika::agent::Run(*options);
}
