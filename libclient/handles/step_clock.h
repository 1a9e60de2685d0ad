#pragma once
// StepClock: splits the wall time of this rank's training steps (Context::MarkStep) into
// communication, negotiation wait and compute (docs/metrics.md, "Step timing").
//
// It follows two counts: operations in flight (submitted, handle not yet complete) and
// whether the executor is working on a response. At any instant the rank is in exactly one
// state, and the time spent there goes to its bucket:
//   - executor busy                          -> communication
//   - executor idle, an operation in flight  -> negotiation wait
//   - otherwise                              -> compute
//
// Thread-safe: user threads start and end steps and start operations; whichever thread
// completes an operation finishes it; the executor thread brackets its work. Never blocks
// beyond its own short lock, which the four counting calls take only while a step runs:
// outside steps (a program that never marks one, every Python front end) they are an atomic
// add each, off every operation's path. A step that starts while such a call is under way
// charges the instant between the two as if the count had already changed.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/messages.h"

namespace troika::internal {

class StepClock {
 public:
  // `clock` must outlive this object.
  explicit StepClock(Clock& clock) : clock_(clock), last_(clock.Now()) {}
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  // An operation was submitted; exactly one OpFinished() must follow when its handle
  // completes (successfully or not), or every later step counts as waiting.
  void OpStarted();
  void OpFinished();
  // The executor starts / ends its work on one response (copy in, collective, copy out).
  // Calls nest: the executor is busy until every ExecBegin() has had its ExecEnd().
  void ExecBegin();
  void ExecEnd();

  // Begins a step now; a step in progress is discarded.
  void StartStep();
  // Ends the step in progress and returns it (duration == compute + negotiation_wait +
  // communication exactly); nullopt if no step was started.
  std::optional<StepSample> EndStep();
  // EndStep() and StartStep() at the same instant, so consecutive steps tile the time: the
  // ended step (nullopt on the first call, which only starts one).
  std::optional<StepSample> MarkStep();

  // Operations in flight now (for tests and diagnostics).
  int64_t in_flight() const;

 private:
  // With mu_ held: charges the time since the last call to the current state's bucket, if a
  // step runs (else does nothing).
  void AdvanceLocked();
  // Adds `delta` to `count` (`what` names the call, for a count going below zero), first
  // charging the time so far while a step runs.
  void Count(std::atomic<int64_t>& count, int64_t delta, const char* what);
  // With mu_ held: EndStep().
  std::optional<StepSample> EndLocked();
  // With mu_ held, last_ current: a step begins at last_.
  void StartLocked();

  // Constant after construction.
  Clock& clock_;

  mutable std::mutex mu_;
  // Changed under mu_ while a step runs, and without it outside steps; read under mu_.
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> busy_{0};
  // Written under mu_; read without it by Count.
  std::atomic<bool> in_step_{false};
  // Guarded by mu_.
  absl::Time last_;  // up to where time has been charged; while in_step_
  StepSample step_;  // the step in progress; duration unset
};

}  // namespace troika::internal
