#include "coordinator/job/recorder.h"

#include <utility>

#include "coordinator/state/job_record.h"

namespace troika::coordinator {

Recorder::Recorder(std::string job, int size, const Secret& token, Roster& roster,
                   ProcessSets& sets, const Generations& generations,
                   std::function<void(const v1::JobRecord&)> on_record)
    : job_(std::move(job)),
      size_(size),
      token_sha256_(token.digest()),
      roster_(roster),
      sets_(sets),
      generations_(generations),
      on_record_(std::move(on_record)),
      sets_next_id_(sets.next_id()),
      sets_count_(sets.count()) {}

v1::JobRecord Recorder::Record() const {
  return JobRecordData{.name = job_,
                       .size = size_,
                       .token_sha256 = token_sha256_,
                       .nodes = roster_.nodes(),
                       .process_sets = sets_.Definitions(),
                       .next_process_set = sets_.next_id(),
                       .min_size = generations_.min_size(),
                       .max_size = generations_.max_size(),
                       .epoch = generations_.epoch(),
                       .generation_cause = generations_.cause()}
      .ToProto();
}

void Recorder::Save() {
  sets_next_id_ = sets_.next_id();
  sets_count_ = sets_.count();
  if (on_record_) on_record_(Record());
}

void Recorder::SaveIfSetsChanged() {
  if (sets_.next_id() != sets_next_id_ || sets_.count() != sets_count_) Save();
}

absl::Status Recorder::Restore(const v1::JobRecord& record) {
  absl::StatusOr<JobRecordData> data = JobRecordData::Restorable(record, job_, size_);
  if (!data.ok()) return data.status();
  roster_.AddNodes(data->nodes);
  sets_.Restore(data->process_sets, data->next_process_set);
  sets_next_id_ = sets_.next_id();
  sets_count_ = sets_.count();
  return absl::OkStatus();
}

}  // namespace troika::coordinator
