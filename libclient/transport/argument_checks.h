#pragma once
// Argument checks shared by the communicators that validate their inputs before moving any
// bytes (Gloo and shared memory): a wrong argument is an InvalidArgument error on that rank.

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "common/types.h"

namespace troika::transport {

// OK when `v` has one entry per rank of a group of `size`; otherwise an InvalidArgument error
// that names the argument (`what`) and both counts.
absl::Status CheckPerRank(std::span<const size_t> v, int size, const char* what);

// OK when `dtype` is a known DataType and `op` a known ReduceOp; otherwise InvalidArgument.
absl::Status CheckReduction(DataType dtype, ReduceOp op);

}  // namespace troika::transport
