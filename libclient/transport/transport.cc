#include "libclient/transport/transport.h"

#include "absl/strings/str_cat.h"
#include "libclient/transport/auto/auto_transport.h"
#include "libclient/transport/gloo/gloo_transport.h"
#include "libclient/transport/hierarchical/hierarchical_transport.h"
#include "libclient/transport/memory/memory_transport.h"
#include "libclient/transport/shm/shm_transport.h"

namespace troika::transport {

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const std::string& name,
                                                           const TransportOptions& options) {
  if (name == "auto") return std::make_unique<AutoTransport>(options);
  if (name == "gloo") return std::make_unique<GlooTransport>();
  // Useful only if the caller shares the one object between its rank threads.
  if (name == "memory") return std::make_unique<MemoryTransport>();
  if (name == "shm") return std::make_unique<ShmTransport>();
  if (name == "hierarchical") return std::make_unique<HierarchicalTransport>(options);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown transport '", name, "'; valid choices: auto, gloo, shm, hierarchical, memory"));
}

}  // namespace troika::transport
