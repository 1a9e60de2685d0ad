#pragma once
// GlooTransport: connects GlooCommunicators over Gloo's TCP transport. Each Connect() makes
// its own Gloo device (one listening socket per peer and one event-loop thread) bound to
// spec.host, publishes its addresses in the Store under spec.store_prefix, and connects a
// full mesh to the other ranks.
//
// Side effect: Connect() sets SIGPIPE to be ignored if it still has its default action. Gloo
// writes to sockets without MSG_NOSIGNAL, and a peer that dies mid-transfer would otherwise
// kill this process instead of failing the collective with UNAVAILABLE.
//
// Thread contract: thread-safe and stateless; Connect() may run concurrently for different
// ranks (the tests run every rank of a group as a thread of one process).

#include <memory>

#include "absl/status/statusor.h"
#include "libclient/transport/transport.h"

namespace troika::transport {

class GlooTransport : public Transport {
 public:
  // Blocks until every rank has connected, or fails after about spec.timeout:
  // INVALID_ARGUMENT for a bad spec, the Store's error (DEADLINE_EXCEEDED when a rank never
  // published its address), UNAVAILABLE when a peer cannot be reached.
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override;
};

}  // namespace troika::transport
