#pragma once
// troikarun's flags checked against each other, once they are all parsed (ParseTroikarunArgs).
//
// Pure function; thread-safe.

#include <set>
#include <string>

#include "absl/status/status.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// Usage errors for flags that do not go together (those horovodrun's argparse groups exclude,
// such as --autotune with --no-autotune; -H with --hostfile; --nproc-per-node with hosts; the
// embedded coordinator's flags with --coordinator; more ranks than the hosts' slots, ...);
// fills in what follows from others (a discovery script's job is elastic: --min-np defaults
// to -np, --max-np to kMaxRanks) and adds a warning for each flag that does nothing here.
// `flags`: the flags the command line gave, as the command-line reader names them.
absl::Status CheckTroikarunOptions(const std::set<std::string>& flags, TroikarunOptions& options);

}  // namespace troika::agent
