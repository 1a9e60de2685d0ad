#include "libclient/transport/hierarchical/hierarchical_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "libclient/transport/gloo/gloo_transport.h"
#include "libclient/transport/hierarchical/hierarchical_communicator.h"
#include "libclient/transport/shm/shm_transport.h"

namespace troika::transport {
namespace {

absl::Status Named(const CommunicatorSpec& spec, const char* what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("hierarchical connect failed (rank ", spec.rank,
                                             " of ", spec.size, ", store prefix '",
                                             spec.store_prefix, "'): ", what, ": ", s.message()));
}

}  // namespace

absl::Status CheckSpec(const CommunicatorSpec& spec, const char* transport) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat(transport, " transport: invalid rank ",
                                                   spec.rank, " for group size ", spec.size));
  }
  if (spec.timeout <= absl::ZeroDuration() || spec.timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(transport, " transport: timeout must be in ",
                                                   "(0, 24h], got ",
                                                   absl::FormatDuration(spec.timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectHierarchical(const CommunicatorSpec& spec,
                                                                  Store& store, const NodeMap& map,
                                                                  bool hierarchical_allreduce,
                                                                  bool hierarchical_allgather) {
  const int node = map.node_of[spec.rank];
  const std::vector<int>& mine = map.ranks[node];
  HierarchicalCommunicator::Parts parts;
  if (mine.size() > 1) {
    CommunicatorSpec local = spec;
    local.rank = map.LocalIndex(spec.rank);
    local.size = static_cast<int>(mine.size());
    local.store_prefix = absl::StrCat(spec.store_prefix, "h/node", node, "/");
    auto comm = ShmTransport().Connect(local, store);
    if (!comm.ok()) return Named(spec, "this node's shared memory", comm.status());
    parts.local = *std::move(comm);
  }
  if (map.nodes() > 1 && mine[0] == spec.rank) {
    CommunicatorSpec cross = spec;
    cross.rank = node;
    cross.size = map.nodes();
    cross.store_prefix = absl::StrCat(spec.store_prefix, "h/cross/");
    auto comm = GlooTransport().Connect(cross, store);
    if (!comm.ok()) return Named(spec, "the node leaders' Gloo", comm.status());
    parts.cross = *std::move(comm);
  }
  CommunicatorSpec flat = spec;
  flat.store_prefix = absl::StrCat(spec.store_prefix, "h/flat/");
  auto comm = GlooTransport().Connect(flat, store);
  if (!comm.ok()) return Named(spec, "every rank's Gloo", comm.status());
  parts.flat = *std::move(comm);
  return std::make_unique<HierarchicalCommunicator>(spec.rank, map, std::move(parts),
                                                    hierarchical_allreduce, hierarchical_allgather);
}

absl::StatusOr<std::unique_ptr<Communicator>> HierarchicalTransport::Connect(
    const CommunicatorSpec& spec, Store& store) {
  RETURN_IF_ERROR(CheckSpec(spec, "hierarchical"));
  absl::StatusOr<NodeMap> map = ExchangeNodes(spec, store);
  if (!map.ok()) return Named(spec, "learning the ranks' nodes", map.status());
  return ConnectHierarchical(spec, store, *map, options_.hierarchical_allreduce.value_or(true),
                             options_.hierarchical_allgather.value_or(true));
}

}  // namespace troika::transport
