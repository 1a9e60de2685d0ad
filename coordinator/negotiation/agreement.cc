#include "coordinator/negotiation/agreement.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::coordinator {
namespace {

using Field = std::function<std::string(const TensorRequest&)>;

// The error text if ranks disagree on `field`, naming each distinct value and its ranks.
std::optional<std::string> Disagreement(const std::vector<TensorRequest>& by_rank,
                                        const std::string& what, const Field& field) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // in order of first rank
  for (const TensorRequest& r : by_rank) {
    std::string value = field(r);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
    if (it == groups.end()) {
      groups.push_back({value, {r.rank}});
    } else {
      it->second.push_back(r.rank);
    }
  }
  if (groups.size() == 1) return std::nullopt;
  std::vector<std::string> parts;
  for (const auto& [value, ranks] : groups) {
    parts.push_back(absl::StrCat(FormatRanks(ranks), " sent ", value));
  }
  const TensorRequest& first = by_rank.front();
  return absl::StrCat("Mismatched ", CollectiveName(first.type), " ", what, " for '", first.name,
                      "': ", absl::StrJoin(parts, ", "));
}

std::string TrailingShape(const TensorRequest& r) {
  std::vector<int64_t> rest(r.shape.begin() + (r.shape.empty() ? 0 : 1), r.shape.end());
  return absl::StrCat("[*", rest.empty() ? "" : ",", absl::StrJoin(rest, ","), "]");
}

bool Dim0Free(CollectiveType type) {
  return type == CollectiveType::kAllgather || type == CollectiveType::kAlltoall;
}

bool Scaled(CollectiveType type) {
  return type == CollectiveType::kAllreduce || type == CollectiveType::kReducescatter;
}

// Fields every rank must agree on, checked in this order; the first disagreement is reported.
std::optional<std::string> FirstDisagreement(const std::vector<TensorRequest>& by_rank) {
  CollectiveType type = by_rank.front().type;
  std::vector<std::pair<std::string, Field>> fields = {
      {"operations", [](const TensorRequest& r) { return std::string(CollectiveName(r.type)); }},
      {"groups",
       [](const TensorRequest& r) {
         return r.group.empty() ? std::string("no group")
                                : absl::StrCat("group '", r.group, "' of ", r.group_size);
       }},
      {"device classes",
       [](const TensorRequest& r) {
         return std::string(r.device == DeviceClass::kGpu ? "gpu" : "cpu");
       }},
  };
  if (type != CollectiveType::kBarrier) {
    fields.push_back(
        {"data types", [](const TensorRequest& r) { return std::string(DataTypeName(r.dtype)); }});
    if (Dim0Free(type)) {
      fields.push_back({"shapes", TrailingShape});
    } else {
      fields.push_back({"shapes", [](const TensorRequest& r) { return ShapeString(r.shape); }});
    }
  }
  if (Scaled(type)) {
    fields.push_back({"reduce ops", [](const TensorRequest& r) {
                        return std::string(ReduceOpName(r.reduce_op));
                      }});
    fields.push_back(
        {"prescale factors", [](const TensorRequest& r) { return absl::StrCat(r.prescale); }});
    fields.push_back(
        {"postscale factors", [](const TensorRequest& r) { return absl::StrCat(r.postscale); }});
    fields.push_back({"compressions", [](const TensorRequest& r) {
                        return std::string(CompressionName(r.compression));
                      }});
  }
  if (type == CollectiveType::kBroadcast) {
    fields.push_back({"root ranks", [](const TensorRequest& r) { return absl::StrCat(r.root); }});
  }
  for (const auto& [what, field] : fields) {
    // The operation is compared first, so later fields compare like with like.
    if (auto error = Disagreement(by_rank, what, field)) return error;
  }
  return std::nullopt;
}

// True if every rank sent the same value of every field FirstDisagreement compares (shapes:
// the same number of dimensions and equal trailing ones, dim 0 too unless it is free). Cheap:
// the common case of a large job skips FirstDisagreement's per-rank strings. When false,
// FirstDisagreement decides (it may still find the values equal as printed).
bool Identical(const std::vector<TensorRequest>& by_rank) {
  const TensorRequest& first = by_rank.front();
  const bool barrier = first.type == CollectiveType::kBarrier;
  const bool scaled = Scaled(first.type);
  const size_t free_dims = Dim0Free(first.type) ? 1 : 0;
  for (const TensorRequest& r : by_rank) {
    if (r.type != first.type || r.group != first.group || r.group_size != first.group_size ||
        r.device != first.device) {
      return false;
    }
    if (!barrier) {
      if (r.dtype != first.dtype || r.shape.size() != first.shape.size()) return false;
      if (!std::equal(r.shape.begin() + std::min(free_dims, r.shape.size()), r.shape.end(),
                      first.shape.begin() + std::min(free_dims, first.shape.size()))) {
        return false;
      }
    }
    if (scaled && (r.reduce_op != first.reduce_op || r.prescale != first.prescale ||
                   r.postscale != first.postscale || r.compression != first.compression)) {
      return false;
    }
    if (first.type == CollectiveType::kBroadcast && r.root != first.root) return false;
  }
  return true;
}

}  // namespace

Response Agree(const std::vector<TensorRequest>& by_rank) {
  const TensorRequest& first = by_rank.front();
  Response response;
  response.names = {first.name};
  if (auto error = Identical(by_rank) ? std::nullopt : FirstDisagreement(by_rank)) {
    response.error = *error;
    return response;
  }
  const int size = static_cast<int>(by_rank.size());
  response.type = first.type;
  response.dtype = first.dtype;
  response.device = first.device;
  if (Scaled(first.type)) {
    response.reduce_op = first.reduce_op;
    response.prescale = first.prescale;
    response.postscale = first.postscale;
    response.compression = first.compression;
  }
  if (first.type == CollectiveType::kBroadcast) response.root = first.root;
  switch (first.type) {
    case CollectiveType::kAllgather:
      for (const TensorRequest& r : by_rank) response.sizes.push_back(r.shape[0]);
      break;
    case CollectiveType::kReducescatter: {
      // As even as possible; the first (dim0 % size) ranks receive one row more.
      int64_t rows = first.shape[0];
      for (int r = 0; r < size; ++r) response.sizes.push_back(rows / size + (r < rows % size));
      break;
    }
    case CollectiveType::kAlltoall:
      for (const TensorRequest& r : by_rank) {
        for (int j = 0; j < size; ++j) {
          response.splits.push_back(r.splits.empty() ? r.shape[0] / size : r.splits[j]);
        }
      }
      break;
    default:
      break;
  }
  return response;
}

}  // namespace troika::coordinator
