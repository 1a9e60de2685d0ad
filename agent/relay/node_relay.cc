#include "agent/relay/node_relay.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/request_check.h"
#include "common/schedule_drops.h"

namespace troika::agent {

using session::SessionSink;

NodeRelay::NodeRelay(NodeRelayOptions options, RelayUpstream& upstream, Scheduler& scheduler,
                     Clock& clock)
    : options_(std::move(options)),
      upstream_(upstream),
      scheduler_(scheduler),
      clock_(clock),
      aggregator_(options_.ranks, options_.aggregation_window),
      ledger_(options_.replay_log_responses) {
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
  if (abort_ != nullptr || suspended_) return;
  for (const auto& [rank, exit] : exits_) upstream_.SendRankExit(exit);
}

void NodeRelay::Follows(std::shared_ptr<const DownMessage> change, int64_t ended_epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  followers_.Follow(std::move(change), ended_epoch);
}

void NodeRelay::Deliver(std::shared_ptr<const DownMessage> message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_ != nullptr) return;  // nothing follows an abort
  // What a restarted coordinator asks of the agent is not for the ranks.
  if (message->replay_to > 0) {
    return upstream_.SendReplay(ledger_.Replay(message->replay_from, message->replay_to));
  }
  if (message->resumed) {
    suspended_ = false;
    return ResendLocked();
  }
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
  ledger_.Received(*message, cache_names_);
  v1::RequestBatch released;  // tensors of a set that now has all its local members
  for (const Response& response : message->responses) {
    TrackProcessSetLocked(response, &released);
  }
  SendBatchLocked(released);
  for (int32_t id : message->evicted_cache_ids) cache_names_.erase(id);
  if (message->settings) settings_ = message->settings;
  if (message->schedule) BeginScheduleLocked(*message->schedule);
  // Each rank picks its own cache misses out of the message.
  for (auto& [sink, ranks] : sessions_) sink->Send(message);
}

void NodeRelay::BeginScheduleLocked(const Schedule& schedule) {
  v1::RequestBatch batch;
  aggregator_.Expire(absl::InfiniteFuture(), &batch);
  SendBatchLocked(batch);
  ArmWindowTimerLocked();
  RelaySchedule active{schedule.id, ScheduleTensors(schedule), {}, {}};
  ledger_.Scheduled(schedule.id, active.tensors.names);
  for (const auto& [rank, state] : ranks_) {
    if (!state.departed && !state.reported) active.executing.insert(rank);
  }
  schedule_ = std::move(active);
}

bool NodeRelay::DroppedForScheduleLocked(const TensorRequest& request) {
  return schedule_ && schedule_->executing.count(request.rank) > 0 &&
         DropsForSchedule(schedule_->tensors, schedule_->dropped, request);
}

absl::Status NodeRelay::EndSchedule(SessionSink* sink, int64_t id, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.contains(sink)) return absl::OkStatus();  // void (Follows)
  for (int rank : ranks) {
    if (absl::Status s = CheckOwnedLocked(sink, rank); !s.ok()) return s;
  }
  if (schedule_ && schedule_->id == id) {
    for (int rank : ranks) schedule_->executing.erase(rank);
    if (schedule_->executing.empty()) schedule_.reset();
  }
  // A restarted coordinator knows no schedule: nothing to tell it.
  if (abort_ == nullptr && !suspended_) upstream_.SendScheduleEnded(id, ranks);
  return absl::OkStatus();
}

absl::Status NodeRelay::DeviateSchedule(SessionSink* sink, int64_t id,
                                        const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.contains(sink)) return absl::OkStatus();  // void (Follows)
  for (int rank : ranks) {
    if (absl::Status s = CheckOwnedLocked(sink, rank); !s.ok()) return s;
  }
  if (abort_ == nullptr && !suspended_) upstream_.SendScheduleDeviated(id, ranks);
  return absl::OkStatus();
}

void NodeRelay::ResendLocked() {
  v1::RequestBatch batch = ledger_.Unanswered();
  TROIKA_LOG(INFO) << "resumed with the coordinator: sending " << batch.requests_size()
                   << " requests again";
  if (batch.requests_size() > 0) upstream_.SendRequests(std::move(batch));
  std::vector<int> departed;
  for (const auto& [rank, state] : ranks_) {
    if (state.departed) departed.push_back(rank);
  }
  if (!departed.empty()) upstream_.SendGoodbye(departed);
  for (const auto& [rank, exit] : exits_) upstream_.SendRankExit(exit);
}

