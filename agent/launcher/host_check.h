#pragma once
// Before a multi-host job starts, troikarun asks every remote host at once, over ssh, to run
// `troika-agent --print_interfaces`: a host that does not answer within the start timeout, or
// cannot run the agent, fails the launch with every such host named and why. A host that
// answers tells the address it sees troikarun connect from ($SSH_CONNECTION: the agents there
// reach the coordinator at it) and its interfaces (the data plane's is chosen among those all
// hosts share).
//
// Thread-compatible: one thread calls ProbeHosts.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/launch/interfaces.h"
#include "agent/launch/process_launcher.h"
#include "agent/launcher/ssh.h"

namespace troika::agent {

struct HostProbe {
  std::string host;
  // How the host reaches troikarun's machine: the client address of its ssh connection.
  std::string launcher_address;
  std::vector<NetworkInterface> interfaces;
};

// Probes `hosts` (remote ones) in parallel through `launcher`, running `agent` there (the
// same path as here). Returns one probe per host, in order, or UNAVAILABLE naming each host
// that failed: unreachable (ssh's own words), troika-agent missing there, or no answer
// within `timeout` (those ssh processes are killed).
absl::StatusOr<std::vector<HostProbe>> ProbeHosts(ProcessLauncher& launcher, const SshOptions& ssh,
                                                  const std::vector<std::string>& hosts,
                                                  const std::string& agent, absl::Duration timeout);

// The data plane's interfaces (the agents' --data_interface) for hosts that answered
// `probes`: `requested` (--network-interface) when every host has one of them up; else the
// non-loopback interface names every host has, the first host's order deciding, the first
// one. INVALID_ARGUMENT naming each host's interfaces when there is none.
absl::StatusOr<std::vector<std::string>> ChooseInterfaces(
    const std::vector<HostProbe>& probes, const std::vector<std::string>& requested);

}  // namespace troika::agent
