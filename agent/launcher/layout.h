#pragma once
// Where troikarun's agents run (docs/hosts.md): one per host used (-H, --hostfile, or the hosts
// an elastic job's discovery script lists first), after every remote host was checked, or
// np / P on this machine; the data plane's interfaces; how each host reaches troikarun.
//
// PlanAgents and FirstHosts run processes (ssh, the discovery script) and block their caller;
// AddressWithPort is pure.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/launch/line_forwarder.h"
#include "agent/launch/process_launcher.h"
#include "agent/launcher/agent_commands.h"
#include "agent/launcher/ssh.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

struct Layout {
  std::vector<AgentPlacement> agents;  // coordinator addresses filled in once it listens
  // How each agent's host reaches troikarun's machine (127.0.0.1 for this machine's), by agent.
  std::vector<std::string> launcher_addresses;
  std::vector<std::string> data_interfaces;  // the agents' --data_interface; empty: none
  bool remote = false;                       // some agent runs on another host
};

// The layout for `options` (its hosts, or np / P agents here), after checking every remote
// host (ssh, troika-agent there, interfaces) and choosing the data plane's interfaces.
// `--verbose` progress goes to `err`. The errors of AssignRanks, ProbeHosts, ChooseInterfaces.
absl::StatusOr<Layout> PlanAgents(const TroikarunOptions& options, ProcessLauncher& launcher,
                                  const SshOptions& ssh, const std::string& agent, OutputSink& err);

// The hosts an elastic job across hosts starts on: what its discovery script lists once the
// hosts have -np slots (asked every second, up to --elastic-timeout), filled in order.
// UNAVAILABLE when they do not by then, or the script fails.
absl::StatusOr<std::vector<HostSlots>> FirstHosts(const TroikarunOptions& options,
                                                  ProcessLauncher& launcher);

// "HOST:PORT" for an IPv4 address or a name, "[ADDRESS]:PORT" for an IPv6 one.
std::string AddressWithPort(const std::string& host, int port);

}  // namespace troika::agent