void NodeRelay::Suspend() {
  std::lock_guard<std::mutex> lock(mu_);
  suspended_ = true;
}

SessionResume NodeRelay::ResumeState() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.Resume();
}

void NodeRelay::ProcessExited(int rank, int exit_code, int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;
  RankState& state = it->second;
  state.exited = true;
  if (state.lost_timer != 0) scheduler_.Cancel(state.lost_timer);
  state.lost_timer = 0;
  if (abort_ != nullptr || state.reported) return;
  if (state.departed) {
    // It had left: the coordinator learns that it will not attach again (a job forming
    // anew cannot wait for it), and of a failure after its goodbye.
    SendExitLocked({rank, options_.host, exit_code, signal});
    return;
  }
  RetireLocked(rank);
  if (exit_code == 0 && signal == 0 && state.had_session) {
    // It left without a goodbye (it skipped shutdown): a clean leave. One that never opened
    // a session goes up as an exit report with code 0: the coordinator then fails whatever
    // waits for it to connect.
    TROIKA_LOG(INFO) << "rank " << rank << " exited with code 0 without a goodbye";
    state.departed = true;
    if (!suspended_) upstream_.SendGoodbye({rank});
    return;
  }
  SendExitLocked({rank, options_.host, exit_code, signal});
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

bool NodeRelay::Left(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (int rank : ranks) {
    auto it = ranks_.find(rank);
    if (it == ranks_.end() || !it->second.departed) return false;
  }
  return !ranks.empty();
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
  if (followers_.Open(sink, epoch)) return absl::OkStatus();
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
  // The session was told why: the abort, or the change it follows (void, Follows).
  if (abort_ != nullptr || followers_.contains(sink)) return absl::OkStatus();
  counts_.requests_received += static_cast<int64_t>(requests.size());
  for (TensorRequest& request : requests) {
    if (absl::Status s = CheckOwnedLocked(sink, request.rank); !s.ok()) return s;
    if (absl::Status s = CheckInSetLocked(request); !s.ok()) return s;
  }
  if (schedule_) {
    std::erase_if(requests, [&](const TensorRequest& r) { return DroppedForScheduleLocked(r); });
  }
  for (TensorRequest& request : requests) {
    // Only the aggregation key: an id alone goes upstream.
    if (request.cache_id != 0) request.name = CacheKeyLocked(request.cache_id);
  }
  v1::RequestBatch batch;
  if (absl::Status s = aggregator_.Add(std::move(requests), clock_.Now(), &batch); !s.ok()) {
    return s;
  }
  SendBatchLocked(batch);
  ArmWindowTimerLocked();
  return absl::OkStatus();
}

absl::Status NodeRelay::CheckInSetLocked(const TensorRequest& request) {
  if (request.process_set == 0) {
    if (!request.process_set_ranks.empty() &&
        (absl::StartsWith(request.name, kAddProcessSetPrefix) ||
         absl::StartsWith(request.name, kRemoveProcessSetPrefix))) {
      set_proposals_[request.name] = request.process_set_ranks;
    }
    return CheckRequest(request, options_.size);
  }
  // Within a set the rank is its position there. A set not formed here, or a rank outside
  // it, is the coordinator's to answer (an error for that tensor): only what does not depend
  // on the set's size is checked.
  TensorRequest in_set = request;
  int size = 0;
  if (auto set = sets_.find(request.process_set); set != sets_.end()) {
    auto position = std::find(set->second.begin(), set->second.end(), request.rank);
    if (position != set->second.end()) {
      in_set.rank = static_cast<int>(position - set->second.begin());
      size = static_cast<int>(set->second.size());
    }
  }
  return CheckRequest(in_set, size);
}

void NodeRelay::TrackProcessSetLocked(const Response& response, v1::RequestBatch* batch) {
  if (response.process_set != 0 || response.type != CollectiveType::kBarrier ||
      response.names.size() != 1) {
    return;
  }
  auto proposal = set_proposals_.find(response.names.front());
  if (proposal == set_proposals_.end()) return;
  const std::vector<int> ranks = std::move(proposal->second);
  set_proposals_.erase(proposal);
  if (response.is_error()) return;
  if (absl::StartsWith(response.names.front(), kAddProcessSetPrefix)) {
    sets_[response.root] = ranks;
    aggregator_.SetMembers(response.root, ranks, batch);
  } else {
    sets_.erase(response.root);
    aggregator_.RemoveSet(response.root, batch);
  }
}

absl::Status NodeRelay::Goodbye(SessionSink* sink, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.contains(sink)) return absl::OkStatus();  // void (Follows)
  std::vector<int> leaving;
  for (int rank : ranks) {
    if (absl::Status s = CheckOwnedLocked(sink, rank); !s.ok()) return s;
    if (!ranks_[rank].departed) leaving.push_back(rank);
  }
  for (int rank : leaving) {
    RetireLocked(rank);
    ranks_[rank].departed = true;
    if (schedule_) schedule_->executing.erase(rank);
  }
  if (!leaving.empty() && abort_ == nullptr && !suspended_) upstream_.SendGoodbye(leaving);
  return absl::OkStatus();
}

