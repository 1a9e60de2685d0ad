#pragma once
// AgentMetrics: the agent's Prometheus view of its node (docs/metrics.md, "Agent"): a
// collectable that reads the agent's state when scraped, so nothing is kept twice. Every
// series carries the label `troika_job`.
//
// Thread-safe if the snapshot function is: Collect() runs on the metrics server's threads.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agent/relay/node_relay.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace troika::agent {

struct AgentSnapshot {
  int ranks_running = 0;
  int64_t exits_success = 0;  // exit code 0
  int64_t exits_failure = 0;  // non-zero exit code
  int64_t exits_signal = 0;   // killed by a signal
  bool upstream_connected = false;
  RelayCounts relay;
};

class AgentMetrics : public prometheus::Collectable {
 public:
  AgentMetrics(std::string job, std::function<AgentSnapshot()> snapshot);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string job_;
  const std::function<AgentSnapshot()> snapshot_;
};

}  // namespace troika::agent
