#pragma once
// ShmTransport: connects ShmCommunicators, the data plane of ranks that share one host,
// through shared memory (shm_communicator.h; design in docs/shm.md).
//
// Bootstrap: once every other rank has said in the Store that it is waiting, rank 0 creates
// an anonymous segment (a memfd: nothing in /dev/shm, so no death of any rank, kill -9
// included, leaves memory behind) and publishes its locator ("<pid> <fd> <nonce>") in the
// Store under spec.store_prefix; the other ranks open it through /proc/<pid>/fd/<fd> and map
// it. Every rank then says so in the Store and waits there for the others (so the job's
// failure ends the wait, as it ends Gloo's), and rank 0 closes its descriptor: from then on
// the memory lives only as long as some rank maps it.
//
// Every rank of the group must run on the host of rank 0, in its PID namespace, as its user:
// a rank that cannot open the segment fails with FAILED_PRECONDITION saying so.
//
// Thread contract: thread-safe and stateless; Connect() may run concurrently for different
// ranks (tests run every rank of a group as a thread of one process).

#include <memory>

#include "absl/status/statusor.h"
#include "libclient/transport/shm/shm_sync.h"
#include "libclient/transport/transport.h"

namespace troika::transport {

class ShmTransport : public Transport {
 public:
  // `wait`: how its communicators' ranks wait for each other (the defaults adapt to the
  // host; tests force each mode).
  explicit ShmTransport(const shm_internal::ShmWaitOptions& wait = {}) : wait_(wait) {}

  // Blocks until every rank has mapped the segment, or fails after about spec.timeout:
  // INVALID_ARGUMENT for a bad spec, the Store's error (DEADLINE_EXCEEDED when rank 0 never
  // published the segment), FAILED_PRECONDITION when the segment cannot be opened here (a
  // rank on another host), the Store's error when a rank never mapped it (DEADLINE_EXCEEDED
  // naming its key).
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override;

 private:
  // Constant after construction.
  const shm_internal::ShmWaitOptions wait_;
};

}  // namespace troika::transport
