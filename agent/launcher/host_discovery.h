#pragma once
// Elastic jobs across hosts (--host-discovery-script, horovodrun's meaning): the script prints
// the hosts available now, one "HOST" or "HOST:SLOTS" per line; troikarun runs it every second
// and starts an agent on each host that appears and drains each one that disappears
// (ElasticHosts, elastic_hosts.h). A host whose agent fails is left out (blacklisted): for
// good, or with --blacklist-cooldown-range MIN MAX for a cooldown that doubles with each
// failure (MIN * 2^failures plus up to MIN at random, within MIN..MAX seconds), after which
// the script's word counts again.
//
// ParseDiscoveredHosts is a pure function; RunDiscoveryScript blocks its caller; HostBlacklist
// is not thread-safe (one owner).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/launch/process_launcher.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// The hosts in the script's `output`; a host without ":SLOTS" has `default_slots`. Blank lines
// are skipped. INVALID_ARGUMENT naming the line for anything else, or a host named twice.
absl::StatusOr<std::vector<HostSlots>> ParseDiscoveredHosts(const std::string& output,
                                                            int default_slots);

// Runs `script` as a shell command line (/bin/sh -c, as horovodrun does: an executable, or a
// command with arguments) with troikarun's environment and returns its stdout. UNAVAILABLE naming
// the exit status and stderr when it fails, or when it runs longer than `timeout` (it is killed
// then).
absl::StatusOr<std::string> RunDiscoveryScript(ProcessLauncher& launcher, const std::string& script,
                                               absl::Duration timeout);

class HostBlacklist {
 public:
  // `cooldown_range`: MIN and MAX seconds; nullopt: failed hosts are left out for good.
  // `uniform` returns a number in [0, 1) (random; tests fix it).
  HostBlacklist(std::optional<std::pair<int, int>> cooldown_range, std::function<double()> uniform);

  // `host`'s agent failed at `now`: it is left out until its cooldown ends (none: for good).
  void Fail(const std::string& host, absl::Time now);
  // Whether `host` is left out at `now`.
  bool Blocked(const std::string& host, absl::Time now) const;
  // "left out for good" or "left out until its cooldown ends in 12s" (for messages).
  std::string Describe(const std::string& host, absl::Time now) const;

 private:
  struct State {
    int failures = 0;
    absl::Time until = absl::InfinitePast();
  };
  const std::optional<std::pair<int, int>> cooldown_range_;
  const std::function<double()> uniform_;
  std::map<std::string, State> hosts_;
};

}  // namespace troika::agent
