#pragma once
// Recorder: one job's state record (JobRecordData; StateStore, --state_dir) — what a restarted
// coordinator needs to take the job's agents back: its name, size and token, its node blocks,
// its process sets and its generation. It makes the record from the job's parts, saves it
// through on_record when one of them changed, and restores a restarted coordinator's job
// from it.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.
// on_record runs under that lock.

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/roster.h"
#include "coordinator/negotiation/process_sets.h"
#include "coordinator/state/secret.h"
#include "troika/v1/troika.pb.h"

namespace troika::coordinator {

class Recorder {
 public:
  // The record of job `job` of `size` ranks with `token`, made from the job's parts (they
  // outlive this). `on_record` (may be null) saves it.
  Recorder(std::string job, int size, const Secret& token, Roster& roster, ProcessSets& sets,
           const Generations& generations, std::function<void(const v1::JobRecord&)> on_record);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  v1::JobRecord Record() const;
  // Saves the record: a node registered, or a job formed anew runs (it takes over the record).
  void Save();
  // Saves the record if a process set was added or removed since it was last made.
  void SaveIfSetsChanged();
  // A restarted coordinator's job made as it was: its node blocks and process sets. Call
  // before anything else happens to the job; INVALID_ARGUMENT if `record` does not fit it.
  absl::Status Restore(const v1::JobRecord& record);

 private:
  // Constant after construction.
  const std::string job_;
  const int size_;
  const std::string token_sha256_;
  Roster& roster_;
  ProcessSets& sets_;
  const Generations& generations_;
  const std::function<void(const v1::JobRecord&)> on_record_;

  // The process sets as last recorded: the next set's id and how many there are.
  int sets_next_id_ = 0;
  int sets_count_ = 0;
};

}  // namespace troika::coordinator
