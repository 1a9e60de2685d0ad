#include "coordinator/negotiation/schedules.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/schedule_drops.h"

namespace troika::coordinator {

Schedules::Schedules(std::string job, int size, ScheduleOptions options,
                     const Negotiator& whole_job, Broadcast broadcast)
    : job_(std::move(job)),
      size_(size),
      whole_job_(whole_job),
      broadcast_(std::move(broadcast)),
      detector_(options.enabled ? std::make_unique<ScheduleDetector>() : nullptr),
      bucketing_(options.buckets, whole_job) {}

void Schedules::OnSending(const std::vector<Response>& responses, absl::Time now) {
  if (!seeking()) return;
  for (const Response& response : responses) detector_->Observe(response, now);
}

void Schedules::MaybePublish() {
  if (!seeking()) return;
  std::optional<std::vector<Response>> period = detector_->Period();
  if (!period) return;
  const size_t negotiated = period->size();
  std::vector<Response> entries = bucketing_.Bucket(*period);
  // The detector's period starts wherever the latest response left it, and a bucket cannot
  // cross its end: a rotation that ends inside a bucket would settle the job on more
  // collectives than the reports require, because of when negotiation happened to be idle.
  const size_t fewest = bucketing_.Fewest(*period);
  if (entries.size() > fewest && ++unaligned_publications_ <= kMaxUnalignedPublications) {
    return;  // the period moves by a response with each response
  }
  unaligned_publications_ = 0;
  Schedule schedule{next_id_++, std::move(entries)};
  ++published_;
  // Names travel: a rank needs them before it submits.
  for (Response& entry : schedule.entries) entry.ids_known = false;
  ActiveSchedule active{
      .id = schedule.id,
      .tensors = ScheduleTensors(schedule),
      .executing = {},
      .dropped = {},
      .period = {},
      .entry_bytes = {},
      .rounds = {},
      .reported_through = std::vector<int64_t>(size_, -1),
      .waiting = std::vector<std::map<std::pair<int, int64_t>, absl::Time>>(size_),
      .responses = schedule.entries,
      .cut_after = {},
      .full_rounds = 0,
      .learned = false,
      .bucketed = schedule.entries.size() < negotiated,
      .fewest = fewest};
  for (int r = 0; r < size_; ++r) active.executing.insert(r);
  for (size_t e = 0; e < schedule.entries.size(); ++e) {
    const Response& entry = schedule.entries[e];
    int64_t& entry_bytes = active.entry_bytes.emplace_back(0);
    for (size_t i = 0; i < entry.names.size(); ++i) {
      const int64_t bytes =
          i < entry.cache_ids.size() ? whole_job_.CachedBytes(entry.cache_ids[i]) : 0;
      active.period.push_back({entry.names[i], static_cast<int>(e), bytes});
      entry_bytes += bytes;
    }
  }
  TROIKA_LOG(INFO) << "job '" << job_ << "': schedule " << active.id << " of "
                   << active.responses.size() << " responses (" << active.tensors.names.size()
                   << " tensors) runs without negotiation"
                   << (active.bucketed
                           ? absl::StrCat(" (fused from ", negotiated, " negotiated responses)")
                           : "");
  active_ = std::move(active);
  auto down = std::make_shared<DownMessage>();
  down->schedule = std::move(schedule);
  broadcast_(std::move(down));
}

bool Schedules::Scheduled(const TensorRequest& request) const {
  return active_ && active_->executing.count(request.rank) > 0 && active_->tensors.Names(request);
}

bool Schedules::Dropped(const TensorRequest& request) {
  return active_ && active_->executing.count(request.rank) > 0 &&
         DropsForSchedule(active_->tensors, active_->dropped, request);
}

void Schedules::Leave(int rank) {
  if (!active_ || active_->executing.erase(rank) == 0) return;
  active_->waiting[rank].clear();
  if (!active_->executing.empty()) return;
  TROIKA_LOG(INFO) << "job '" << job_ << "': schedule " << active_->id << " ended";
  // A bucketed schedule that ended before every rank completed one round of it most likely
  // fused a tensor with one it depends on through something the ranks cannot see (not a Wait
  // or a Poll): after Bucketing::kMaxYoungEnds, this job's schedules keep negotiation's fusion.
  if (active_->bucketed && active_->full_rounds == 0 && bucketing_.EndedYoung()) {
    TROIKA_LOG(WARNING) << "job '" << job_ << "': " << Bucketing::kMaxYoungEnds
                        << " fused schedules ended in their first "
                        << "step; schedules keep negotiation's fusion from now on";
  }
  active_.reset();
  // A schedule that ended asks the next one to be seen repeating once more (up to 8 times):
  // a job whose steps keep changing settles on negotiation.
  detector_->Reset(2 + std::min(++ended_, 6));
}

void Schedules::End(int64_t id, const std::vector<int>& ranks) {
  if (!active_ || active_->id != id) return;  // it ended before a restart
  for (int r : ranks) Leave(r);
}

void Schedules::Deviate(int64_t id, const std::vector<int>& ranks) {
  if (!active_ || active_->id != id || active_->revoked) return;
  // Ranks waiting for their own next submission (or not submitting at all: shutting down,
  // busy elsewhere) would leave the deviating ranks blocked in their void entry: every rank
  // deviates at once instead. Ranks already in that entry complete it with the void vote.
  TROIKA_LOG(INFO) << "job '" << job_ << "': " << FormatRanks(ranks) << " deviated from schedule "
                   << id << "; ending it on every rank";
  Revoke();
}

absl::Status Schedules::CheckProgress(const ActiveSchedule& schedule,
                                      const ScheduleProgress& progress) {
  const size_t tensors = schedule.period.size();
  const size_t entries = schedule.responses.size();
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
  for (int32_t n : progress.cut_after) {
    if (n < 0 || static_cast<size_t>(n) >= tensors) {
      return absl::InvalidArgumentError(absl::StrCat("schedule ", schedule.id, " has ", tensors,
                                                     " tensors: no tensor after ", n));
    }
  }
  return absl::OkStatus();
}

absl::Status Schedules::Progress(int rank, const ScheduleProgress& progress, absl::Time sent_at,
                                 Rounds* rounds) {
  // A report about a schedule that ended (or of a rank that left it) is history.
  if (!active_ || active_->id != progress.schedule || !active_->executing.count(rank)) {
    return absl::OkStatus();
  }
  ActiveSchedule& schedule = *active_;
  if (absl::Status s = CheckProgress(schedule, progress); !s.ok()) return s;
  schedule.cut_after.insert(progress.cut_after.begin(), progress.cut_after.end());
  RecordRounds(rank, progress, sent_at, rounds);

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

  if (!schedule.learned && schedule.full_rounds >= kLearnRounds) Learn();
  // Learn may have revoked the schedule, never ended it: it is still active_.
  rounds->waiting = !active_->waiting[rank].empty();
  return absl::OkStatus();
}

void Schedules::RecordRounds(int rank, const ScheduleProgress& progress, absl::Time sent_at,
                             Rounds* rounds) {
  ActiveSchedule& schedule = *active_;
  const size_t tensors = schedule.period.size();
  const size_t entries = schedule.responses.size();
  const size_t reported = progress.submitted_ago.size() / tensors;
  for (size_t i = 0; i < reported; ++i) {
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
    ++schedule.full_rounds;
    CompleteRound(round, rounds);
    schedule.rounds.erase(number);
  }
  // A round below what every rank reported lacks a rank that skipped it (its report was
  // full): it never completes.
  const int64_t through = *std::ranges::min_element(schedule.reported_through);
  schedule.rounds.erase(schedule.rounds.begin(), schedule.rounds.upper_bound(through));
}

void Schedules::CompleteRound(const ActiveSchedule::Round& round, Rounds* rounds) const {
  const ActiveSchedule& schedule = *active_;
  // Every rank's tensors waited until their entry completed (at about the same moment on
  // every rank): who waited least arrived last. Free of clock differences between ranks.
  for (size_t n = 0; n < schedule.period.size(); ++n) {
    const ActiveSchedule::Tensor& tensor = schedule.period[n];
    ReadyRecord& record = rounds->records.emplace_back();
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
  rounds->entry_bytes.insert(rounds->entry_bytes.end(), schedule.entry_bytes.begin(),
                             schedule.entry_bytes.end());
}

void Schedules::Revoke() {
  active_->revoked = true;
  auto down = std::make_shared<DownMessage>();
  down->end_schedule = active_->id;
  broadcast_(std::move(down));
}

void Schedules::Learn() {
  ActiveSchedule& schedule = *active_;
  schedule.learned = true;
  std::vector<std::string> names;
  for (const ActiveSchedule::Tensor& tensor : schedule.period) names.push_back(tensor.name);
  bucketing_.Learn(names, schedule.cut_after);
  if (schedule.revoked) return;
  // Bucketed or not, a schedule gives way when its reports permit fewer collectives than were
  // possible when it was published: it was built from one step's negotiation and what the job
  // knew then. It never gives way for its rotation alone (MaybePublish put that off as long
  // as it would), so each revoke needs a pair newly joinable, and a job settles.
  const size_t collectives = bucketing_.Fewest(schedule.responses);
  if (collectives >= schedule.fewest) return;
  // Ranks deviate at the next entry none has entered; negotiation then sees the steps repeat
  // again, and the next schedule is published bucketed.
  TROIKA_LOG(INFO) << "job '" << job_ << "': schedule " << schedule.id << " ends: its "
                   << schedule.responses.size() << " responses can run as " << collectives
                   << " collectives";
  Revoke();
}

std::vector<PendingTensor> Schedules::Pending() const {
  std::vector<PendingTensor> pending;
  if (!active_) return pending;
  // (tensor, round) -> the earliest arrival and the ranks waiting for it.
  std::map<std::pair<int, int64_t>, std::pair<absl::Time, std::set<int>>> waiting;
  for (int r = 0; r < size_; ++r) {
    for (const auto& [key, since] : active_->waiting[r]) {
      auto [it, fresh] = waiting.try_emplace(key, since, std::set<int>{});
      it->second.first = std::min(it->second.first, since);
      it->second.second.insert(r);
    }
  }
  for (const auto& [key, tensor] : waiting) {
    // Every rank is in (or about to enter) its entry: nobody is missing.
    if (static_cast<int>(tensor.second.size()) == size_) continue;
    PendingTensor& p = pending.emplace_back();
    p.name = active_->period[static_cast<size_t>(key.first)].name;
    p.first_arrival = tensor.first;
    for (int r = 0; r < size_; ++r) {
      if (!tensor.second.count(r)) p.missing_ranks.push_back(r);
    }
  }
  return pending;
}

ScheduleInfo Schedules::Info() const {
  ScheduleInfo info;
  info.enabled = detector_ != nullptr;
  info.published = published_;
  info.ended = ended_;
  if (active_) {
    info.active = active_->id;
    info.entries = static_cast<int>(active_->responses.size());
    info.tensors = static_cast<int>(active_->tensors.names.size());
    info.executing_ranks = static_cast<int>(active_->executing.size());
  }
  return info;
}

}  // namespace troika::coordinator
