#pragma once
// What NCCL sees of a response: the dtype on the wire, NCCL's type and reduction op, and the
// divisor left for the unpack (docs/gpu.md).

#include <nccl.h>

#include <cstdint>

#include "common/messages.h"

namespace troika::cuda {

// NCCL's type for a dtype of the wire (WireType): int16 and uint16 never are one.
ncclDataType_t NcclType(DataType dtype);

// The dtype in NCCL's buffers: the compressed one, int32 for int16 and uint16 (NCCL has no
// 16-bit integers; copy_kernels.h), else the tensor's own.
DataType WireType(const Response& r);

// How a reduction runs: NCCL's op, and the divisor the unpack applies. Averages use ncclAvg
// where NCCL computes them exactly as we would (floating types, every rank contributing);
// otherwise a sum divided by the ranks that contributed (joined ranks add zeros).
struct Reduction {
  ncclRedOp_t op = ncclSum;
  int64_t divisor = 1;
};
Reduction ReductionOf(const Response& r, int size);

}  // namespace troika::cuda
