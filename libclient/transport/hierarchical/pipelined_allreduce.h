#pragma once
// PipelinedAllreduce: the hierarchical allreduce of a large tensor in chunks, so that the
// node leaders' cross-node allreduce of chunk i (on a helper thread of the leader) overlaps
// the node's shared-memory allreduce of chunk i+1 and broadcast of chunk i-1. Every rank calls
// its parts in an order that depends only on the element count: on `local`, allreduce 0,
// allreduce 1, broadcast 0, allreduce 2, broadcast 1, ...; on `cross`, allreduce 0, 1, ...
//
// Thread contract: called from the communicator's collective thread; uses `local` from it
// and `cross` from one helper thread, which it joins before returning (on an error it aborts
// `cross` first, so the helper never outlives the call).

#include <cstddef>

#include "absl/status/status.h"
#include "common/types.h"
#include "libclient/transport/communicator.h"

namespace troika::transport {

// Bytes per chunk: large enough that a Gloo call's fixed cost is small against its transfer.
inline constexpr size_t kPipelineChunkBytes = size_t{4} << 20;

// `local`: the node's communicator, null when the node holds one rank; `cross`: the leaders',
// null unless this rank leads a node of several. `chunk` elements per chunk (> 0).
absl::Status PipelinedAllreduce(Communicator* local, Communicator* cross, void* data, size_t count,
                                DataType dtype, ReduceOp op, size_t chunk);

}  // namespace troika::transport
