#include "agent/node_relay.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/request_check.h"

namespace troika::agent {

using coordinator::DownMessage;
using coordinator::SessionSink;

NodeRelay::NodeRelay(NodeRelayOptions options, RelayUpstream& upstream, Scheduler& scheduler,
                     Clock& clock)
    : options_(std::move(options)),
      upstream_(upstream),
      scheduler_(scheduler),
      clock_(clock),
      aggregator_(options_.ranks, options_.aggregation_window) {
  for (int rank : options_.ranks) ranks_[rank] = RankState{};
}

NodeRelay::~NodeRelay() {
  std::lock_guard<std::mutex> lock(mu_);
  if (window_timer_ != 0) scheduler_.Cancel(window_timer_);
  for (auto& [rank, state] : ranks_) {
    if (state.lost_timer != 0) scheduler_.Cancel(state.lost_timer);
  }
}

void NodeRelay::Attached(int64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = epoch;
}

void NodeRelay::Deliver(std::shared_ptr<const DownMessage> message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_ != nullptr) return;  // nothing follows an abort
  if (!message->abort_reason.empty()) {
    abort_ = message;
    for (auto& [rank, state] : ranks_) {
      if (state.lost_timer != 0) scheduler_.Cancel(state.lost_timer);
      state.lost_timer = 0;
    }
  }
  counts_.responses_relayed += static_cast<int64_t>(message->responses.size());
  for (const Response& response : message->responses) {
    if (response.ids_known) continue;
    for (size_t i = 0; i < response.cache_ids.size() && i < response.names.size(); ++i) {
      cache_names_[response.cache_ids[i]] = response.names[i];
    }
  }
  for (int32_t id : message->evicted_cache_ids) cache_names_.erase(id);
  if (message->settings) settings_ = message->settings;
  // Each rank picks its own cache misses out of the message.
  for (auto& [sink, ranks] : sessions_) sink->Send(message);
}

void NodeRelay::ProcessExited(int rank, int exit_code, int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;
  RankState& state = it->second;
  state.exited = true;
  if (state.lost_timer != 0) scheduler_.Cancel(state.lost_timer);
  state.lost_timer = 0;
  if (abort_ != nullptr || state.departed || state.reported) return;
  RetireLocked(rank);
  if (exit_code == 0 && signal == 0) {
    // It left without a goodbye (it never used Troika, or skipped shutdown): a clean leave.
    TROIKA_LOG(INFO) << "rank " << rank << " exited with code 0 without a goodbye";
    state.departed = true;
    upstream_.SendGoodbye({rank});
    return;
  }
  state.reported = true;
  upstream_.SendRankExit({rank, options_.host, exit_code, signal});
}

void NodeRelay::FlushExpired() {
  std::lock_guard<std::mutex> lock(mu_);
  window_timer_ = 0;
  window_due_ = absl::InfiniteFuture();
  v1::RequestBatch batch;
  aggregator_.Expire(clock_.Now(), &batch);
  SendBatchLocked(batch);
  ArmWindowTimerLocked();
}

bool NodeRelay::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_ != nullptr;
}

RelayCounts NodeRelay::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

int NodeRelay::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aggregator_.waiting();
}

absl::Status NodeRelay::OpenSession(const std::vector<int>& ranks, int64_t epoch,
                                    SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("job '", options_.job, "' is not attached on this node yet"));
  }
  if (epoch != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat("job '", options_.job, "' is at epoch ",
                                                      epoch_, ", the session asked for ", epoch));
  }
  if (ranks.empty()) return absl::InvalidArgumentError("a session needs at least one rank");
  for (int rank : ranks) {
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) {
      return absl::PermissionDeniedError(absl::StrCat("rank ", rank, " does not run on this node"));
    }
    const RankState& state = it->second;
    if (state.sink != nullptr || state.had_session || state.departed || state.exited) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " already had a session"));
    }
  }
  for (int rank : ranks) {
    ranks_[rank].sink = sink;
    ranks_[rank].had_session = true;
  }
  sessions_[sink] = ranks;
  if (abort_ != nullptr) {
    sink->Send(abort_);
  } else if (settings_) {
    auto settings = std::make_shared<DownMessage>();
    settings->settings = settings_;
    sink->Send(std::move(settings));
  }
  return absl::OkStatus();
}

absl::Status NodeRelay::CheckOwnedLocked(SessionSink* sink, int rank) const {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || it->second.sink != sink) {
    return absl::PermissionDeniedError(
        absl::StrCat("a session submitted for rank ", rank, ", which it does not own"));
  }
  return absl::OkStatus();
}

