#include "agent/launcher/elastic_hosts.h"

#include <algorithm>
#include <set>

namespace troika::agent {

ElasticHosts::ElasticHosts(int max_ranks, HostBlacklist blacklist)
    : max_ranks_(max_ranks), blacklist_(std::move(blacklist)) {}

void ElasticHosts::Started(const std::string& host, int ranks) { running_[host] = ranks; }

ElasticHosts::Plan ElasticHosts::Update(const std::vector<HostSlots>& discovered, absl::Time now) {
  Plan plan;
  std::set<std::string> listed;
  for (const HostSlots& host : discovered) listed.insert(host.host);
  for (const auto& [host, ranks] : running_) {
    if (!listed.count(host)) plan.drain.push_back(host);
  }
  for (const HostSlots& host : discovered) {
    if (running_.count(host.host) || blacklist_.Blocked(host.host, now)) continue;
    const int ranks = std::min(host.slots, max_ranks_ - this->ranks());
    if (ranks < 1) break;  // at the maximum
    running_[host.host] = ranks;
    plan.start.push_back({host.host, ranks});
  }
  return plan;
}

std::string ElasticHosts::Exited(const std::string& host, bool failed, absl::Time now) {
  running_.erase(host);
  if (failed) blacklist_.Fail(host, now);
  return blacklist_.Describe(host, now);
}

int ElasticHosts::ranks() const {
  int ranks = 0;
  for (const auto& [host, n] : running_) ranks += n;
  return ranks;
}

}  // namespace troika::agent
