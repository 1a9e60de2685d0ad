#include "agent/launcher/host_discovery.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/cli/command_line.h"

namespace troika::agent {

absl::StatusOr<std::vector<HostSlots>> ParseDiscoveredHosts(const std::string& output,
                                                            int default_slots) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(output, '\n')) {
    ++number;
    const std::string line(absl::StripAsciiWhitespace(raw));
    if (line.empty()) continue;
    HostSlots host{line, default_slots};
    const size_t colon = line.rfind(':');
    if (colon != std::string::npos) {
      host.host = line.substr(0, colon);
      if (!absl::SimpleAtoi(line.substr(colon + 1), &host.slots) || host.slots < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("the host discovery script's line ", number, " '", line,
                         "' is not HOST or HOST:SLOTS with SLOTS a number of at least 1"));
      }
    }
    if (host.host.empty() || host.host.front() == '-' ||
        host.host.find_first_of(" \t") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("the host discovery script's line ", number,
                                                     " '", line, "' does not name a host"));
    }
    if (!seen.insert(host.host).second) {
      return absl::InvalidArgumentError(absl::StrCat("the host discovery script names ", host.host,
                                                     " twice (line ", number, ")"));
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

absl::StatusOr<std::string> RunDiscoveryScript(ProcessLauncher& launcher, const std::string& script,
                                               absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<Process>> process =
      launcher.Launch({{"/bin/sh", "-c", script}, CurrentEnvironment()});
  if (!process.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot run the host discovery script ", script,
                                               ": ", process.status().message()));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string out, err;
  bool out_open = true, err_open = true;
  while ((out_open || err_open) && absl::Now() < deadline) {
    pollfd fds[2] = {{(*process)->stdout_fd(), POLLIN, 0}, {(*process)->stderr_fd(), POLLIN, 0}};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    poll(fds, 2, static_cast<int>(std::clamp<int64_t>(left, 0, 100)));
    for (int k = 0; k < 2; ++k) {
      if (fds[k].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[k].fd, buf, sizeof(buf));
      if (n > 0) {
        (k == 0 ? out : err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        (k == 0 ? out_open : err_open) = false;
      }
    }
  }
  if (out_open || err_open) {
    (*process)->Signal(SIGKILL);
    (*process)->Wait();
    return absl::UnavailableError(absl::StrCat("the host discovery script ", script,
                                               " did not finish within ",
                                               absl::FormatDuration(timeout)));
  }
  const ExitStatus exit = (*process)->Wait();
  if (!exit.ok()) {
    const std::string said(absl::StripAsciiWhitespace(err));
    return absl::UnavailableError(absl::StrCat("the host discovery script ", script, " ",
                                               exit.ToString(), said.empty() ? "" : ": ", said));
  }
  return out;
}

HostBlacklist::HostBlacklist(std::optional<std::pair<int, int>> cooldown_range,
                             std::function<double()> uniform)
    : cooldown_range_(cooldown_range), uniform_(std::move(uniform)) {}

void HostBlacklist::Fail(const std::string& host, absl::Time now) {
  State& state = hosts_[host];
  if (state.until > now) return;  // a failure of the same episode
  ++state.failures;
  if (!cooldown_range_.has_value()) {
    state.until = absl::InfiniteFuture();
    return;
  }
  const auto [low, high] = *cooldown_range_;
  const double delay =
      low * static_cast<double>(int64_t{1} << std::min(state.failures, 30)) + uniform_() * low;
  state.until = now + absl::Seconds(std::clamp<double>(delay, low, high));
}

bool HostBlacklist::Blocked(const std::string& host, absl::Time now) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && it->second.until > now;
}

std::string HostBlacklist::Describe(const std::string& host, absl::Time now) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end() || it->second.until <= now) return "not left out";
  if (it->second.until == absl::InfiniteFuture()) return "left out for good";
  return absl::StrCat("left out until its cooldown ends in ",
                      absl::FormatDuration(absl::Trunc(it->second.until - now, absl::Seconds(1))));
}

}  // namespace troika::agent
