#pragma once
// JobMetrics: the counters and histograms one job accumulates for Prometheus
// (docs/metrics.md): its ranks' step samples, the tensors negotiated and their bytes by
// collective, and how full fused allreduces were. Gauges that describe the job's state now
// (ranks alive, pending tensors, cache, autotune) are read from Job::Describe() at scrape time
// instead (coordinator/coordinator_metrics.h).
//
// It observes the job's negotiation (NegotiationObserver): the tensors of every process set.
//
// Thread contract: the owning Job calls the On* methods under its lock; Snapshot() is
// thread-safe (prometheus-cpp histograms are), counters are atomics.

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/messages.h"
#include "coordinator/negotiation/negotiation_observer.h"
#include "coordinator/negotiation/negotiator.h"
#include "prometheus/client_metric.h"
#include "prometheus/histogram.h"

namespace troika::coordinator {

inline constexpr int kNumCollectiveTypes = 7;  // CollectiveType::kAllreduce .. kJoin

struct OpTotals {
  int64_t count = 0;  // tensors negotiated
  int64_t bytes = 0;  // their bytes as one rank submitted them
};

struct JobMetricsSnapshot {
  // Histograms: step duration, compute, negotiation wait, communication.
  std::array<prometheus::ClientMetric, 4> steps;
  std::array<OpTotals, kNumCollectiveTypes> ops;  // by CollectiveType
  prometheus::ClientMetric fusion_fill;           // histogram
};

class JobMetrics : public NegotiationObserver {
 public:
  JobMetrics();
  JobMetrics(const JobMetrics&) = delete;
  JobMetrics& operator=(const JobMetrics&) = delete;

  // Adds a rank's step samples. INVALID_ARGUMENT, recording none of them, if any is negative,
  // longer than a day, or its parts do not add up to its duration (within 1 us per part).
  absl::Status OnSteps(const std::vector<StepSample>& steps);
  // Tensors that became ready (every process set).
  void OnReady(const std::vector<ReadyRecord>& records);
  void OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) override {
    OnReady(records);
  }
  // Bytes of each allreduce response emitted, against the fusion threshold then in force
  // (ignored when fusion is off).
  void OnAllreduceResponses(const std::vector<int64_t>& bytes,
                            int64_t fusion_threshold_bytes) override;

  JobMetricsSnapshot Snapshot() const;

 private:
  std::array<prometheus::Histogram, 4> steps_;
  std::array<std::atomic<int64_t>, kNumCollectiveTypes> op_counts_{};
  std::array<std::atomic<int64_t>, kNumCollectiveTypes> op_bytes_{};
  prometheus::Histogram fusion_fill_;
};

}  // namespace troika::coordinator
