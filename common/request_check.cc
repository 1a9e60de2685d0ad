#include "common/request_check.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace troika {
namespace {

bool ValidEnum(int value, int count) { return value >= 0 && value < count; }

absl::Status Invalid(const TensorRequest& r, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(CollectiveName(r.type), " '", r.name, "' on rank ", r.rank, ": ", what));
}

}  // namespace

absl::Status CheckRequest(const TensorRequest& r, int size) {
  const bool known = size > 0;
  if (r.cache_id != 0) {  // the rest is checked once the coordinator resolves the id
    if (r.rank < 0 || (known && r.rank >= size)) {
      return absl::InvalidArgumentError(absl::StrCat("a request sent as cache id ", r.cache_id,
                                                     " names rank ", r.rank, ", out of range"));
    }
    return absl::OkStatus();
  }
  if (r.name.empty()) return absl::InvalidArgumentError("a tensor name must not be empty");
  if (r.name.size() > kMaxNameBytes || r.group.size() > kMaxNameBytes) {
    const bool name = r.name.size() > kMaxNameBytes;
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveName(r.type), " on rank ", r.rank, ": its ",
                     name ? "tensor" : "group", " name of ", name ? r.name.size() : r.group.size(),
                     " bytes ('", (name ? r.name : r.group).substr(0, 32),
                     "...') is longer than the ", kMaxNameBytes, " bytes allowed"));
  }
  if (r.rank < 0 || (known && r.rank >= size)) {
    return Invalid(r, absl::StrCat("rank out of range [0, ", size, ")"));
  }
  if (!ValidEnum(static_cast<int>(r.type), 7)) return Invalid(r, "unknown collective type");
  if ((r.type == CollectiveType::kJoin) != (r.name == kJoinTensorName)) {
    return Invalid(r, absl::StrCat("the name '", kJoinTensorName,
                                   "' is reserved for Context::Join, and a join must carry it"));
  }
  if (r.group.empty() ? r.group_size != 0 : r.group_size < 1) {
    return Invalid(r, absl::StrCat("group '", r.group, "' with group size ", r.group_size,
                                   " (a grouped tensor needs a group name and a size >= 1)"));
  }
  if (!ValidEnum(static_cast<int>(r.dtype), kNumDataTypes)) return Invalid(r, "unknown dtype");
  if (!ValidEnum(static_cast<int>(r.reduce_op), 5)) return Invalid(r, "unknown reduce op");
  if (!ValidEnum(static_cast<int>(r.device), 2)) return Invalid(r, "unknown device class");
  if (!ValidEnum(static_cast<int>(r.compression), 3)) return Invalid(r, "unknown compression");
  if (r.compression != Compression::kNone &&
      (r.type != CollectiveType::kAllreduce || r.dtype != DataType::kFloat32 ||
       r.device != DeviceClass::kGpu)) {
    return Invalid(r, absl::StrCat("compression ", CompressionName(r.compression),
                                   " applies only to float32 allreduces on GPU"));
  }
  // Bounded shapes keep every byte count below 2^62, so no size computation can overflow.
  if (r.shape.size() > 32) return Invalid(r, "more than 32 dimensions");
  int64_t elements = 1;
  for (int64_t d : r.shape) {
    if (d < 0) return Invalid(r, absl::StrCat("negative dimension in ", ShapeString(r.shape)));
    if (d > 0 && elements > (int64_t{1} << 59) / d) return Invalid(r, "tensor too large");
    elements *= d;
  }
  if (!std::isfinite(r.prescale) || !std::isfinite(r.postscale)) {
    return Invalid(r, "scale factors must be finite");
  }
  if (r.dtype == DataType::kBool &&
      (r.type == CollectiveType::kAllreduce || r.type == CollectiveType::kReducescatter)) {
    // troika/types.h: sum and max are a logical or, product and min a logical and.
    if (r.reduce_op == ReduceOp::kAverage) {
      return Invalid(r,
                     "reduce op average is not defined for bool tensors (use sum or max for "
                     "a logical or, product or min for a logical and)");
    }
    if (r.prescale != 1.0 || r.postscale != 1.0) {
      return Invalid(r, absl::StrCat("bool tensors cannot be scaled (prescale ", r.prescale,
                                     ", postscale ", r.postscale, "; both must be 1)"));
    }
  }
  switch (r.type) {
    case CollectiveType::kAllreduce:
      break;
    case CollectiveType::kReducescatter:
      if (r.reduce_op != ReduceOp::kSum && r.reduce_op != ReduceOp::kAverage) {
        return Invalid(r, absl::StrCat("reduce op ", ReduceOpName(r.reduce_op),
                                       " is not supported (sum or average)"));
      }
      [[fallthrough]];
    case CollectiveType::kAllgather:
      if (r.shape.empty()) return Invalid(r, "needs a tensor of at least one dimension");
      break;
    case CollectiveType::kBroadcast:
      if (r.root < 0 || (known && r.root >= size)) {
        return Invalid(r, absl::StrCat("root rank ", r.root, " out of range [0, ", size, ")"));
      }
      break;
    case CollectiveType::kAlltoall: {
      if (r.shape.empty()) return Invalid(r, "needs a tensor of at least one dimension");
      if (r.splits.empty()) {
        if (known && r.shape[0] % size != 0) {
          return Invalid(r, absl::StrCat("dim 0 (", r.shape[0], ") is not divisible by ", size,
                                         " ranks; pass splits"));
        }
        break;
      }
      if (known && static_cast<int>(r.splits.size()) != size) {
        return Invalid(r, absl::StrCat("has ", r.splits.size(), " splits for ", size, " ranks"));
      }
      int64_t sum = 0;
      for (int64_t s : r.splits) {
        if (s < 0) return Invalid(r, "negative split");
        sum += s;
      }
      if (sum != r.shape[0]) {
        return Invalid(r, absl::StrCat("splits sum to ", sum, " but dim 0 is ", r.shape[0]));
      }
      break;
    }
    case CollectiveType::kBarrier:
      break;
    case CollectiveType::kJoin:
      if (!r.shape.empty() || !r.group.empty()) {
        return Invalid(r, "a join carries no shape and no group");
      }
      break;
  }
  return absl::OkStatus();
}

}  // namespace troika