absl::Status NodeRelay::Submit(SessionSink* sink, std::vector<TensorRequest> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_ != nullptr) return absl::OkStatus();  // the session was told why
  counts_.requests_received += static_cast<int64_t>(requests.size());
  for (TensorRequest& request : requests) {
    if (absl::Status s = CheckOwnedLocked(sink, request.rank); !s.ok()) return s;
    if (absl::Status s = CheckRequest(request, options_.size); !s.ok()) return s;
    if (request.cache_id != 0) {
      // Only the aggregation key: an id alone goes upstream. An id the relay does not know
      // (it ended meanwhile) gets a key of its own; the coordinator answers with a miss.
      auto name = cache_names_.find(request.cache_id);
      request.name = name != cache_names_.end() ? name->second
                                                : absl::StrCat(
                                                      "\x01"
                                                      "cache-id/",
                                                      request.cache_id);
    }
  }
  v1::RequestBatch batch;
  if (absl::Status s = aggregator_.Add(std::move(requests), clock_.Now(), &batch); !s.ok()) {
    return s;
  }
  SendBatchLocked(batch);
  ArmWindowTimerLocked();
  return absl::OkStatus();
}

absl::Status NodeRelay::Goodbye(SessionSink* sink, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> leaving;
  for (int rank : ranks) {
    if (absl::Status s = CheckOwnedLocked(sink, rank); !s.ok()) return s;
    if (!ranks_[rank].departed) leaving.push_back(rank);
  }
  for (int rank : leaving) {
    RetireLocked(rank);
    ranks_[rank].departed = true;
  }
  if (!leaving.empty() && abort_ == nullptr) upstream_.SendGoodbye(leaving);
  return absl::OkStatus();
}

absl::Status NodeRelay::ReportExit(SessionSink* sink, const RankExit& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckOwnedLocked(sink, exit.rank); !s.ok()) return s;
  RankState& state = ranks_[exit.rank];
  if (abort_ != nullptr || state.departed || state.reported) return absl::OkStatus();
  RetireLocked(exit.rank);
  state.reported = true;
  upstream_.SendRankExit(exit);
  return absl::OkStatus();
}

absl::Status NodeRelay::ReportWaitState(SessionSink* sink, const WaitState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckOwnedLocked(sink, state.rank); !s.ok()) return s;
  const RankState& rank = ranks_[state.rank];
  if (abort_ != nullptr || rank.departed || rank.reported) return absl::OkStatus();
  upstream_.SendWaitState(state);
  return absl::OkStatus();
}

absl::Status NodeRelay::ReportExec(SessionSink* sink, const ExecReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckOwnedLocked(sink, report.rank); !s.ok()) return s;
  const RankState& rank = ranks_[report.rank];
  if (abort_ != nullptr || rank.departed || rank.reported) return absl::OkStatus();
  upstream_.SendExecReport(report);
  return absl::OkStatus();
}

void NodeRelay::CloseSession(SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(sink);
  if (it == sessions_.end()) return;
  for (int rank : it->second) {
    RankState& state = ranks_[rank];
    state.sink = nullptr;
    if (abort_ != nullptr || state.departed || state.exited || state.reported) continue;
    // Its process is probably dying: its exit report names the cause better than we can.
    std::weak_ptr<NodeRelay> weak = weak_from_this();
    state.lost_timer = scheduler_.RunAfter(options_.lost_session_grace, [weak, rank] {
      if (auto relay = weak.lock()) relay->ReportLost(rank);
    });
  }
  sessions_.erase(it);
}

void NodeRelay::ReportLost(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  RankState& state = ranks_[rank];
  state.lost_timer = 0;
  if (abort_ != nullptr || state.departed || state.exited || state.reported) return;
  TROIKA_LOG(WARNING) << "rank " << rank << " lost its session without a goodbye, and its "
                      << "process did not exit within "
                      << absl::FormatDuration(options_.lost_session_grace);
  RetireLocked(rank);
  state.reported = true;
  upstream_.SendRankExit({rank, options_.host, -1, 0});
}

void NodeRelay::RetireLocked(int rank) {
  v1::RequestBatch batch;
  aggregator_.RemoveRank(rank, &batch);
  SendBatchLocked(batch);
  ArmWindowTimerLocked();
}

void NodeRelay::SendBatchLocked(v1::RequestBatch& batch) {
  if (batch.requests_size() == 0 || abort_ != nullptr) return;
  if (MinLogSeverity() <= LogSeverity::kDebug) {
    int standing_for = 0;
    for (const v1::Request& r : batch.requests()) standing_for += std::max(1, r.ranks_size());
    TROIKA_LOG(DEBUG) << "upstream: " << batch.requests_size() << " requests for " << standing_for
                      << " rank requests";
  }
  counts_.requests_forwarded += batch.requests_size();
  upstream_.SendRequests(std::move(batch));
}

void NodeRelay::ArmWindowTimerLocked() {
  const absl::Time due = aggregator_.NextDeadline();
  if (due == absl::InfiniteFuture() || (window_timer_ != 0 && window_due_ <= due)) return;
  if (window_timer_ != 0) scheduler_.Cancel(window_timer_);
  window_due_ = due;
  std::weak_ptr<NodeRelay> weak = weak_from_this();
  // The scheduler runs on real time and the clock may be a fake one in tests (which then
  // call FlushExpired by hand), so only the offset from now matters.
  window_timer_ = scheduler_.RunAfter(due - clock_.Now(), [weak] {
    if (auto relay = weak.lock()) relay->FlushExpired();
  });
}

}  // namespace troika::agent
