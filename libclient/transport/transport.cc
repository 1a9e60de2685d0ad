#include "libclient/transport/transport.h"

#include "absl/strings/str_cat.h"
#include "libclient/transport/gloo/gloo_transport.h"
#include "libclient/transport/memory/memory_transport.h"
#include "libclient/transport/shm/shm_transport.h"

namespace troika::transport {

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const std::string& name) {
  if (name == "gloo") return std::make_unique<GlooTransport>();
  // Useful only if the caller shares the one object between its rank threads.
  if (name == "memory") return std::make_unique<MemoryTransport>();
  if (name == "shm") return std::make_unique<ShmTransport>();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "'; valid choices: gloo, shm, memory"));
}

}  // namespace troika::transport
