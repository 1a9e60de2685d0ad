#pragma once
// ExecStats: what this rank reports to the coordinator about its execution (ExecReport):
// allreduced bytes, for the coordinator's autotuner, and — while a timeline is being written —
// the phases of every response (queue, copy in, collective, copy out). The coordinator says
// what it wants (ClientSettings); nothing is collected or sent beyond that. Besides, the step
// samples the application marked (Context::MarkStep) wait here for the next report, whatever
// the settings.
//
// Thread-safe: the executor thread records, user threads queue steps, the controller's sender
// thread takes reports, its receiver thread applies settings.

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "common/messages.h"

namespace troika::internal {

class ExecStats {
 public:
  // Phases kept between two reports at most; beyond that they are dropped (a timeline then
  // shows a gap rather than the rank running out of memory).
  static constexpr size_t kMaxPendingPhases = 16384;
  // Step samples kept between two reports at most; beyond that the oldest are dropped.
  static constexpr size_t kMaxPendingSteps = 4096;

  void set_settings(const ClientSettings& settings);
  ClientSettings settings() const;
  bool phases_on() const { return phases_on_.load(std::memory_order_relaxed); }

  void AddAllreduceBytes(int64_t bytes) {
    allreduce_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  // Dropped unless phases_on().
  void AddPhase(PhaseSpan phase);

  // Queues an ended step for the next report (dropping the oldest beyond kMaxPendingSteps).
  // Returns true if it is the first step queued since the last Take(): the caller then makes
  // sure a report follows.
  bool AddStep(const StepSample& step);
  bool steps_pending() const;
  // Steps dropped so far because reports did not keep up.
  int64_t dropped_steps() const;

  // Fills `report` (rank, time, bytes, pending phases and steps); returns whether anything
  // changed since the last report.
  bool Take(int rank, absl::Time now, ExecReport* report);

 private:
  std::atomic<int64_t> allreduce_bytes_{0};
  std::atomic<bool> phases_on_{false};
  mutable std::mutex mu_;
  // Guarded by mu_.
  ClientSettings settings_;
  std::vector<PhaseSpan> phases_;
  std::deque<StepSample> steps_;
  int64_t dropped_steps_ = 0;
  int64_t reported_bytes_ = -1;
};

}  // namespace troika::internal
