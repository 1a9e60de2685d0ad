#include "common/messages.h"

#include <string.h>

#include "absl/strings/str_cat.h"

namespace troika {

int64_t TensorRequest::ByteSize() const {
  return NumElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
}

int64_t TensorRequest::RowBytes() const {
  int64_t elements = 1;
  for (size_t i = 1; i < shape.size(); ++i) elements *= shape[i];
  return elements * static_cast<int64_t>(DataTypeSize(dtype));
}

std::string DescribeRankExit(const RankExit& exit) {
  std::string who = absl::StrCat("rank ", exit.rank, exit.host.empty() ? "" : " on ", exit.host);
  if (exit.signal != 0) {
    return absl::StrCat(who, " was killed by signal ", exit.signal, " (", strsignal(exit.signal),
                        ")");
  }
  if (!exit.reason.empty()) {
    return absl::StrCat(who, ": its agent ended its session: ", exit.reason);
  }
  if (exit.exit_code < 0) return absl::StrCat(who, " lost its session without leaving the job");
  return absl::StrCat(who, " exited with code ", exit.exit_code,
                      exit.exit_code == 0 ? " before joining the job" : "");
}

std::string ProcessSetTensorName(int process_set, const std::string& name) {
  if (process_set == 0) return name;
  return absl::StrCat(name, " (process set ", process_set, ")");
}

ScheduleTensors::ScheduleTensors(const Schedule& schedule) {
  for (const Response& entry : schedule.entries) {
    ids.insert(entry.cache_ids.begin(), entry.cache_ids.end());
    names.insert(entry.names.begin(), entry.names.end());
  }
}

bool ScheduleTensors::Names(const TensorRequest& request) const {
  if (request.process_set != 0) return false;
  return request.cache_id != 0 ? ids.count(request.cache_id) > 0 : names.count(request.name) > 0;
}

std::string FormatRanks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no ranks";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    absl::StrAppend(&out, ranks[i]);
    if (j > i) absl::StrAppend(&out, "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace troika
