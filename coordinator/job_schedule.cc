// Job: steady-state schedules (docs/protocol.md, Schedules) — detecting the period, publishing
// it, and the ranks that still execute it.

#include <algorithm>
#include <limits>

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
      .id = schedule.id,
      .entries = static_cast<int>(schedule.entries.size()),
      .tensors = ScheduleTensors(schedule),
      .executing = {},
      .period = {},
      .entry_bytes = {},
      .rounds = {},
      .reported_through = std::vector<int64_t>(size_, -1),
      .waiting = std::vector<std::map<std::pair<int, int64_t>, absl::Time>>(size_)};
  for (int r = 0; r < size_; ++r) active.executing.insert(r);
  for (size_t e = 0; e < schedule.entries.size(); ++e) {
    const Response& entry = schedule.entries[e];
    int64_t& entry_bytes = active.entry_bytes.emplace_back(0);
    for (size_t i = 0; i < entry.names.size(); ++i) {
      const int64_t bytes =
          i < entry.cache_ids.size() ? negotiator_.CachedBytes(entry.cache_ids[i]) : 0;
      active.period.push_back({entry.names[i], static_cast<int>(e), bytes});
      entry_bytes += bytes;
    }
  }
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
  if (!schedule_ || schedule_->executing.erase(rank) == 0) return;
  schedule_->waiting[rank].clear();
  if (!schedule_->executing.empty()) return;
  TROIKA_LOG(INFO) << "job '" << name_ << "': schedule " << schedule_->id << " ended";
  schedule_.reset();
  // A schedule that ended asks the next one to be seen repeating once more (up to 8 times):
  // a job whose steps keep changing settles on negotiation.
  schedule_detector_->Reset(2 + std::min(++schedules_ended_, 6));
}

absl::Status Job::ScheduleProgressLocked(int rank, const ScheduleProgress& progress,
                                         absl::Time sent_at) {
  // A report about a schedule that ended (or of a rank that left it) is history.
  if (!schedule_ || schedule_->id != progress.schedule || !schedule_->executing.count(rank)) {
    return absl::OkStatus();
  }
  ActiveSchedule& schedule = *schedule_;
  const size_t tensors = schedule.period.size();
  const size_t entries = static_cast<size_t>(schedule.entries);
  const size_t rounds = progress.submitted_ago.size() / tensors;
  if (progress.submitted_ago.size() != rounds * tensors ||
      progress.completed_ago.size() != rounds * entries || progress.first_round < 0 ||
      progress.first_round > std::numeric_limits<int64_t>::max() - static_cast<int64_t>(rounds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule ", schedule.id, " has ", tensors, " tensors in ", entries,
                     " entries; progress of ", progress.submitted_ago.size(), " tensors and ",
                     progress.completed_ago.size(), " entries from round ", progress.first_round,
                     " is not whole rounds"));
  }
  for (const ScheduleProgress::Waiting& w : progress.waiting) {
    if (w.tensor < 0 || static_cast<size_t>(w.tensor) >= tensors) {
      return absl::InvalidArgumentError(absl::StrCat("schedule ", schedule.id, " has ", tensors,
                                                     " tensors, not tensor ", w.tensor));
    }
  }
  std::vector<ReadyRecord> records;
  std::vector<int64_t> entry_bytes;
  for (size_t i = 0; i < rounds; ++i) {
    const int64_t number = progress.first_round + static_cast<int64_t>(i);
    if (number <= schedule.reported_through[rank]) continue;  // reported before
    schedule.reported_through[rank] = number;
    ActiveSchedule::Round& round = schedule.rounds[number];
    if (round.waited.empty()) {
      round.waited.resize(size_);
      round.completed.assign(entries, absl::InfiniteFuture());
    }
    const absl::Duration* completed = &progress.completed_ago[i * entries];
    const absl::Duration* submitted = &progress.submitted_ago[i * tensors];
    for (size_t e = 0; e < entries; ++e) {
      round.completed[e] = std::min(round.completed[e], sent_at - completed[e]);
    }
    std::vector<absl::Duration>& waited = round.waited[rank];
    for (size_t n = 0; n < tensors; ++n) {
      const size_t e = static_cast<size_t>(schedule.period[n].entry);
      waited.push_back(std::max(absl::ZeroDuration(), submitted[n] - completed[e]));
    }
    if (++round.reported < size_) continue;
    // Every rank's tensors waited until their entry completed (at about the same moment on
    // every rank): who waited least arrived last. Free of clock differences between ranks.
    for (size_t n = 0; n < tensors; ++n) {
      const ActiveSchedule::Tensor& tensor = schedule.period[n];
      ReadyRecord& record = records.emplace_back();
      record.name = tensor.name;
      record.cached = true;
      record.bytes = tensor.bytes;
      record.ready_at = absl::InfinitePast();
      const absl::Time done = round.completed[static_cast<size_t>(tensor.entry)];
      for (int r = 0; r < size_; ++r) {
        record.arrivals.push_back(done - round.waited[r][n]);
        record.ready_at = std::max(record.ready_at, record.arrivals.back());
      }
    }
    entry_bytes.insert(entry_bytes.end(), schedule.entry_bytes.begin(), schedule.entry_bytes.end());
    schedule.rounds.erase(number);
  }
  // A round below what every rank reported lacks a rank that skipped it (its report was
  // full): it never completes.
  const int64_t through = *std::ranges::min_element(schedule.reported_through);
  schedule.rounds.erase(schedule.rounds.begin(), schedule.rounds.upper_bound(through));

  std::map<std::pair<int, int64_t>, absl::Time> waiting;
  for (const ScheduleProgress::Waiting& w : progress.waiting) {
    const std::pair<int, int64_t> key{w.tensor, w.round};
    auto before = schedule.waiting[rank].find(key);
    // A tensor waiting in report after report keeps its first arrival: the stall inspector
    // reports a tensor once per arrival.
    waiting[key] =
        before != schedule.waiting[rank].end() ? before->second : sent_at - w.submitted_ago;
  }
  schedule.waiting[rank] = std::move(waiting);

  if (!records.empty()) {
    metrics_.OnAllreduceResponses(entry_bytes, negotiator_.options().fusion_threshold_bytes);
    RecordReadyLocked(records);
  }
  if (stall_timer_ == 0 && !schedule.waiting[rank].empty()) {
    const absl::Time next = stall_inspector_.NextCheck(PendingLocked());
    if (next != absl::InfiniteFuture()) ArmStallTimerLocked(next);
  }
  return absl::OkStatus();
}

