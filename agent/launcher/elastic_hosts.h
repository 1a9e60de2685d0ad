#pragma once
// ElasticHosts: which hosts an elastic job across hosts runs on as its host discovery script's
// output changes (host_discovery.h): a host that appears, and is not left out after failing,
// gets an agent with its slots' ranks, up to the job's maximum; a running host that
// disappears is drained at the job's next commit; a host whose agent fails is blacklisted.
// Decides only: troikarun's DiscoveryLoop carries the decisions out.
//
// Not thread-safe (one owner).

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/launcher/host_discovery.h"

namespace troika::agent {

class ElasticHosts {
 public:
  // `max_ranks`: the job's maximum (--max-np).
  ElasticHosts(int max_ranks, HostBlacklist blacklist);

  // An agent of `ranks` ranks runs on `host` (started at launch, or by a Plan).
  void Started(const std::string& host, int ranks);

  struct Plan {
    std::vector<HostSlots> start;    // start an agent of `slots` ranks on each
    std::vector<std::string> drain;  // running, but no longer listed: drain each
  };
  // What to do now that the script lists `discovered` (in its order). The hosts to start are
  // counted as running from now on (Started() need not be called for them).
  Plan Update(const std::vector<HostSlots>& discovered, absl::Time now);

  // `host`'s agent exited (`failed`: not with 0): it runs no more, and a failed one is
  // blacklisted. Returns how the blacklist now treats it (for messages).
  std::string Exited(const std::string& host, bool failed, absl::Time now);

  // Ranks on the hosts that run.
  int ranks() const;
  bool running(const std::string& host) const { return running_.count(host) > 0; }

 private:
  const int max_ranks_;
  HostBlacklist blacklist_;
  std::map<std::string, int> running_;  // host -> its agent's ranks
};

}  // namespace troika::agent
