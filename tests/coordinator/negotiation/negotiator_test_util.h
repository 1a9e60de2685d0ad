#pragma once
// Helpers shared by the negotiation tests: a fixed start time, options that never hold the
// queue, a poll at a given time, and the requests process sets are made of.

#include <string>
#include <utility>
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

// `rank`'s allreduce of 4 floats named `name` in process set `set`.
inline TensorRequest Allreduce(const std::string& name, int rank, int set = 0) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.shape = {4};
  r.process_set = set;
  return r;
}

// `rank`'s set-0 control barrier `name` (AddProcessSet, RemoveProcessSet) passing `ranks`.
inline TensorRequest Control(const std::string& name, int rank, std::vector<int> ranks) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.type = CollectiveType::kBarrier;
  r.dtype = DataType::kUint8;
  r.shape = {0};
  r.process_set_ranks = std::move(ranks);
  return r;
}

}  // namespace troika::coordinator::test_util
