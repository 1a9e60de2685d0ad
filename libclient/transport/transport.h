#pragma once
// Transport: a factory of communicators for one kind of data plane. Picked by name in
// CreateTransport(); core code never names an implementation.

#include <memory>
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

// "gloo" (TCP), "shm" (shared memory; every rank on one host; see shm/shm_transport.h) or
// "memory" (ranks are threads of one process; see memory_transport.h).
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const std::string& name);

}  // namespace troika::transport
