#include "common/types.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt16:
      return "int16";
    case DataType::kUint16:
      return "uint16";
    case DataType::kBool:
      return "bool";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

const char* CollectiveName(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllreduce:
      return "allreduce";
    case CollectiveType::kAllgather:
      return "allgather";
    case CollectiveType::kBroadcast:
      return "broadcast";
    case CollectiveType::kAlltoall:
      return "alltoall";
    case CollectiveType::kReducescatter:
      return "reducescatter";
    case CollectiveType::kBarrier:
      return "barrier";
    case CollectiveType::kJoin:
      return "join";
  }
  return "unknown";
}

const char* CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kFloat16:
      return "float16";
    case Compression::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::vector<int64_t> WithDim0(std::vector<int64_t> shape, int64_t dim0) {
  shape[0] = dim0;
  return shape;
}

}  // namespace troika
