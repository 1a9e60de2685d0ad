#pragma once
// JobRecordData: what a job's state record (StateStore, --state_dir) holds, as plain data:
// enough for a restarted coordinator to make the job as it was — its name, size and token,
// its nodes' blocks, its process sets, and an elastic job's generation or a re-formed job's
// epoch.
//
// Thread contract: a value type.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "troika/v1/troika.pb.h"

namespace troika::coordinator {

struct JobRecordData {
  std::string name;
  int size = 0;
  std::string token_sha256;
  std::map<int, std::string> nodes;              // node rank -> host
  std::map<int, std::vector<int>> process_sets;  // id (> 0) -> ranks, ascending
  int next_process_set = 1;
  int min_size = 0;  // an elastic job's (0: not elastic)
  int max_size = 0;
  int64_t epoch = 1;
  std::string generation_cause;

  // The record; an epoch is recorded for an elastic job, or a job formed anew (epoch > 1).
  v1::JobRecord ToProto() const;
  // The nodes and process sets of `record`, checked against a job of `size` ranks named
  // `name` (INVALID_ARGUMENT naming what does not fit). Only those fields are read.
  static absl::StatusOr<JobRecordData> Restorable(const v1::JobRecord& record,
                                                  const std::string& name, int size);
};

}  // namespace troika::coordinator
