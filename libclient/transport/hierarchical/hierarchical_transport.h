#pragma once
// HierarchicalTransport: connects HierarchicalCommunicators (hierarchical_communicator.h;
// design in docs/shm.md). Connect() learns every rank's node through the Store
// (node_map.h: CommunicatorSpec::node, else the host name), then connects, in this order and
// each under its own sub-prefix of spec.store_prefix: the node's shared memory
// ("h/node<k>/", ranks of node k, if it holds several), the leaders' Gloo ("h/cross/", the
// lowest rank of each node, if there are several nodes) and every rank's Gloo ("h/flat/").
// Gloo binds spec.host, which must be reachable from the other nodes.
//
// Thread contract: thread-safe and stateless; Connect() may run concurrently for different
// ranks.

#include <memory>

#include "absl/status/statusor.h"
#include "libclient/transport/hierarchical/node_map.h"
#include "libclient/transport/transport.h"

namespace troika::transport {

class HierarchicalTransport : public Transport {
 public:
  // Unset options are true: allreduce and allgather hierarchical.
  explicit HierarchicalTransport(TransportOptions options) : options_(options) {}
  // Blocks until every part has connected, or fails after about spec.timeout per step:
  // INVALID_ARGUMENT for a bad spec, else the Store's or the part's error, naming the rank.
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override;

 private:
  const TransportOptions options_;
};

// INVALID_ARGUMENT, naming `transport`, for a rank outside [0, size) or a timeout outside
// (0, 24h].
absl::Status CheckSpec(const CommunicatorSpec& spec, const char* transport);

// Connects this rank's parts for the nodes in `map` (every rank passes an equal map).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectHierarchical(const CommunicatorSpec& spec,
                                                                  Store& store, const NodeMap& map,
                                                                  bool hierarchical_allreduce,
                                                                  bool hierarchical_allgather);

}  // namespace troika::transport
