#pragma once
// ScheduleDetector: finds the period of a job's steady state in its response order, for
// steady-state schedules (docs/protocol.md, Schedules). The job feeds it every response it
// sends, in order. A response it can schedule is an allreduce (host or GPU) of process set 0 whose
// every tensor was a response-cache hit for every rank (so its cache ids alone say what each rank
// submitted) and which no joined rank takes part in; any other response resets it.
//
// A period is a sequence of N distinct tensors (cache ids) that the latest tensors, in
// response order, repeat `repeats` times in a row. Fusion may differ from one repetition to
// the next (it depends on timing): the period is what the responses of the latest repetition
// hold, so it needs them to start at a response boundary, and its entries are fused as they
// were.
//
// Not thread-safe: the owning Job calls it under its lock.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "common/messages.h"

namespace troika::coordinator {

class ScheduleDetector {
 public:
  // `max_period`: the most tensors a period may have.
  explicit ScheduleDetector(int max_period = 4096) : max_period_(max_period) {}

  static bool Schedulable(const Response& response);

  // The next response of the job's order.
  void Observe(const Response& response);
  // Forgets every response seen: a period must be seen `repeats` times again. (At least 2.)
  void Reset(int repeats);

  // The responses of the latest period, if the latest tensors repeat one; in order, the
  // oldest first. Its entries start right after the last response observed.
  std::optional<std::vector<Response>> Period() const;

 private:
  const int max_period_;
  int repeats_ = 2;
  std::deque<Response> responses_;        // the latest, holding at most max_period_ tensors
  size_t response_tensors_ = 0;           // tensors in responses_
  std::deque<int32_t> tensors_;           // the latest cache ids, at most max_period_ * repeats_
  int64_t observed_ = 0;                  // tensors observed since the last reset
  std::map<int32_t, int64_t> last_seen_;  // cache id -> its latest number (1, 2, ...)
  size_t period_responses_ = 0;  // responses of the period the latest one completed; 0: none
};

}  // namespace troika::coordinator
