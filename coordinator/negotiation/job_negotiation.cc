#include "coordinator/negotiation/job_negotiation.h"

#include <optional>
#include <utility>

namespace troika::coordinator {

JobNegotiation::JobNegotiation(std::string job, int size, const NegotiatorOptions& options,
                               ScheduleOptions schedules, Schedules::Broadcast broadcast)
    : sets_(size, options),
      schedules_(std::move(job), size, schedules, sets_.whole_job(), std::move(broadcast)) {
  AddObserver(schedules_);
}

absl::Status JobNegotiation::Submit(std::vector<TensorRequest> requests, absl::Time now,
                                    absl::FunctionRef<absl::Status(int rank)> check,
                                    DownMessage& misses) {
  std::vector<int> ranks;
  for (size_t i = 0; i < requests.size(); ++i) {
    TensorRequest& request = requests[i];
    if (absl::Status s = check(request.rank); !s.ok()) return s;
    if (schedules_.Dropped(request)) continue;
    if (request.process_set == 0 && request.cache_id != 0) {
      // Ranks sending one id in a row (an agent's compacted request) go in together.
      ranks.assign(1, request.rank);
      while (i + 1 < requests.size() && requests[i + 1].cache_id == request.cache_id &&
             requests[i + 1].process_set == 0 && check(requests[i + 1].rank).ok() &&
             !schedules_.Scheduled(requests[i + 1])) {
        ranks.push_back(requests[++i].rank);
      }
      absl::StatusOr<bool> known = sets_.SubmitCached(ranks, request.cache_id, now);
      if (!known.ok()) return known.status();
      if (!*known) {
        for (int rank : ranks) misses.misses.push_back({rank, request.cache_id});
      }
      continue;
    }
    std::optional<Response> rejected;
    if (absl::Status s = sets_.Submit(std::move(request), now, &rejected); !s.ok()) return s;
    // Only the submitting rank has this tensor; the others ignore a failed name they lack.
    if (rejected) misses.responses.push_back(*std::move(rejected));
  }
  return absl::OkStatus();
}

void JobNegotiation::ReportReady(absl::Time now) {
  std::map<int, std::vector<ReadyRecord>> ready = sets_.TakeReadyRecords();
  TellReady(0, ready[0], now);
  for (const auto& [set, records] : ready) {
    if (set != 0) TellReady(set, records, now);
  }
}

std::vector<Response> JobNegotiation::Poll(absl::Time now, const std::set<int>& departed,
                                           absl::Time* next_poll) {
  std::vector<int64_t> allreduce_bytes;
  std::vector<Response> responses = sets_.Poll(now, departed, next_poll, &allreduce_bytes);
  TellAllreduceBytes(allreduce_bytes);
  return responses;
}

void JobNegotiation::Sending(const std::vector<Response>& responses, absl::Time now) {
  for (NegotiationObserver* observer : observers_) observer->OnSending(responses, now);
}

void JobNegotiation::MaybePublishSchedule(absl::FunctionRef<bool()> job_ready) {
  if (!schedules_.seeking() || !sets_.whole_job().idle() || sets_.has_pending() || !job_ready()) {
    return;
  }
  schedules_.MaybePublish();
}

absl::Status JobNegotiation::RecordScheduleProgress(int rank, const ScheduleProgress& progress,
                                                    absl::Time sent_at, absl::Time now,
                                                    bool* waiting) {
  Schedules::Rounds rounds;
  if (absl::Status s = schedules_.Progress(rank, progress, sent_at, &rounds); !s.ok()) return s;
  if (!rounds.records.empty()) {
    TellAllreduceBytes(rounds.entry_bytes);
    TellReady(0, rounds.records, now);
  }
  *waiting = rounds.waiting;
  return absl::OkStatus();
}

void JobNegotiation::RemoveRank(int rank, const std::string& why) {
  schedules_.Leave(rank);
  sets_.RemoveRank(rank, why);
}

std::vector<PendingTensor> JobNegotiation::Pending() const {
  std::vector<PendingTensor> pending = sets_.Pending();
  for (PendingTensor& tensor : schedules_.Pending()) pending.push_back(std::move(tensor));
  return pending;
}

void JobNegotiation::ReserveIdsThrough(int32_t cache_id, int64_t schedule_id) {
  sets_.whole_job().ReserveCacheIdsThrough(cache_id);
  schedules_.ReserveIdsThrough(schedule_id);
}

void JobNegotiation::TellReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) {
  for (NegotiationObserver* observer : observers_) observer->OnReady(set, records, now);
}

void JobNegotiation::TellAllreduceBytes(const std::vector<int64_t>& bytes) {
  const int64_t threshold = options().fusion_threshold_bytes;
  for (NegotiationObserver* observer : observers_) observer->OnAllreduceResponses(bytes, threshold);
}

}  // namespace troika::coordinator
