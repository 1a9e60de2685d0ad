#include "coordinator/state/job_record.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace troika::coordinator {

v1::JobRecord JobRecordData::ToProto() const {
  v1::JobRecord record;
  record.set_name(name);
  record.set_size(size);
  record.set_token_sha256(token_sha256);
  for (const auto& [node, host] : nodes) (*record.mutable_nodes())[node] = host;
  for (const auto& [id, ranks] : process_sets) {
    (*record.mutable_process_sets())[id].mutable_ranks()->Assign(ranks.begin(), ranks.end());
  }
  record.set_next_process_set(next_process_set);
  if (min_size > 0) {
    record.set_min_size(min_size);
    record.set_max_size(max_size);
    record.set_epoch(epoch);
    record.set_generation_cause(generation_cause);
  } else if (epoch > 1) {
    record.set_epoch(epoch);  // a job formed anew: its sessions are at this epoch
  }
  return record;
}

absl::StatusOr<JobRecordData> JobRecordData::Restorable(const v1::JobRecord& record,
                                                        const std::string& name, int size) {
  JobRecordData data;
  for (const auto& [id, set] : record.process_sets()) {
    std::vector<int> ranks(set.ranks().begin(), set.ranks().end());
    const bool valid = id > 0 && !ranks.empty() && ranks.front() >= 0 && ranks.back() < size &&
                       std::is_sorted(ranks.begin(), ranks.end()) &&
                       std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
    if (!valid) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", name, "': process set ", id, " of the record is not valid"));
    }
    data.process_sets[id] = std::move(ranks);
  }
  for (const auto& [node, host] : record.nodes()) {
    if (node < 0 || node >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", name, "': node rank ", node, " of the record is not valid"));
    }
    data.nodes[node] = host;
  }
  data.next_process_set = record.next_process_set();
  return data;
}

}  // namespace troika::coordinator
