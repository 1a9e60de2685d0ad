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
      buckets_(options.buckets),
      whole_job_(whole_job),
      broadcast_(std::move(broadcast)),
      detector_(options.enabled ? std::make_unique<ScheduleDetector>() : nullptr) {}

void Schedules::OnSending(const std::vector<Response>& responses, absl::Time now) {
  if (!seeking()) return;
  for (const Response& response : responses) detector_->Observe(response, now);
}

void Schedules::MaybePublish() {
  if (!seeking()) return;
  std::optional<std::vector<Response>> period = detector_->Period();
  if (!period) return;
  const size_t negotiated = period->size();
  std::vector<Response> entries = Bucket(*period);
  if (entries.size() < negotiated && !StartsAfterACut(*period) &&
      ++unaligned_publications_ <= kMaxUnalignedPublications) {
    return;  // a later response may end the period where a step ends
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
      .bucketed = schedule.entries.size() < negotiated};
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
  // or a Poll): after kMaxYoungBucketedEnds, this job's schedules keep negotiation's fusion.
  if (active_->bucketed && active_->full_rounds == 0 &&
      ++young_bucketed_ends_ == kMaxYoungBucketedEnds) {
    TROIKA_LOG(WARNING) << "job '" << job_ << "': " << kMaxYoungBucketedEnds
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
  const size_t tensors = schedule.period.size();
  for (size_t n = 0; n < tensors; ++n) {  // the last: with the next round's first
    std::pair<std::string, std::string> pair{schedule.period[n].name,
                                             schedule.period[(n + 1) % tensors].name};
    if (schedule.cut_after.count(static_cast<int>(n)) > 0) {
      joinable_.erase(pair);
      separable_.insert(std::move(pair));
    } else if (separable_.count(pair) == 0) {
      joinable_.insert(std::move(pair));
    }
  }
  if (schedule.bucketed || schedule.revoked) return;
  const size_t collectives = Bucket(schedule.responses).size();
  if (collectives >= schedule.responses.size()) return;
  // Ranks deviate at the next entry none has entered; negotiation then sees the steps repeat
  // again, and the next schedule is published bucketed.
  TROIKA_LOG(INFO) << "job '" << job_ << "': schedule " << schedule.id << " ends: its "
                   << schedule.responses.size() << " responses can run as " << collectives
                   << " collectives";
  Revoke();
}

bool Schedules::StartsAfterACut(const std::vector<Response>& period) const {
  std::vector<const std::string*> names;
  for (const Response& entry : period) {
    for (const std::string& name : entry.names) names.push_back(&name);
  }
  auto separable = [&](size_t n) {
    return separable_.count({*names[n], *names[(n + 1) % names.size()]}) > 0;
  };
  if (separable(names.size() - 1)) return true;
  for (size_t n = 0; n + 1 < names.size(); ++n) {
    if (separable(n)) return false;
  }
  return true;  // no step boundary known: any rotation is as good
}

std::vector<Response> Schedules::Bucket(std::vector<Response> period) const {
  if (!buckets_ || young_bucketed_ends_ >= kMaxYoungBucketedEnds) return period;
  const int64_t limit = whole_job_.options().fusion_threshold_bytes;
  auto joinable = [&](const std::string& a, const std::string& b) {
    return joinable_.count({a, b}) > 0;
  };
  auto all_joinable = [&](const Response& r) {
    for (size_t i = 0; i + 1 < r.names.size(); ++i) {
      if (!joinable(r.names[i], r.names[i + 1])) return false;
    }
    return true;
  };
  auto bytes_of = [&](const Response& r) {
    int64_t bytes = 0;
    for (int32_t id : r.cache_ids) bytes += whole_job_.CachedBytes(id);
    return bytes;
  };
  std::vector<Response> buckets;
  int64_t bytes = 0;
  bool open = false;  // buckets.back() may take more entries
  for (Response& entry : period) {
    const int64_t entry_bytes = bytes_of(entry);
    if (open && Fusible(buckets.back(), entry) && bytes + entry_bytes <= limit &&
        joinable(buckets.back().names.back(), entry.names.front()) && all_joinable(entry)) {
      Response& bucket = buckets.back();
      bucket.names.insert(bucket.names.end(), entry.names.begin(), entry.names.end());
      bucket.cache_ids.insert(bucket.cache_ids.end(), entry.cache_ids.begin(),
                              entry.cache_ids.end());
      bucket.elements.insert(bucket.elements.end(), entry.elements.begin(), entry.elements.end());
      bytes += entry_bytes;
      continue;
    }
    open = all_joinable(entry);
    bytes = entry_bytes;
    buckets.push_back(std::move(entry));
  }
  return buckets;
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
