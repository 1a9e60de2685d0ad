#pragma once
// AutoTransport ("auto", the default data plane): for each communicator it connects (the
// job's, each process set's, each elastic generation's), learns the node of every rank
// through the Store (hierarchical/node_map.h) and connects, from that membership:
// - every rank on one node: shared memory (shm/shm_transport.h);
// - ranks on several nodes, some node holding more than one: the hierarchical communicator
//   (hierarchical/hierarchical_transport.h), its allreduce and allgather each flat instead
//   when TransportOptions says so; both flat: Gloo;
// - one rank per node: Gloo.
// Every rank reads the same reports, so every rank chooses alike.
//
// Thread contract: thread-safe and stateless; Connect() may run concurrently for different
// ranks.

#include <memory>

#include "absl/status/statusor.h"
#include "libclient/transport/transport.h"

namespace troika::transport {

class AutoTransport : public Transport {
 public:
  explicit AutoTransport(TransportOptions options) : options_(options) {}
  // Blocks until every rank has connected the chosen data plane, or fails with its error
  // (INVALID_ARGUMENT for a bad spec; the Store's error, naming the rank, when a rank never
  // says its node within spec.timeout).
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override;

 private:
  const TransportOptions options_;
};

}  // namespace troika::transport
