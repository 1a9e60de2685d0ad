#pragma once
// troikarun's flags checked against each other, once they are all parsed (ParseTroikarunArgs).
//
// Pure function; thread-safe.

#include <set>
#include <string>

#include "absl/status/status.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// Usage errors for flags that do not go together (-H with --hostfile, --nproc-per-node with
// hosts, the embedded coordinator's flags with --coordinator, more ranks than the hosts'
// slots, ...); fills in what follows from others (a discovery script's job is elastic:
// --min-np defaults to -np, --max-np to kMaxRanks) and adds a warning for each flag that does
// nothing here. `given`: what the command line set, as SettingOf names it.
absl::Status CheckTroikarunOptions(const std::set<std::string>& given, TroikarunOptions& options);

}  // namespace troika::agent
