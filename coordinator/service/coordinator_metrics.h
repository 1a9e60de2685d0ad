#pragma once
// CoordinatorMetrics: the coordinator's Prometheus view of its jobs (docs/metrics.md). A
// collectable built at scrape time from the JobRegistry — each live job's Describe() and
// MetricsSnapshot() — so a job's series exist exactly while the coordinator holds the job,
// and the process-wide job counts. Labels: `troika_job`, `op`, `rank`, `reason`, `outcome`.
//
// Thread-safe: Collect() runs on the metrics server's threads and takes each job's lock
// briefly, one job at a time.

#include <vector>

#include "absl/time/time.h"
#include "coordinator/job/job_registry.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace troika::coordinator {

struct CoordinatorMetricsOptions {
  // Per-rank series (troika_rank_lateness_seconds) only for jobs of at most this many ranks.
  // Default 1024.
  int max_rank_series = 1024;
  // A pending tensor counts as stalled after this long (--stall_warning_time); 0: none does.
  // Default 60 s.
  absl::Duration stall_warning_time = absl::Seconds(60);
};

class CoordinatorMetrics : public prometheus::Collectable {
 public:
  // `registry` must outlive this object.
  CoordinatorMetrics(const JobRegistry& registry, CoordinatorMetricsOptions options);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const JobRegistry& registry_;
  const CoordinatorMetricsOptions options_;
};

}  // namespace troika::coordinator
