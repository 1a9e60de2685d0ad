#include "agent/node/agent_metrics.h"

#include <utility>

namespace troika::agent {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric Sample(std::vector<ClientMetric::Label> labels, MetricType type, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  (type == MetricType::Counter ? m.counter.value : m.gauge.value) = value;
  return m;
}

}  // namespace

AgentMetrics::AgentMetrics(std::string job, std::function<AgentSnapshot()> snapshot)
    : job_(std::move(job)), snapshot_(std::move(snapshot)) {}

std::vector<MetricFamily> AgentMetrics::Collect() const {
  const AgentSnapshot s = snapshot_();
  const std::vector<ClientMetric::Label> job = {{"troika_job", job_}};
  auto one = [&job](const char* name, const char* help, MetricType type, double value) {
    return MetricFamily{name, help, type, {Sample(job, type, value)}};
  };
  auto exits = [this](const char* outcome, int64_t n) {
    return Sample({{"outcome", outcome}, {"troika_job", job_}}, MetricType::Counter,
                  static_cast<double>(n));
  };
  return {
      one("troika_agent_ranks_running", "Ranks this agent started that have not exited.",
          MetricType::Gauge, s.ranks_running),
      MetricFamily{"troika_agent_rank_exits_total",
                   "Rank exits by outcome: success, failure (non-zero exit), signal.",
                   MetricType::Counter,
                   {exits("success", s.exits_success), exits("failure", s.exits_failure),
                    exits("signal", s.exits_signal)}},
      one("troika_agent_upstream_connected",
          "1 while the session stream to the coordinator is open.", MetricType::Gauge,
          s.upstream_connected ? 1 : 0),
      one("troika_agent_requests_received_total", "Tensor requests from local ranks.",
          MetricType::Counter, static_cast<double>(s.relay.requests_received)),
      one("troika_agent_requests_forwarded_total",
          "Requests sent to the coordinator after aggregation.", MetricType::Counter,
          static_cast<double>(s.relay.requests_forwarded)),
      one("troika_agent_responses_relayed_total",
          "Responses received from the coordinator and relayed to local ranks.",
          MetricType::Counter, static_cast<double>(s.relay.responses_relayed)),
  };
}

}  // namespace troika::agent
