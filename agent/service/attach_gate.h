#pragma once
// AttachGate: the ranks' Attach calls on the agent wait here for the agent's one upstream
// Attach of all the node's ranks, and all get its outcome: each rank its own membership, or
// the same error.
//
// Thread-safe. Callbacks run without the gate's lock, on the thread that calls Wait() (once
// complete) or Complete().

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "troika/types.h"

namespace troika::agent {

class AttachGate {
 public:
  using Callback = std::function<void(absl::StatusOr<std::vector<Membership>>)>;

  // Calls `done` with the memberships of `ranks`, in order, once the upstream attach
  // completed (at once if it has), or with its error.
  void Wait(const std::vector<int>& ranks, Callback done);
  // The outcome of the upstream attach: the memberships of every node rank, or an error.
  // Only the first call counts (since the last Reset()). With `generation` (generation()
  // when that attach began), only if no Reset() came since: the outcome of an attach for a
  // generation that ended meanwhile is void.
  void Complete(absl::StatusOr<std::vector<Membership>> memberships,
                std::optional<uint64_t> generation = std::nullopt);
  // An elastic job's next generation: later Wait()s wait for its upstream attach. Ranks
  // still waiting for the ended one's are answered ABORTED (their numbers are void).
  void Reset();
  // How many times Reset() was called.
  uint64_t generation();

 private:
  struct Waiter {
    std::vector<int> ranks;
    Callback done;
  };
  static void Answer(const absl::StatusOr<std::map<int, Membership>>& outcome,
                     const Waiter& waiter);

  std::mutex mu_;
  // Guarded by mu_.
  std::optional<absl::StatusOr<std::map<int, Membership>>> outcome_;  // by rank
  std::vector<Waiter> waiters_;
  uint64_t generation_ = 0;
};

}  // namespace troika::agent
