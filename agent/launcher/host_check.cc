#include "agent/launcher/host_check.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/cli/command_line.h"

namespace troika::agent {
namespace {

struct Pending {
  std::string host;
  std::unique_ptr<Process> process;
  std::string out, err;
  bool out_open = true, err_open = true;  // until their end of file
  std::optional<ExitStatus> exit;
  std::string failure;  // set when it could not start
};

// Appends what is readable on `fd`; false at end of file (or error).
bool Drain(int fd, std::string& into) {
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

std::string Why(const Pending& p, const std::string& agent) {
  if (!p.failure.empty()) return p.failure;
  if (!p.exit.has_value()) return "no answer within the start timeout (--start-timeout)";
  const std::string said(absl::StripAsciiWhitespace(p.err));
  if (p.exit->code == 255) return absl::StrCat("unreachable: ", said.empty() ? "ssh failed" : said);
  if (p.exit->code == 127 || p.exit->code == 126) {
    return absl::StrCat(agent,
                        " cannot be run there (troikarun expects Troika installed at the "
                        "same path on every host)",
                        said.empty() ? "" : ": ", said);
  }
  return absl::StrCat("the check ", p.exit->ToString(), said.empty() ? "" : ": ", said);
}

}  // namespace

absl::StatusOr<std::vector<HostProbe>> ProbeHosts(ProcessLauncher& launcher, const SshOptions& ssh,
                                                  const std::vector<std::string>& hosts,
                                                  const std::string& agent,
                                                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  SshOptions options = ssh;
  options.connect_timeout = timeout;
  const std::string command =
      absl::StrCat("echo \"$SSH_CONNECTION\"; exec ", ShellQuote(agent), " --print_interfaces");
  std::vector<Pending> pending(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    pending[i].host = hosts[i];
    absl::StatusOr<std::unique_ptr<Process>> process =
        launcher.Launch({SshArgv(options, hosts[i], command), CurrentEnvironment()});
    if (process.ok()) {
      pending[i].process = *std::move(process);
    } else {
      pending[i].failure = std::string(process.status().message());
    }
  }
  // Until every check has exited and its output ended, or the deadline.
  while (absl::Now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Pending*, bool>> streams;  // (check, is stderr); null: an exit fd
    auto watch = [&](Pending* check, bool is_err, int fd) {
      fds.push_back({fd, POLLIN, 0});
      streams.push_back({check, is_err});
    };
    for (Pending& p : pending) {
      if (p.process == nullptr) continue;
      if (!p.exit.has_value()) p.exit = p.process->TryReap();
      if (p.out_open) watch(&p, false, p.process->stdout_fd());
      if (p.err_open) watch(&p, true, p.process->stderr_fd());
      if (!p.exit.has_value() && p.process->exit_fd() >= 0) {
        watch(nullptr, false, p.process->exit_fd());
      }
    }
    const bool running = std::any_of(pending.begin(), pending.end(), [](const Pending& p) {
      return p.process != nullptr && !p.exit.has_value();
    });
    if (!running && std::none_of(streams.begin(), streams.end(),
                                 [](const auto& s) { return s.first != nullptr; })) {
      break;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left_ms, 0, 50)));
    for (size_t k = 0; k < fds.size(); ++k) {
      auto [check, is_err] = streams[k];
      if (check == nullptr || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      if (!Drain(fds[k].fd, is_err ? check->err : check->out)) {
        (is_err ? check->err_open : check->out_open) = false;
      }
    }
  }
  std::vector<HostProbe> probes;
  std::vector<std::string> failures;
  for (Pending& p : pending) {
    if (p.process != nullptr && !p.exit.has_value()) {
      p.process->Signal(SIGKILL);
      p.process->Wait();
    }
    if (p.exit.has_value() && p.exit->ok()) {
      const size_t newline = p.out.find('\n');
      const std::vector<std::string> connection =
          absl::StrSplit(p.out.substr(0, newline), ' ', absl::SkipEmpty());
      if (connection.size() == 4) {
        probes.push_back(
            {p.host, connection[0],
             ParseInterfaces(newline == std::string::npos ? "" : p.out.substr(newline))});
        continue;
      }
      p.failure = absl::StrCat("its shell did not tell the ssh connection ($SSH_CONNECTION is '",
                               absl::StripAsciiWhitespace(p.out.substr(0, newline)), "')");
    }
    failures.push_back(absl::StrCat(p.host, ": ", Why(p, agent)));
  }
  if (!failures.empty()) {
    return absl::UnavailableError(absl::StrCat(
        failures.size() == 1 ? "a host failed its check: " : "hosts failed their check: ",
        absl::StrJoin(failures, "; ")));
  }
  return probes;
}

absl::StatusOr<std::vector<std::string>> ChooseInterfaces(
    const std::vector<HostProbe>& probes, const std::vector<std::string>& requested) {
  auto has = [](const HostProbe& p, const std::string& name) {
    return std::any_of(p.interfaces.begin(), p.interfaces.end(),
                       [&](const NetworkInterface& i) { return i.name == name; });
  };
  auto describe = [](const HostProbe& p) {
    std::vector<std::string> names;
    for (const NetworkInterface& i : p.interfaces)
      names.push_back(absl::StrCat(i.name, " ", i.address));
    return absl::StrCat(p.host, " has ", names.empty() ? "none" : absl::StrJoin(names, ", "));
  };
  if (!requested.empty()) {
    std::vector<std::string> missing;
    for (const HostProbe& p : probes) {
      if (std::none_of(requested.begin(), requested.end(),
                       [&](const std::string& name) { return has(p, name); })) {
        missing.push_back(describe(p));
      }
    }
    if (!missing.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--network-interface ", absl::StrJoin(requested, ","),
                       " is not up on every host: ", absl::StrJoin(missing, "; ")));
    }
    return requested;
  }
  if (probes.empty()) return std::vector<std::string>{};
  for (const NetworkInterface& candidate : probes.front().interfaces) {
    if (candidate.loopback) continue;
    if (std::all_of(probes.begin(), probes.end(),
                    [&](const HostProbe& p) { return has(p, candidate.name); })) {
      return std::vector<std::string>{candidate.name};
    }
  }
  std::vector<std::string> all;
  for (const HostProbe& p : probes) all.push_back(describe(p));
  return absl::InvalidArgumentError(
      absl::StrCat("the hosts share no network interface name for the data plane (",
                   absl::StrJoin(all, "; "), "); name one with --network-interface"));
}

}  // namespace troika::agent
