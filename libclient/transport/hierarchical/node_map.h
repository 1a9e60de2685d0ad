#pragma once
// NodeMap: which node each rank of one communicator runs on, learnt through the job's Store
// when the communicator connects, and the choice of data plane made from it. Every rank reads
// the same reports, so every rank makes the same choice without a further round.
//
// Thread contract: ExchangeNodes may run concurrently for different ranks (tests run every rank
// of a group as a thread); the rest are pure functions.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libclient/transport/store.h"
#include "libclient/transport/transport.h"

namespace troika::transport {

struct NodeMap {
  // Nodes are numbered in the order of their lowest rank; node 0 holds rank 0.
  std::vector<int> node_of;             // by rank
  std::vector<std::vector<int>> ranks;  // by node: its ranks, ascending; ranks[k][0] leads it
  std::vector<std::string> names;       // by node

  int nodes() const { return static_cast<int>(ranks.size()); }
  // The position of `rank` among its node's ranks (its local rank in this communicator).
  int LocalIndex(int rank) const;
  // True when some node holds more than one rank.
  bool AnyNodeShared() const;
};

// spec.node, or this host's name when it is empty.
std::string NodeName(const CommunicatorSpec& spec);

// Builds the map from each rank's node name, by rank.
NodeMap MakeNodeMap(const std::vector<std::string>& node_by_rank);

// Publishes this rank's node under "<spec.store_prefix>node/<rank>"; rank 0
// reads every rank's and publishes them all under "<spec.store_prefix>node/all", which the
// others read (2n store calls per communicator). The Store's error (DEADLINE_EXCEEDED after
// spec.timeout, naming the rank waited for) otherwise.
absl::StatusOr<NodeMap> ExchangeNodes(const CommunicatorSpec& spec, Store& store);

// The data plane the "auto" transport gives a communicator with this map.
struct Choice {
  enum Kind { kShm, kGloo, kHierarchical } kind = kGloo;
  bool hierarchical_allreduce = false;  // kHierarchical only
  bool hierarchical_allgather = false;
  std::string why;  // for the log: what was chosen and why
};
Choice ChooseDataPlane(const NodeMap& map, const TransportOptions& options);

}  // namespace troika::transport
