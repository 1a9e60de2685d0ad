#pragma once
// ControlStats: counters of the control traffic through session streams — what the agent's
// aggregation and the response cache exist to shrink. Thread-safe (relaxed atomics).

#include <atomic>
#include <cstdint>

namespace troika::session {

struct ControlStats {
  std::atomic<int64_t> up_messages{0};    // session messages received
  std::atomic<int64_t> up_bytes{0};       // their serialized size
  std::atomic<int64_t> down_messages{0};  // session messages sent (each stream counted)
  std::atomic<int64_t> down_bytes{0};
  std::atomic<int64_t> sessions_opened{0};
};

}  // namespace troika::session
