#pragma once
// StragglerMonitor: which ranks hold one job back, as the job runs. It observes the job's
// negotiation (NegotiationObserver): every tensor of process set 0 (the whole job) that
// became ready feeds its StragglerStats; other sets' tensors are not counted (their ranks are
// positions in the set). Every kCheckEvery tensors it asks who straggles by the margin
// (--straggler_margin) and logs the ranks when they changed, at most every kLogEvery, so a
// training step never pays for it and the log does not flood.
//
// Thread contract: not thread-safe; the owning job calls under its lock.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/inspection/straggler_stats.h"
#include "coordinator/negotiation/negotiation_observer.h"

namespace troika::coordinator {

class StragglerMonitor : public NegotiationObserver {
 public:
  static constexpr int64_t kCheckEvery = 64;
  static constexpr absl::Duration kLogEvery = absl::Seconds(30);

  // `job`: its name, for the log. `size`: its ranks. `margin`: the mean lateness that makes
  // a rank last for most tensors a straggler (StragglerStats::Stragglers).
  StragglerMonitor(std::string job, int size, absl::Duration margin);

  void OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) override;

  // Per-rank lateness so far (`straggling` left empty).
  StragglerSnapshot Snapshot() const { return stats_.Snapshot(); }
  // The ranks straggling by the margin now.
  std::vector<int> Stragglers() const { return stats_.Stragglers(margin_); }
  // The stragglers last logged (empty: none, or no longer any).
  const std::vector<int>& logged() const { return logged_; }

 private:
  // Logs `stragglers`, which differ from those logged last.
  void Log(std::vector<int> stragglers);

  const std::string job_;
  const absl::Duration margin_;
  StragglerStats stats_;
  std::vector<int> logged_;  // the set last logged
  absl::Time logged_at_ = absl::InfinitePast();
  int64_t checked_at_ = 0;  // stats_.tensors() when last checked
};

}  // namespace troika::coordinator
