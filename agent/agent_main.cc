// troika-agent: one node of a Troika job. Parses the command line and wires objects; the
// behaviour lives in Agent (agent.h). See kAgentUsage.

#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/launch/environment_block.h"
#include "agent/launch/interfaces.h"
#include "agent/launch/line_forwarder.h"
#include "agent/launch/posix_process_launcher.h"
#include "agent/node/agent.h"
#include "agent/node/agent_options.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/tls.h"

namespace {

// --launcher_stdin: the job's environment comes first on stdin (troikarun over ssh).
bool ApplyEnvironmentFromStdin() {
  absl::StatusOr<std::vector<std::string>> entries =
      troika::agent::ReadEnvironmentBlock(STDIN_FILENO);
  if (!entries.ok()) {
    std::fprintf(stderr, "troika-agent: %s\n", std::string(entries.status().message()).c_str());
    return false;
  }
  for (const std::string& entry : *entries) {
    const size_t eq = entry.find('=');
    setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1);
  }
  return true;
}

// --launcher_stdin: then stdin stays open while troikarun lives; its end (troikarun stopped
// the job, died, or its ssh connection broke) stops the agent as SIGTERM does.
void StopWhenStdinEnds() {
  std::thread([] {
    char buf[256];
    while (true) {
      const ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    kill(getpid(), SIGTERM);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--print_interfaces") == 0) {
    std::fputs(troika::agent::FormatInterfaces(troika::agent::Ipv4Interfaces()).c_str(), stdout);
    return 0;
  }
  // Before any thread exists, so that every thread (gRPC's included) inherits the mask; the
  // signals are read from a signalfd and forwarded to the ranks.
  troika::BlockTerminationSignals();
  // A closed stdout must not kill the agent (and with it the ranks' supervision).
  signal(SIGPIPE, SIG_IGN);
  const pid_t parent = getppid();

  auto options = troika::agent::ParseAgentArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!options.ok()) {
    std::fprintf(stderr, "troika-agent: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(troika::agent::kAgentUsage, stdout);
    return 0;
  }
  if (options->launcher_stdin && !ApplyEnvironmentFromStdin()) return 2;
  if (!options->data_interfaces.empty()) {
    absl::StatusOr<std::string> address = troika::agent::InterfaceAddress(options->data_interfaces);
    if (!address.ok()) {
      std::fprintf(stderr, "troika-agent: --data_interface: %s\n",
                   std::string(address.status().message()).c_str());
      return 2;
    }
    options->data_host = *address;
  }
  // Transport-security defaults from the environment (troikarun with an external
  // coordinator, containers mounting a Secret).
  absl::StatusOr<troika::ClientSecurity> env = troika::SecurityFromEnvironment();
  absl::Status problem = env.status();
  if (problem.ok() && !options->job_token_file.empty()) {  // the flag wins
    absl::StatusOr<std::string> token = troika::ReadTokenFile(options->job_token_file);
    if (token.ok()) {
      env->job_token = *std::move(token);
    } else {
      problem = token.status();
    }
  }
  if (!problem.ok()) {
    std::fprintf(stderr, "troika-agent: %s\n", std::string(problem.message()).c_str());
    return 2;
  }
  if (options->tls_ca.empty()) options->tls_ca = env->tls.ca_file;
  if (options->tls_cert.empty()) options->tls_cert = env->tls.cert_file;
  if (options->tls_key.empty()) options->tls_key = env->tls.key_file;
  options->plaintext = options->plaintext || env->tls.plaintext;
  options->job_token = env->job_token;
  troika::LogSeverity severity;
  if (!troika::ParseLogSeverity(options->log_level, &severity)) {
    std::fprintf(stderr, "troika-agent: unknown --log_level '%s' (see troika-agent --help)\n",
                 options->log_level.c_str());
    return 2;
  }
  troika::SetMinLogSeverity(severity);
  if (options->stop_with_parent) {
    // Delivered as SIGTERM through the signalfd below, like a stop from the user.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) kill(getpid(), SIGTERM);  // the parent is gone already
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
  if (options->launcher_stdin) StopWhenStdinEnds();

  troika::agent::FdSink out(STDOUT_FILENO);
  troika::agent::FdSink err(STDERR_FILENO);
  troika::agent::PosixProcessLauncher launcher;
  int code;
  {
    troika::agent::Agent agent(*std::move(options), launcher, out, err, signal_fd);
    code = agent.Run();
  }
  if (signal_fd >= 0) close(signal_fd);
  return code;
}
