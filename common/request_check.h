#pragma once
// Checks one rank's request on its own: what can be judged without seeing the other ranks.
// The client runs it before anything leaves the process (an immediate error for the caller);
// the coordinator runs it again on everything it receives (a peer may be buggy or hostile).

#include "absl/status/status.h"
#include "common/messages.h"

namespace troika {

// The longest tensor or group name, in bytes: a protocol limit, so a client refuses a longer
// name itself (the op fails at once on that rank) and the coordinator can rely on it.
inline constexpr size_t kMaxNameBytes = 1024;

// INVALID_ARGUMENT with a message naming the tensor, or OK. `size`: ranks in the request's
// process set, with `request.rank` its position in the set; 0 where the set's size is not
// known (an agent relaying a set it has not seen formed): what depends on it — the rank's,
// the root's and the splits' ranges — is then left to the coordinator. A request sent as a
// cache id is only checked for its rank.
absl::Status CheckRequest(const TensorRequest& request, int size);

}  // namespace troika
