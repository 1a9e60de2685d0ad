#pragma once
// The benchmark's workloads: one iteration of a collective on one rank, run either on a raw
// data-plane Communicator (the Gloo baseline) or through the Troika client library (queued,
// negotiated by the coordinator, executed by libtroika's executor).
//
// Sizes follow nccl-tests: `bytes` is the whole buffer — the allreduce/broadcast buffer,
// the allgather output, the reducescatter input, one rank's alltoall send buffer.
//
// Thread contract: a Workload belongs to one rank's thread.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "libclient/transport/communicator.h"
#include "troika/troika.h"

namespace troika::bench {

enum class Kind {
  kAllreduce,      // float32 sum, in place
  kAllgather,      // bytes
  kBroadcast,      // bytes, root 0, in place
  kAlltoall,       // bytes, even split
  kReducescatter,  // float32 sum
  kManySmall,      // `tensors` float32 allreduces of `bytes / tensors` each per iteration
  kLatency,        // a 4-byte float32 allreduce
};

struct KindInfo {
  Kind kind;
  const char* name;  // as in --ops
  const char* what;  // table heading
};
const std::vector<KindInfo>& AllKinds();
std::optional<Kind> KindFromName(const std::string& name);
const char* KindName(Kind kind);

// busbw / algbw for `kind` on `ranks` ranks: 2(n-1)/n for allreduce (and its variants),
// (n-1)/n for allgather, reducescatter and alltoall, 1 for broadcast.
double BusFactor(Kind kind, int ranks);

// The size actually measured for a requested one: a multiple of what the collective needs
// (an element, or an element per rank), at least one such unit.
size_t EffectiveBytes(Kind kind, size_t requested, int ranks);

class Workload {
 public:
  virtual ~Workload() = default;
  // One iteration through the raw communicator. Blocks.
  virtual absl::Status RunRaw(transport::Communicator& raw) = 0;
  // One iteration through Troika: submit, then wait. Blocks.
  virtual absl::Status RunTroika(Context& troika) = 0;
};

// `bytes` must be EffectiveBytes(kind, ...). For kManySmall, `bytes` is one tensor's size and
// `tensors` the number of tensors; otherwise `tensors` is ignored. `wait`: kAllreduce and
// kLatency submit with AllreduceOptions::wait (false: Allreduce(...).Wait()).
std::unique_ptr<Workload> MakeWorkload(Kind kind, size_t bytes, int tensors, int ranks,
                                       bool wait = true);

}  // namespace troika::bench
