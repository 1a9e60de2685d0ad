#pragma once
// WaitTracker: which ops this rank's user threads are blocked on, for the coordinator's
// deadlock detection. A thread waiting in Handle::Wait()/WaitFor() on an op that is still not
// done after kBlockedAfter registers as blocked on the op's name; when the set of names the
// rank's threads are blocked on changes, the tracker hands a WaitState to its sink (the
// controller's outbox). Once every blocked thread returned it sends one empty WaitState —
// only if a non-empty one was sent, so fast ops never cost a message.
//
// Thread-safe: any thread may call Blocked/Unblocked/Detach. The sink is called under the
// tracker's lock (so states leave in order) and must not block or call back.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/messages.h"

namespace troika::internal {

// How long a thread waits on an op that is not done before it counts as blocked. Long enough
// that a training step's ordinary waits (ops completing within milliseconds) report nothing;
// short enough that a deadlock is detected well within a second.
inline constexpr absl::Duration kBlockedAfter = absl::Milliseconds(50);

class WaitTracker {
 public:
  using Sink = std::function<void(WaitState)>;

  WaitTracker(int rank, Sink sink) : rank_(rank), sink_(std::move(sink)) {}
  WaitTracker(const WaitTracker&) = delete;
  WaitTracker& operator=(const WaitTracker&) = delete;

  // A thread is now blocked on the op named `name`; pass the token to Unblocked().
  uint64_t Blocked(const std::string& name);
  // The thread holding `token` stopped waiting.
  void Unblocked(uint64_t token);
  // Drops the sink: nothing is sent after this returns (the context is shutting down).
  void Detach();

 private:
  // Sends the current wait set if it differs from the last one sent.
  void ReportLocked();

  const int rank_;
  std::mutex mu_;
  // Guarded by mu_.
  Sink sink_;
  std::map<uint64_t, std::string> blocked_;  // token -> name
  uint64_t next_token_ = 1;
  std::vector<std::string> reported_;  // the last wait set sent; sorted, distinct
};

}  // namespace troika::internal
