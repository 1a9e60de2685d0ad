#pragma once
// ShmTransport: connects ShmCommunicators, the data plane of ranks that share one host,
// through POSIX shared memory (shm_communicator.h; design in docs/shm.md).
//
// Bootstrap: once every other rank has said in the Store that it is waiting, rank 0 creates
// a segment under a fresh name ("/troika-shm-<pid>-<nonce>", with O_EXCL, so two jobs,
// generations or process sets never share one) and publishes the name in the Store under
// spec.store_prefix; the other ranks map it. Every rank then says so in
// the Store and waits there for the others (so the job's failure ends the wait, as it ends
// Gloo's), and once every rank has mapped it, every rank unlinks the name: from then on the
// memory lives only as long as some rank maps it, so a killed rank leaves nothing in
// /dev/shm. A rank that fails to connect after the name is known unlinks it too.
//
// Every rank of the group must run on the host of rank 0 (in the same IPC namespace): a rank
// that cannot open the segment fails with FAILED_PRECONDITION saying so.
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
