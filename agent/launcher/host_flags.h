#pragma once
// The hosts of troikarun's command line, as horovodrun and Open MPI write them:
//   -H host1:2,host2:4,host3     a host without ":slots" has one slot
//   --hostfile FILE              one host a line: "host slots=N", "host:N" or "host" (one
//                                slot); "max_slots=M" is accepted and ignored (no host runs more
//                                ranks than its slots); "#" starts a comment; blank lines are
//                                skipped
// A host name is letters, digits, '_', '.' and '-' (horovodrun's [\w.-]+); slots are 1 to
// kMaxRanks. Where the ranks go is hosts.h's (AssignRanks).
//
// Pure functions (ReadHostfile reads its file); thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// -H's value. INVALID_ARGUMENT naming the entry that is not HOST or HOST:SLOTS.
absl::StatusOr<std::vector<HostSlots>> ParseHostList(const std::string& text);

// A hostfile's contents; errors name `file` and the line ("--hostfile h.txt:3: ...").
absl::StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text,
                                                     const std::string& file);

// ParseHostfile of the file at `path`; INVALID_ARGUMENT if it cannot be read or names no host.
absl::StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path);

// The sum of the hosts' slots.
int64_t TotalSlots(const std::vector<HostSlots>& hosts);

}  // namespace troika::agent
