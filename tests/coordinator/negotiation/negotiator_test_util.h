#pragma once
// Helpers shared by the Negotiator's tests: a fixed start time, options that never hold the
// queue, and a poll at a given time.

#include <vector>

#include "absl/time/time.h"
#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator::test_util {

inline const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

// Default options, except that ready allreduces are never held for the cycle time.
inline NegotiatorOptions NoHold() {
  NegotiatorOptions o;
  o.cycle_time = absl::ZeroDuration();
  return o;
}

inline std::vector<Response> PollNow(Negotiator& n, absl::Time now = kT0) {
  absl::Time next;
  return n.Poll(now, &next);
}

}  // namespace troika::coordinator::test_util
