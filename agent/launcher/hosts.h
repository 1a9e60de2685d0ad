#pragma once
// Where a multi-host job's ranks go (-H / --hostfile): hosts are filled in order, each up to
// its slots, as horovodrun places them; one troika-agent per host used.
//
// Pure functions (IsThisHost reads the host name); thread-safe.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// One host's agent: the host as the user named it and the ranks it runs.
struct HostAssignment {
  std::string host;
  int ranks = 0;
  bool operator==(const HostAssignment&) const = default;
};

// The hosts `np` ranks use, in order. INVALID_ARGUMENT when the hosts have fewer than `np`
// slots, a host is named twice, or the hosts used would run different numbers of ranks
// (troika-agents of one job run equal blocks of ranks: docs/hosts.md).
absl::StatusOr<std::vector<HostAssignment>> AssignRanks(const std::vector<HostSlots>& hosts,
                                                        int np);

// Whether `host` names this machine (localhost, a loopback address, or this host's name):
// its agent starts here, without ssh.
bool IsThisHost(const std::string& host);

}  // namespace troika::agent
