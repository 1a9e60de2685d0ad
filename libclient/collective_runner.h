#pragma once
// CollectiveRunner: executes one negotiated response on the data plane for this rank's
// entries — packing fused allreduces into the fusion buffer with their scaling, sizing and
// filling handle-owned outputs, and unpacking results.
//
// Not thread-safe: owned by the executor thread.

#include <vector>

#include "absl/status/status.h"
#include "common/messages.h"
#include "libclient/fusion_buffer.h"
#include "libclient/op_state.h"
#include "libclient/transport/communicator.h"

namespace troika::internal {

class CollectiveRunner {
 public:
  explicit CollectiveRunner(transport::Communicator& comm) : comm_(comm) {}

  // `entries[i]` is this rank's entry for response.names[i]. Writes outputs; does not
  // complete the handles. A non-OK status is a data-plane failure.
  absl::Status Run(const Response& response, const std::vector<Entry*>& entries);

 private:
  absl::Status Allreduce(const Response& response, const std::vector<Entry*>& entries);
  absl::Status Allgather(const Response& response, Entry& entry);
  absl::Status Broadcast(const Response& response, Entry& entry);
  absl::Status Alltoall(const Response& response, Entry& entry);
  absl::Status Reducescatter(const Response& response, Entry& entry);

  transport::Communicator& comm_;
  FusionBuffer fusion_;
};

}  // namespace troika::internal
