#pragma once
// ProcessSetTable: the process sets this rank knows (every set added and not removed, also
// those it is not a member of), and on members the set's data-plane communicator. Set 0 (the
// whole job) is not in the table: its communicator belongs to the context.
//
// Thread-safe. The executor thread adds and removes sets in stream order and is the only
// user of the communicators' collective calls; user threads check membership; any thread may
// abort every communicator.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "libclient/transport/communicator.h"

namespace troika::internal {

class ProcessSetTable {
 public:
  explicit ProcessSetTable(int rank) : rank_(rank) {}

  // Registers set `id` of global `ranks`; `comm` is this rank's communicator in it (null on a
  // non-member). Once aborted, the communicator is aborted at once.
  void Add(int id, std::vector<int> ranks, std::unique_ptr<transport::Communicator> comm);
  // Forgets set `id` and destroys its communicator. Executor thread only.
  void Remove(int id);
  // The communicator of set `id`, or null if this rank is not in it (or it does not exist).
  // The pointer stays valid until Remove(id), which only the executor thread calls.
  transport::Communicator* communicator(int id) const;
  // {this rank's position in set `id`, the set's size} if this rank is in it;
  // FAILED_PRECONDITION naming the problem otherwise. Set 0 is not handled here.
  absl::StatusOr<std::pair<int, int>> Member(int id) const;
  // The size of set `id` if it exists (added and not removed), whether or not this rank is
  // in it.
  std::optional<int> SizeOf(int id) const;
  // Aborts every communicator, now and later added.
  void AbortAll();

 private:
  struct Set {
    std::vector<int> ranks;
    std::unique_ptr<transport::Communicator> comm;
  };

  const int rank_;
  mutable std::mutex mu_;
  std::map<int, Set> sets_;  // guarded by mu_
  bool aborted_ = false;     // guarded by mu_
};

}  // namespace troika::internal
