#pragma once
// What the coordinator and agents drop of a rank's requests while the rank executes a
// steady-state schedule (docs/protocol.md, Schedules). The rank may have sent requests for the
// schedule's tensors before it had it: they are dropped (the rank executes them as the
// schedule's, or sends them again when it ends the schedule). So is a join the rank sent after
// one of them: the rank sends it again after them, since a join ahead of them would make it a
// joined rank for them.

#include <set>

#include "common/messages.h"

namespace troika {

// Whether to drop `request` of a rank that executes the schedule of `tensors`; `dropped`:
// the ranks whose requests were dropped so far (updated).
inline bool DropsForSchedule(const ScheduleTensors& tensors, std::set<int>& dropped,
                             const TensorRequest& request) {
  if (tensors.Names(request)) {
    dropped.insert(request.rank);
    return true;
  }
  return request.type == CollectiveType::kJoin && request.process_set == 0 &&
         dropped.contains(request.rank);
}

}  // namespace troika
