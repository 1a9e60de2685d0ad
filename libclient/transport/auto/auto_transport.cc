#include "libclient/transport/auto/auto_transport.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "libclient/transport/gloo/gloo_transport.h"
#include "libclient/transport/hierarchical/hierarchical_transport.h"
#include "libclient/transport/hierarchical/node_map.h"
#include "libclient/transport/shm/shm_transport.h"

namespace troika::transport {

absl::StatusOr<std::unique_ptr<Communicator>> AutoTransport::Connect(const CommunicatorSpec& spec,
                                                                     Store& store) {
  RETURN_IF_ERROR(CheckSpec(spec, "auto"));
  absl::StatusOr<NodeMap> map = ExchangeNodes(spec, store);
  if (!map.ok()) {
    return absl::Status(
        map.status().code(),
        absl::StrCat("data plane selection failed (rank ", spec.rank, " of ", spec.size,
                     ", store prefix '", spec.store_prefix, "'): ", map.status().message()));
  }
  const Choice choice = ChooseDataPlane(*map, options_);
  if (spec.rank == 0) {
    TROIKA_LOG(INFO) << "data plane of '" << spec.store_prefix << "' (" << spec.size
                     << " ranks): " << choice.why;
  }
  switch (choice.kind) {
    case Choice::kShm:
      return ShmTransport().Connect(spec, store);
    case Choice::kHierarchical:
      return ConnectHierarchical(spec, store, *map, choice.hierarchical_allreduce,
                                 choice.hierarchical_allgather);
    case Choice::kGloo:
      break;
  }
  return GlooTransport().Connect(spec, store);
}

}  // namespace troika::transport
