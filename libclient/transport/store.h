#pragma once
// Store: the key-value store a data plane bootstraps through (Gloo addresses, NCCL unique
// ids). Implemented over the coordinator's per-job store by the client library, and in memory
// for tests. Knows nothing of gRPC.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troika::transport {

// Thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists or `timeout` passes (DEADLINE_EXCEEDED).
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
  // Blocks until every key exists or `timeout` passes (DEADLINE_EXCEEDED).
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
};

}  // namespace troika::transport
