#include "libclient/cuda/nccl_types.h"

namespace troika::cuda {
namespace {

bool Floating(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

}  // namespace

ncclDataType_t NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kBool:
      return ncclUint8;  // with the ops of ReductionOf
    case DataType::kInt16:
    case DataType::kUint16:
      break;  // no NCCL type: WireType widens them to int32
  }
  return ncclFloat32;
}

DataType WireType(const Response& r) {
  if (r.dtype == DataType::kInt16 || r.dtype == DataType::kUint16) return DataType::kInt32;
  switch (r.compression) {
    case Compression::kFloat16:
      return DataType::kFloat16;
    case Compression::kBFloat16:
      return DataType::kBFloat16;
    case Compression::kNone:
      break;
  }
  return r.dtype;
}

Reduction ReductionOf(const Response& r, int size) {
  if (r.dtype == DataType::kBool) {
    // troika/types.h: sum and max are a logical or, product and min a logical and; on bytes
    // that are 0 or nonzero, max and min compute exactly those (as torch.distributed's NCCL
    // backend does). Average is rejected before it gets here (CheckRequest).
    const bool conjunction = r.reduce_op == ReduceOp::kProduct || r.reduce_op == ReduceOp::kMin;
    return {conjunction ? ncclMin : ncclMax, 1};
  }
  switch (r.reduce_op) {
    case ReduceOp::kSum:
      return {ncclSum, 1};
    case ReduceOp::kMin:
      return {ncclMin, 1};
    case ReduceOp::kMax:
      return {ncclMax, 1};
    case ReduceOp::kProduct:
      return {ncclProd, 1};
    case ReduceOp::kAverage:
      // Joined ranks count in the average (they add zeros), as with Horovod.
      if (Floating(WireType(r))) return {ncclAvg, 1};
      return {ncclSum, size};
  }
  return {ncclSum, 1};
}

}  // namespace troika::cuda
