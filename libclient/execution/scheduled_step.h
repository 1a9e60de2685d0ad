#pragma once
// ScheduledStep: one entry of a steady-state schedule, as the executor runs it
// (docs/protocol.md, Schedules). The client's schedule (ClientSchedule) decides when an entry
// can be entered and with which vote; the executor only runs what it is handed.

#include <cstdint>
#include <memory>

#include "common/messages.h"

namespace troika::internal {

// The response at `position` of its schedule, voting go, or void (`vote_void`: the rank
// deviated).
struct ScheduledStep {
  int64_t position = 0;
  std::shared_ptr<const Response> response;  // `elements` holds each tensor's element count
  bool vote_void = false;
};

}  // namespace troika::internal
