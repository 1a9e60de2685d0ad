#pragma once
// MemoryTransport: a data plane whose ranks are threads of one process, for tests and for
// single-process runs. Every rank of a group calls Connect() on the SAME MemoryTransport
// object (share it with std::shared_ptr); ranks whose CommunicatorSpec has the same
// store_prefix form one group. Collectives exchange data through shared memory: each rank
// publishes its buffer pointers, and a generation barrier (std::mutex and
// std::condition_variable, which ThreadSanitizer understands) orders every read and write.
//
// As a fake it is stricter than a real network: every collective checks that all ranks
// issued the same collective with matching sizes, dtype, op and root, and fails on every
// rank with INVALID_ARGUMENT naming the disagreeing rank otherwise.
//
// Errors are group-wide, like a broken TCP mesh: Abort() on any rank, a timeout or a
// mismatch breaks the group, and every pending and later call on every rank of the group
// returns that error (CANCELLED after Abort, DEADLINE_EXCEEDED after a timeout).
//
// Thread contract: MemoryTransport is thread-safe. Each communicator follows the
// Communicator contract (one calling thread at a time, Abort() from anywhere). The
// transport may be destroyed while communicators it made are still alive.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "libclient/transport/transport.h"

namespace troika::transport {

namespace memory_internal {
class Group;
}  // namespace memory_internal

class MemoryTransport : public Transport {
 public:
  MemoryTransport() = default;
  MemoryTransport(const MemoryTransport&) = delete;
  MemoryTransport& operator=(const MemoryTransport&) = delete;
  ~MemoryTransport() override;

  // Blocks until spec.size ranks with spec.store_prefix have joined, or spec.timeout passes
  // (DEADLINE_EXCEEDED, after which that rank is no longer counted). `store` is unused.
  // INVALID_ARGUMENT for a bad rank or size, or a size differing from the group's;
  // ALREADY_EXISTS if the rank has already joined the pending group.
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override;

 private:
  std::mutex mu_;
  // Groups still waiting for ranks, by store_prefix. Guarded by mu_. A group leaves the map
  // once complete, so a later Connect with the same prefix forms a new group.
  std::map<std::string, std::shared_ptr<memory_internal::Group>> pending_;
};

}  // namespace troika::transport
