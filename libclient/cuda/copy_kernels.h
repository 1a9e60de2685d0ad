#pragma once
// Batched copy kernels of the GPU data plane: packing many tensors into the device fusion
// buffer and unpacking them, with the scaling and float16/bfloat16 casts fused into the same
// pass. One kernel launch copies up to kMaxCopyItems tensors (docs/gpu.md).
//
// The arithmetic matches the CPU data planes (libclient/transport/reduce.h) value for value:
// integers are scaled in double and truncated toward zero, saturating (NaN becomes 0), and
// divided exactly; float32 and float64 are scaled in their own type (the factor rounded to it
// first, as Horovod's scaling does) and divided in it; float16 and bfloat16 in float32 (the
// divisor as a product with its reciprocal), rounded to nearest even. One difference, which
// is Horovod's too: a float16 tensor (not one packed from float32) is scaled by the factor
// rounded to float16 (Horovod's GPU scales float16 by a float16 multiply; its CPU, and ours, in
// float32), unless that rounding overflows.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace troika::cuda {

// One tensor of a batch. `src` null: the destination is filled with zeros (a joined rank's
// stand-in). `src == dst` is allowed (in place); other overlaps are not.
struct CopyItem {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t count = 0;  // elements
};

// What every item of one launch does to each element x:
//   y = convert<dst>(convert<compute>(x) / divisor * scale)
// with the divisor applied only when > 1 and the scale only when != 1.
struct CopyTransform {
  DataType src = DataType::kFloat32;
  // Equal to `src`, or (float32 -> float16 / bfloat16) to pack compressed, or
  // (float16 / bfloat16 -> float32) to unpack; or (int16 / uint16 -> int32) to pack for NCCL,
  // which has no 16-bit integers, and (int32 -> int16 / uint16, wrapping modulo 2^16) to
  // unpack. Integer conversions happen outside the scaling, which runs in the 16-bit type.
  DataType dst = DataType::kFloat32;
  double scale = 1.0;
  int64_t divisor = 1;
};

// Items per launch: they travel as the kernel's parameter (no descriptor copy).
inline constexpr int kMaxCopyItems = 128;

// True if `t` is a supported conversion.
bool SupportedTransform(const CopyTransform& t);

// Queues copies of `items[0..n)` on `stream`: ceil(n / kMaxCopyItems) kernel launches in all.
// Returns the launch error, if any (cudaErrorInvalidValue for an unsupported transform).
cudaError_t BatchedCopy(const CopyItem* items, int n, const CopyTransform& transform,
                        cudaStream_t stream);

}  // namespace troika::cuda
