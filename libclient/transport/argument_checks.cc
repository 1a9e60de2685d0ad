#include "libclient/transport/argument_checks.h"

#include "absl/strings/str_cat.h"

namespace troika::transport {

absl::Status CheckPerRank(std::span<const size_t> v, int size, const char* what) {
  if (v.size() == static_cast<size_t>(size)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has ", v.size(), " entries; expected one per rank (", size, ")"));
}

absl::Status CheckReduction(DataType dtype, ReduceOp op) {
  if (DataTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
  }
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::kProduct)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", static_cast<int>(op)));
  }
  return absl::OkStatus();
}

}  // namespace troika::transport