std::vector<PendingTensor> Job::ScheduledPendingLocked() const {
  std::vector<PendingTensor> pending;
  if (!schedule_) return pending;
  // (tensor, round) -> the earliest arrival and the ranks waiting for it.
  std::map<std::pair<int, int64_t>, std::pair<absl::Time, std::set<int>>> waiting;
  for (int r = 0; r < size_; ++r) {
    for (const auto& [key, since] : schedule_->waiting[r]) {
      auto [it, fresh] = waiting.try_emplace(key, since, std::set<int>{});
      it->second.first = std::min(it->second.first, since);
      it->second.second.insert(r);
    }
  }
  for (const auto& [key, tensor] : waiting) {
    // Every rank is in (or about to enter) its entry: nobody is missing.
    if (static_cast<int>(tensor.second.size()) == size_) continue;
    PendingTensor& p = pending.emplace_back();
    p.name = schedule_->period[static_cast<size_t>(key.first)].name;
    p.first_arrival = tensor.first;
    for (int r = 0; r < size_; ++r) {
      if (!tensor.second.count(r)) p.missing_ranks.push_back(r);
    }
  }
  return pending;
}

absl::Status Job::DeviateSchedule(SessionSink* sink, int64_t id, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r : ranks) {
    if (r < 0 || r >= size_ || session_of_rank_[r] != sink) {
      return absl::PermissionDeniedError(absl::StrCat(
          "a session deviated from a schedule for rank ", r, ", which it does not own"));
    }
  }
  if (!schedule_ || schedule_->id != id || schedule_->revoked) return absl::OkStatus();
  // Ranks waiting for their own next submission (or not submitting at all: shutting down,
  // busy elsewhere) would leave the deviating ranks blocked in their void entry: every rank
  // deviates at once instead. Ranks already in that entry complete it with the void vote.
  schedule_->revoked = true;
  TROIKA_LOG(INFO) << "job '" << name_ << "': " << FormatRanks(ranks) << " deviated from schedule "
                   << id << "; ending it on every rank";
  auto down = std::make_shared<DownMessage>();
  down->end_schedule = id;
  BroadcastLocked(std::move(down));
  return absl::OkStatus();
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
