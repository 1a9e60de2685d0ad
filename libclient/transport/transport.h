#pragma once
// Transport: a factory of communicators for one kind of data plane. Picked by name in
// CreateTransport(); core code never names an implementation.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libclient/transport/communicator.h"
#include "libclient/transport/store.h"

namespace troika::transport {

struct CommunicatorSpec {
  int rank = 0;
  int size = 1;
  // Keys this communicator puts in the store start with this prefix; a rebuilt communicator
  // uses a new prefix so that stale addresses are never read.
  std::string store_prefix = "comm/0/";
  // Address other ranks reach this rank's data plane at ("127.0.0.1", a host name, an IP).
  std::string host = "127.0.0.1";
  // The node this rank runs on: ranks with equal nodes share shared memory. Compared only
  // with the other ranks' (the "auto" and "hierarchical" transports group ranks by it);
  // empty: this host's name (gethostname). Tests give threads of one process different nodes.
  std::string node;
  // Upper bound for connecting and for any single transfer.
  absl::Duration timeout = absl::Seconds(30);
};

// Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  // Blocks until every rank of the group has joined (through `store`) or spec.timeout passes.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                                Store& store) = 0;
};

// How the "auto" and "hierarchical" transports run allreduce (and reducescatter) and
// allgather on a communicator whose ranks span nodes: through shared memory within each node
// and Gloo between the nodes' leaders (true), or flat over Gloo (false). Unset: "auto"
// chooses hierarchical when some node holds more than one of the communicator's ranks;
// "hierarchical" always does.
struct TransportOptions {
  std::optional<bool> hierarchical_allreduce;
  std::optional<bool> hierarchical_allgather;
};

// "auto" (per communicator, from the nodes of its ranks: shm when they share one node, the
// hierarchical communicator when they span nodes and some node holds several, Gloo
// otherwise; auto/auto_transport.h), "gloo" (TCP), "shm" (shared memory; every rank on one
// host; shm/shm_transport.h), "hierarchical" (shm within a node, Gloo between nodes;
// hierarchical/hierarchical_transport.h) or "memory" (ranks are threads of one process;
// memory_transport.h).
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const std::string& name,
                                                           const TransportOptions& options = {});

}  // namespace troika::transport
