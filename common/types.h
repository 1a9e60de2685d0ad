#pragma once
// Helpers over the public vocabulary types (troika/types.h). No gRPC, no protobuf: the wire
// mapping lives in common/wire.h.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "troika/types.h"

namespace troika {

// Size in bytes of one element of `dtype`.
size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* CollectiveName(CollectiveType type);
// "none", "float16", "bfloat16" (also the values of TROIKA_COMPRESSION).
const char* CompressionName(Compression compression);

// Number of elements of a tensor of `shape` (1 for a scalar, 0 if any dimension is 0).
int64_t NumElements(const std::vector<int64_t>& shape);
// "[128,64]"
std::string ShapeString(const std::vector<int64_t>& shape);
// `shape` (at least one dimension) with dim 0 replaced by `dim0`.
std::vector<int64_t> WithDim0(std::vector<int64_t> shape, int64_t dim0);

}  // namespace troika
