// Job: steady-state schedules (docs/protocol.md, Schedules) — detecting the period, publishing
// it, and the ranks that still execute it.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job.h"

namespace troika::coordinator {

void Job::ObserveForScheduleLocked(const std::vector<Response>& responses) {
  if (!schedule_detector_ || schedule_) return;
  for (const Response& response : responses) schedule_detector_->Observe(response);
}

void Job::MaybePublishScheduleLocked() {
  if (!schedule_detector_ || schedule_ || state_ != State::kRunning || resync_ ||
      !departed_.empty() || !negotiator_.idle() || process_sets_.has_pending()) {
    return;
  }
  // The autotuner changes fusion while it samples: schedule what it settled on.
  const AutotuneInfo tuning = telemetry_.autotune_info();
  if (tuning.enabled && !tuning.done) return;
  for (SessionSink* sink : session_of_rank_) {
    if (sink == nullptr) return;
  }
  std::optional<std::vector<Response>> period = schedule_detector_->Period();
  if (!period) return;
  Schedule schedule{next_schedule_id_++, std::move(*period)};
  // Names travel: a rank needs them before it submits.
  for (Response& entry : schedule.entries) entry.ids_known = false;
  ActiveSchedule active{
      schedule.id, static_cast<int>(schedule.entries.size()), ScheduleTensors(schedule), {}};
  for (int r = 0; r < size_; ++r) active.executing.insert(r);
  TROIKA_LOG(INFO) << "job '" << name_ << "': schedule " << active.id << " of " << active.entries
                   << " responses (" << active.tensors.names.size()
                   << " tensors) runs without negotiation";
  schedule_ = std::move(active);
  auto down = std::make_shared<DownMessage>();
  down->schedule = std::move(schedule);
  BroadcastLocked(std::move(down));
}

bool Job::ScheduledLocked(const TensorRequest& request) const {
  return schedule_ && schedule_->executing.count(request.rank) > 0 &&
         schedule_->tensors.Names(request);
}

void Job::LeaveScheduleLocked(int rank) {
  if (!schedule_ || schedule_->executing.erase(rank) == 0 || !schedule_->executing.empty()) {
    return;
  }
  TROIKA_LOG(INFO) << "job '" << name_ << "': schedule " << schedule_->id << " ended";
  schedule_.reset();
  // A schedule that ended asks the next one to be seen repeating once more (up to 8 times):
  // a job whose steps keep changing settles on negotiation.
  schedule_detector_->Reset(2 + std::min(++schedules_ended_, 6));
}

absl::Status Job::EndSchedule(SessionSink* sink, int64_t id, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r : ranks) {
    if (r < 0 || r >= size_ || session_of_rank_[r] != sink) {
      return absl::PermissionDeniedError(
          absl::StrCat("a session ended a schedule for rank ", r, ", which it does not own"));
    }
  }
  if (!schedule_ || schedule_->id != id) return absl::OkStatus();  // it ended before a restart
  for (int r : ranks) LeaveScheduleLocked(r);
  return absl::OkStatus();
}

}  // namespace troika::coordinator
