#pragma once
// Agreement: turns the requests of every rank for one tensor into the response every rank
// will execute, or into an error response whose message names the tensor, the ranks and the
// values that differ ("Mismatched allreduce shapes for 'grad/fc1': ranks 0-2 sent [128,64],
// rank 3 sent [128,32]"). Pure function; each request already passed CheckRequest().

#include <vector>

#include "common/messages.h"

namespace troika::coordinator {

// `by_rank[r]` is rank r's request; all carry the same name.
Response Agree(const std::vector<TensorRequest>& by_rank);

}  // namespace troika::coordinator
