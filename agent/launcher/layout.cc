#include "agent/launcher/layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/launch/interfaces.h"
#include "agent/launcher/host_check.h"
#include "agent/launcher/host_discovery.h"
#include "agent/launcher/hosts.h"

namespace troika::agent {

absl::StatusOr<Layout> PlanAgents(const TroikarunOptions& options, ProcessLauncher& launcher,
                                  const SshOptions& ssh, const std::string& agent,
                                  OutputSink& err) {
  Layout layout;
  if (options.hosts.empty()) {
    const int per_node = options.RanksPerAgent();
    const int nodes = options.np / per_node;
    for (int node = 0; node < nodes; ++node) {
      layout.agents.push_back({"", false, node, nodes, per_node, ""});
    }
    layout.launcher_addresses.assign(nodes, "127.0.0.1");
    return layout;
  }
  absl::StatusOr<std::vector<HostAssignment>> assigned = AssignRanks(options.hosts, options.np);
  if (!assigned.ok()) return assigned.status();
  std::vector<std::string> remote_hosts;
  const int nodes = static_cast<int>(assigned->size());
  for (int node = 0; node < nodes; ++node) {
    const HostAssignment& a = (*assigned)[node];
    const bool remote = !IsThisHost(a.host);
    layout.agents.push_back({a.host, remote, node, nodes, a.ranks, ""});
    if (remote) remote_hosts.push_back(a.host);
  }
  layout.remote = !remote_hosts.empty();
  if (!layout.remote) {
    layout.launcher_addresses.assign(nodes, "127.0.0.1");
    layout.data_interfaces = options.network_interfaces;  // for hosts discovered later
    return layout;
  }
  if (options.verbose) {
    err.Write(
        absl::StrCat("troikarun: checking ", absl::StrJoin(remote_hosts, ", "), " over ssh\n"));
  }
  absl::StatusOr<std::vector<HostProbe>> probes =
      ProbeHosts(launcher, ssh, remote_hosts, agent, options.start_timeout);
  if (!probes.ok()) return probes.status();
  // This machine's agents are probed here: the data plane's interface must be theirs too.
  std::vector<HostProbe> all = *probes;
  size_t next_remote = 0;
  for (const AgentPlacement& placement : layout.agents) {
    if (placement.remote) {
      layout.launcher_addresses.push_back((*probes)[next_remote++].launcher_address);
    } else {
      layout.launcher_addresses.push_back("127.0.0.1");
      all.push_back({placement.host, "127.0.0.1", Ipv4Interfaces()});
    }
  }
  absl::StatusOr<std::vector<std::string>> interfaces =
      ChooseInterfaces(all, options.network_interfaces);
  if (!interfaces.ok()) return interfaces.status();
  layout.data_interfaces = *std::move(interfaces);
  if (options.verbose) {
    err.Write(absl::StrCat("troikarun: every host answered; the data plane uses ",
                           absl::StrJoin(layout.data_interfaces, ","), "\n"));
  }
  return layout;
}

absl::StatusOr<std::vector<HostSlots>> FirstHosts(const TroikarunOptions& options,
                                                  ProcessLauncher& launcher) {
  const absl::Time deadline = absl::Now() + options.attach_timeout;
  const int slots_per_host = std::max(options.slots_per_host, 1);
  std::string last;
  while (true) {
    absl::StatusOr<std::string> output =
        RunDiscoveryScript(launcher, options.host_discovery_script, options.start_timeout);
    if (!output.ok()) return output.status();
    absl::StatusOr<std::vector<HostSlots>> hosts = ParseDiscoveredHosts(*output, slots_per_host);
    if (!hosts.ok()) return hosts.status();
    int slots = 0;
    std::vector<HostSlots> used;
    for (const HostSlots& host : *hosts) {
      if (slots >= options.np) break;
      used.push_back(host);
      slots += host.slots;
    }
    if (slots >= options.np) return used;
    last = absl::StrCat("the host discovery script lists ", slots, slots == 1 ? " slot" : " slots",
                        "; the job starts with -np ", options.np);
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          last, " (waited ", absl::FormatDuration(options.attach_timeout), ", --elastic-timeout)"));
    }
    absl::SleepFor(absl::Seconds(1));
  }
}

std::string AddressWithPort(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                             : absl::StrCat(host, ":", port);
}

}  // namespace troika::agent
