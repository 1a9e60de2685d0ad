#include "libclient/execution/exec_stats.h"

#include <utility>

namespace troika::internal {

void ExecStats::set_settings(const ClientSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = settings;
  phases_on_.store(settings.report_phases && settings.report_interval_ms > 0,
                   std::memory_order_relaxed);
  if (!phases_on_.load(std::memory_order_relaxed)) phases_.clear();
}

ClientSettings ExecStats::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

void ExecStats::AddPhase(PhaseSpan phase) {
  if (!phases_on()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (phases_.size() < kMaxPendingPhases) phases_.push_back(std::move(phase));
}

bool ExecStats::AddStep(const StepSample& step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (steps_.size() >= kMaxPendingSteps) {
    steps_.pop_front();
    ++dropped_steps_;
  }
  steps_.push_back(step);
  return steps_.size() == 1;
}

bool ExecStats::steps_pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !steps_.empty();
}

int64_t ExecStats::dropped_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_steps_;
}

bool ExecStats::Take(int rank, absl::Time now, ExecReport* report) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t bytes = allreduce_bytes_.load(std::memory_order_relaxed);
  report->rank = rank;
  report->sent_at = now;
  report->allreduce_bytes = bytes;
  if (bytes == reported_bytes_ && phases_.empty() && steps_.empty()) return false;
  reported_bytes_ = bytes;
  report->phases = std::exchange(phases_, {});
  report->steps.assign(steps_.begin(), steps_.end());
  steps_.clear();
  return true;
}

}  // namespace troika::internal
