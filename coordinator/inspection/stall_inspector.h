#pragma once
// StallInspector: finds tensors that some ranks submitted long ago while others never did — the
// usual sign of ranks that diverged (a rank skipped a layer, took another branch, or hangs).
// Each stalled tensor is reported once, with the ranks it waits for, until it completes; past
// the optional shutdown time the owner is told to abort the job.
//
// Plain data in and out: no threads, no clock, no I/O. The caller passes the time.
// Thread contract: not thread-safe; the owning Job serialises every call.

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator {

struct StallOptions {
  // A tensor pending for longer than this is reported (once). 0 disables warnings.
  // Default 60 s.
  absl::Duration warning_time = absl::Seconds(60);
  // A tensor pending for longer than this aborts the job. 0 disables. Default 0 (off).
  absl::Duration shutdown_time = absl::ZeroDuration();
};

struct StalledTensor {
  std::string name;
  absl::Duration waiting;
  std::vector<int> missing_ranks;
};

struct StallReport {
  // Tensors past warning_time that were not reported before, oldest first.
  std::vector<StalledTensor> newly_stalled;
  // Every tensor past shutdown_time (empty when shutdown is off), oldest first.
  std::vector<StalledTensor> past_shutdown;
};

class StallInspector {
 public:
  explicit StallInspector(StallOptions options) : options_(options) {}

  // Inspects the job's pending tensors at `now`. A tensor is reported in newly_stalled once per
  // submission: the same name submitted again after it completed is a new tensor.
  StallReport Inspect(const std::vector<PendingTensor>& pending, absl::Time now);

  // When an inspection could next report something: the earliest warning deadline among
  // `pending` tensors not yet reported, or shutdown deadline among all; InfiniteFuture() if
  // none (in particular when `pending` is empty).
  absl::Time NextCheck(const std::vector<PendingTensor>& pending) const;

  // The shortest time after a tensor's first arrival that an inspection can report it;
  // InfiniteDuration() when both warning and shutdown are off.
  absl::Duration FirstDeadline() const;

  const StallOptions& options() const { return options_; }

 private:
  bool Warned(const PendingTensor& p) const;

  const StallOptions options_;
  std::map<std::string, absl::Time> warned_;  // name -> first arrival of the reported tensor
};

// "2 tensors stalled for more than 1m: 'grad/a' (waiting 1m15s) is missing ranks 1, 3;
// 'grad/b' (waiting 1m2s) is missing rank 2". `threshold`: the limit they passed. Callers
// name the job (a log line) or the abort does ("job 'x' aborted: ...").
std::string FormatStalls(const std::vector<StalledTensor>& stalled, absl::Duration threshold);

}  // namespace troika::coordinator
