#include "coordinator/inspection/job_metrics.h"

#include "absl/strings/str_cat.h"

namespace troika::coordinator {
namespace {

const prometheus::Histogram::BucketBoundaries& StepBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60};
  return buckets;
}

const prometheus::Histogram::BucketBoundaries& FillBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {.01, .05, .1, .25,
                                                                  .5,  .75, .9, 1};
  return buckets;
}

absl::Status CheckStep(const StepSample& step) {
  const absl::Duration parts[] = {step.compute, step.negotiation_wait, step.communication};
  absl::Duration sum;
  for (absl::Duration part : parts) {
    if (part < absl::ZeroDuration() || part > absl::Hours(24)) {
      return absl::InvalidArgumentError("a step sample has a part outside [0, 24 h]");
    }
    sum += part;
  }
  if (step.duration < absl::ZeroDuration() || step.duration > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a step sample lasts ", absl::FormatDuration(step.duration), ", outside [0, 24 h]"));
  }
  if (absl::AbsDuration(sum - step.duration) > absl::Microseconds(3)) {
    return absl::InvalidArgumentError(absl::StrCat("a step sample's parts add up to ",
                                                   absl::FormatDuration(sum), ", not its duration ",
                                                   absl::FormatDuration(step.duration)));
  }
  return absl::OkStatus();
}

}  // namespace

JobMetrics::JobMetrics()
    : steps_{prometheus::Histogram(StepBuckets()), prometheus::Histogram(StepBuckets()),
             prometheus::Histogram(StepBuckets()), prometheus::Histogram(StepBuckets())},
      fusion_fill_(FillBuckets()) {}

absl::Status JobMetrics::OnSteps(const std::vector<StepSample>& steps) {
  for (const StepSample& step : steps) {
    if (absl::Status s = CheckStep(step); !s.ok()) return s;
  }
  for (const StepSample& step : steps) {
    steps_[0].Observe(absl::ToDoubleSeconds(step.duration));
    steps_[1].Observe(absl::ToDoubleSeconds(step.compute));
    steps_[2].Observe(absl::ToDoubleSeconds(step.negotiation_wait));
    steps_[3].Observe(absl::ToDoubleSeconds(step.communication));
  }
  return absl::OkStatus();
}

void JobMetrics::OnReady(const std::vector<ReadyRecord>& records) {
  for (const ReadyRecord& record : records) {
    const int op = static_cast<int>(record.type);
    if (op < 0 || op >= kNumCollectiveTypes) continue;
    op_counts_[op].fetch_add(1, std::memory_order_relaxed);
    op_bytes_[op].fetch_add(record.bytes, std::memory_order_relaxed);
  }
}

void JobMetrics::OnAllreduceResponses(const std::vector<int64_t>& bytes,
                                      int64_t fusion_threshold_bytes) {
  if (fusion_threshold_bytes <= 0) return;
  for (int64_t b : bytes) {
    fusion_fill_.Observe(static_cast<double>(b) / static_cast<double>(fusion_threshold_bytes));
  }
}

JobMetricsSnapshot JobMetrics::Snapshot() const {
  JobMetricsSnapshot out;
  for (size_t i = 0; i < steps_.size(); ++i) out.steps[i] = steps_[i].Collect();
  for (int op = 0; op < kNumCollectiveTypes; ++op) {
    out.ops[op] = {op_counts_[op].load(std::memory_order_relaxed),
                   op_bytes_[op].load(std::memory_order_relaxed)};
  }
  out.fusion_fill = fusion_fill_.Collect();
  return out;
}

}  // namespace troika::coordinator
