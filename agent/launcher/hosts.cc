#include "agent/launcher/hosts.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::agent {

absl::StatusOr<std::vector<HostAssignment>> AssignRanks(const std::vector<HostSlots>& hosts,
                                                        int np) {
  std::set<std::string> seen;
  int slots = 0;
  for (const HostSlots& h : hosts) {
    if (!seen.insert(h.host).second) {
      return absl::InvalidArgumentError(absl::StrCat("host ", h.host, " is named twice"));
    }
    slots += h.slots;
  }
  if (slots < np) {
    return absl::InvalidArgumentError(
        absl::StrCat("-np ", np, " needs ", np, " slots; the hosts have ", slots, ": ",
                     absl::StrJoin(hosts, ", ", [](std::string* out, const HostSlots& h) {
                       absl::StrAppend(out, h.host, ":", h.slots);
                     })));
  }
  std::vector<HostAssignment> used;
  int left = np;
  for (const HostSlots& h : hosts) {
    if (left == 0) break;
    const int ranks = std::min(left, h.slots);
    used.push_back({h.host, ranks});
    left -= ranks;
  }
  for (const HostAssignment& a : used) {
    if (a.ranks != used.front().ranks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "-np ", np, " over these hosts gives ",
          absl::StrJoin(used, ", ",
                        [](std::string* out, const HostAssignment& h) {
                          absl::StrAppend(out, h.host, " ", h.ranks);
                        }),
          " ranks; troikarun runs the same number of ranks on every host it uses: choose -np "
          "and slots so that the hosts used are filled equally"));
    }
  }
  return used;
}

bool IsThisHost(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1" ||
         host == HostName();
}

}  // namespace troika::agent