absl::Status NodeRelay::ReportExit(SessionSink* sink, const RankExit& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.contains(sink)) return absl::OkStatus();  // void (Follows)
  if (absl::Status s = CheckOwnedLocked(sink, exit.rank); !s.ok()) return s;
  RankState& state = ranks_[exit.rank];
  if (abort_ != nullptr || state.departed || state.reported) return absl::OkStatus();
  RetireLocked(exit.rank);
  SendExitLocked(exit);
  return absl::OkStatus();
}

absl::Status NodeRelay::ReportWaitState(SessionSink* sink, const WaitState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.contains(sink)) return absl::OkStatus();  // void (Follows)
  if (absl::Status s = CheckOwnedLocked(sink, state.rank); !s.ok()) return s;
  const RankState& rank = ranks_[state.rank];
  if (abort_ != nullptr || rank.departed || rank.reported || suspended_) return absl::OkStatus();
  upstream_.SendWaitState(state);
  return absl::OkStatus();
}

absl::Status NodeRelay::ReportExec(SessionSink* sink, const ExecReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.contains(sink)) return absl::OkStatus();  // void (Follows)
  if (absl::Status s = CheckOwnedLocked(sink, report.rank); !s.ok()) return s;
  const RankState& rank = ranks_[report.rank];
  if (abort_ != nullptr || rank.departed || rank.reported || suspended_) return absl::OkStatus();
  upstream_.SendExecReport(report);
  return absl::OkStatus();
}

void NodeRelay::CloseSession(SessionSink* sink, const absl::Status& ended) {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.Close(sink)) return;  // owned no rank
  auto it = sessions_.find(sink);
  if (it == sessions_.end()) return;
  for (int rank : it->second) {
    RankState& state = ranks_[rank];
    state.sink = nullptr;
    if (abort_ != nullptr || state.departed || state.exited || state.reported) continue;
    if (!ended.ok()) {
      // This relay ended it for what it sent: the job learns that, not a later "shut down"
      // or "lost its session".
      RetireLocked(rank);
      SendExitLocked({rank, options_.host, -1, 0, std::string(ended.message())});
      continue;
    }
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
  SendExitLocked({rank, options_.host, -1, 0});
}

void NodeRelay::SendExitLocked(const RankExit& exit) {
  ranks_[exit.rank].reported = true;
  exits_[exit.rank] = exit;
  if (!suspended_ && epoch_ >= 0) upstream_.SendRankExit(exit);  // else at Attached
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
  // Kept until a response names the tensor, to be sent again to a restarted coordinator.
  for (const v1::Request& request : batch.requests()) {
    ledger_.Sent(request,
                 {request.process_set(),
                  request.cache_id() != 0 ? CacheKeyLocked(request.cache_id()) : request.name()});
  }
  counts_.requests_forwarded += batch.requests_size();
  if (!suspended_) upstream_.SendRequests(std::move(batch));
}

std::string NodeRelay::CacheKeyLocked(int32_t id) const {
  // An id the relay does not know (it ended meanwhile) gets a key of its own; the coordinator
  // answers it with a miss.
  auto name = cache_names_.find(id);
  return name != cache_names_.end() ? name->second
                                    : absl::StrCat(
                                          "\x01"
                                          "cache-id/",
                                          id);
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
