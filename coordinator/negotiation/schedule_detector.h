#pragma once
// ScheduleDetector: finds the period of a job's steady state in its response order, for
// steady-state schedules (docs/protocol.md, Schedules). The job feeds it every response it
// sends, in order, with the time it sends it. A response it can schedule is an allreduce (host
// or GPU) of process set 0 whose every tensor was a response-cache hit for every rank (so its
// cache ids alone say what each rank submitted) and which no joined rank takes part in; any
// other response resets it.
//
// A period is a run of N distinct tensors (cache ids) that the latest tensors repeat `repeats`
// times in a row, either
//   - in order (an exact period): the latest N * repeats tensors are `repeats` copies of the
//     latest N; or
//   - as a set (a set period, for ranks whose executor submits a step's independent tensors
//     in varying order): each of the latest `repeats` runs of N tensors holds the same N
//     tensors, in any order, and each run starts at its largest pause — the time between its
//     first tensor's response and the response before is longer than that between any two
//     consecutive responses inside the run (responses sent at one time have no pause between
//     them, so responses all observed at one time form no set period). A step's boundary is
//     where its ranks compute (a forward pass) without submitting; the rule puts the period's
//     boundary there rather than at any rotation whose head happens to be a stable set
//     (docs/design/schedules.md, "Set periods").
// Fusion may differ from one repetition to the next (it depends on timing): the period is what
// the responses of the latest repetition hold, in their order, so it needs them to start at a
// response boundary, and its entries are fused as they were.
//
// Not thread-safe: the owning Job calls it under its lock.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "common/messages.h"

namespace troika::coordinator {

class ScheduleDetector {
 public:
  // `max_period`: the most tensors a period may have.
  explicit ScheduleDetector(int max_period = 4096) : max_period_(max_period) {}

  static bool Schedulable(const Response& response);

  // The next response of the job's order, sent at `sent` (the same clock for every call).
  void Observe(const Response& response, absl::Time sent = absl::UnixEpoch());
  // Forgets every response seen: a period must be seen `repeats` times again. (At least 2.)
  void Reset(int repeats);

  // The responses of the latest period, if the latest tensors repeat one; in order, the
  // oldest first. Its entries start right after the last response observed.
  std::optional<std::vector<Response>> Period() const;

 private:
  // The period length of an exact period ending at the latest tensor, or 0. `before`: the
  // number of the latest response's last tensor's previous occurrence (0: none).
  int64_t ExactPeriod(int64_t before) const;
  // The length of a set period ending at the latest tensor, or 0.
  int64_t SetPeriod() const;
  // Whether the latest `repeats_` runs of `n` tensors hold the same n distinct tensors.
  bool SameSets(int64_t n) const;
  // Whether each of the latest `repeats_` runs of `n` tensors starts at its largest pause.
  bool StartsAtPauses(int64_t n) const;
  // The number of latest responses holding exactly the latest `n` tensors, or 0.
  size_t ResponsesCovering(int64_t n) const;

  const int max_period_;
  int repeats_ = 2;
  std::deque<Response> responses_;  // the latest, holding at most max_period_ tensors
  size_t response_tensors_ = 0;     // tensors in responses_
  // The latest cache ids, at most max_period_ * repeats_ + 1, with the time of each one's
  // response and, by tensor, the sum of Mix(id) of the tensors before it since the reset.
  std::deque<int32_t> tensors_;
  std::deque<absl::Time> sent_;
  std::deque<uint64_t> hash_before_;
  uint64_t hash_ = 0;                     // the sum of Mix(id) of every tensor since the reset
  int64_t observed_ = 0;                  // tensors observed since the last reset
  int64_t distinct_from_ = 1;             // the latest tensors from this number are distinct
  std::map<int32_t, int64_t> last_seen_;  // cache id -> its latest number (1, 2, ...)
  size_t period_responses_ = 0;  // responses of the period the latest one completed; 0: none
};

}  // namespace troika::coordinator
