#include "coordinator/job/sessions.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {

Sessions::Sessions(std::string job, int size, ClientSettings settings)
    : job_(std::move(job)), of_rank_(size, nullptr), settings_(settings) {}

absl::Status Sessions::CanOpen() const {
  if (resync_ || resumed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", job_, "' is resuming after a coordinator restart; a new session cannot join it"));
  }
  return absl::OkStatus();
}

absl::Status Sessions::CanResume(const SessionResume& resume) const {
  if (fresh_ || resumed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_, "' cannot resume a session: ",
                     fresh_ ? "its sessions are new (the coordinator did not restart under it)"
                            : "it has resumed already"));
  }
  if (resume.received < 0) return absl::InvalidArgumentError("resume: negative received");
  return absl::OkStatus();
}

absl::Status Sessions::Bind(const std::vector<int>& ranks, session::SessionSink* sink,
                            const std::set<int>& departed) {
  if (ranks.empty()) return absl::InvalidArgumentError("a session needs at least one rank");
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(of_rank_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("bad rank ", r));
    }
    if (of_rank_[r] != nullptr || departed.count(r)) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", r, " already has a session"));
    }
  }
  for (int r : ranks) of_rank_[r] = sink;
  ranks_[sink] = ranks;
  if (!(settings_ == ClientSettings{})) {
    auto down = std::make_shared<DownMessage>();
    down->settings = settings_;
    sink->Send(std::move(down));
  }
  return absl::OkStatus();
}

absl::Status Sessions::Open(const std::vector<int>& ranks, session::SessionSink* sink,
                            const std::set<int>& departed) {
  if (absl::Status s = Bind(ranks, sink, departed); !s.ok()) return s;
  fresh_ = true;
  return absl::OkStatus();
}

absl::Status Sessions::Resume(const std::vector<int>& ranks, const SessionResume& resume,
                              session::SessionSink* sink, const std::set<int>& departed) {
  if (absl::Status s = Bind(ranks, sink, departed); !s.ok()) return s;
  if (!resync_) resync_.emplace();
  resync_->received[sink] = resume.received;
  resync_->max_cache_id = std::max(resync_->max_cache_id, resume.max_cache_id);
  resync_->max_schedule_id = std::max(resync_->max_schedule_id, resume.max_schedule_id);
  return absl::OkStatus();
}

std::optional<Sessions::Resumed> Sessions::Resync() {
  if (!resync_ || resync_->leader != nullptr || !all_connected()) return std::nullopt;
  int64_t from = std::numeric_limits<int64_t>::max(), to = 0;
  for (const auto& [sink, received] : resync_->received) {
    from = std::min(from, received + 1);
    if (received > to) {
      to = received;
      resync_->leader = sink;
    }
  }
  if (from > to) return Finish(to);
  // Some sessions received responses others did not: the most advanced one sends them up.
  resync_->from = from;
  resync_->to = to;
  TROIKA_LOG(INFO) << "job '" << job_ << "': asking for responses " << from << " to " << to
                   << " to resume every session";
  auto ask = std::make_shared<DownMessage>();
  ask->replay_from = from;
  ask->replay_to = to;
  resync_->leader->Send(std::move(ask));
  return std::nullopt;
}

bool Sessions::AwaitsReplay(session::SessionSink* sink) const {
  return resync_ && resync_->leader == sink;
}

absl::StatusOr<Sessions::Resumed> Sessions::Replay(int64_t first_seq,
                                                   const std::vector<Response>& responses) {
  const int64_t from = resync_->from, to = resync_->to;
  if (first_seq != from || static_cast<int64_t>(responses.size()) != to - from + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume after a coordinator restart: responses ", from, " to ", to,
                     " are no longer held by the agent that received them"));
  }
  for (const auto& [sink, received] : resync_->received) {
    if (received >= to) continue;
    auto down = std::make_shared<DownMessage>();
    down->responses.assign(responses.begin() + (received + 1 - from), responses.end());
    down->seq = received + 1;
    sink->Send(std::move(down));
  }
  return Finish(to);
}

Sessions::Resumed Sessions::Finish(int64_t through) {
  const Resumed resumed{through, resync_->max_cache_id, resync_->max_schedule_id};
  next_seq_ = through + 1;
  resync_.reset();
  resumed_ = true;
  TROIKA_LOG(INFO) << "job '" << job_ << "' resumed after a coordinator restart (" << through
                   << " responses before it)";
  auto down = std::make_shared<DownMessage>();
  down->resumed = true;
  Broadcast(std::move(down));
  return resumed;
}

std::vector<int> Sessions::Close(session::SessionSink* sink) {
  followers_.Close(sink);
  auto it = ranks_.find(sink);
  if (it == ranks_.end()) return {};
  std::vector<int> ranks = std::move(it->second);
  ranks_.erase(it);
  for (int r : ranks) of_rank_[r] = nullptr;
  return ranks;
}

bool Sessions::Owns(session::SessionSink* sink, int rank) const {
  return rank >= 0 && rank < static_cast<int>(of_rank_.size()) && of_rank_[rank] == sink;
}

absl::Status Sessions::CheckOwns(session::SessionSink* sink, const std::vector<int>& ranks,
                                 const char* what) const {
  for (int rank : ranks) {
    if (!Owns(sink, rank)) {
      return absl::PermissionDeniedError(
          absl::StrCat("a session sent ", what, " for rank ", rank, ", which it does not own"));
    }
  }
  return absl::OkStatus();
}

bool Sessions::all_connected() const {
  return std::none_of(of_rank_.begin(), of_rank_.end(),
                      [](session::SessionSink* sink) { return sink == nullptr; });
}

void Sessions::Broadcast(std::shared_ptr<const DownMessage> message) const {
  for (const auto& [sink, ranks] : ranks_) sink->Send(message);
}

void Sessions::BroadcastResponses(std::shared_ptr<DownMessage> message) {
  message->seq = next_seq_;
  next_seq_ += static_cast<int64_t>(message->responses.size());
  Broadcast(std::move(message));
}

void Sessions::EndAll(const absl::Status& status) const {
  for (const auto& [sink, ranks] : ranks_) sink->End(status);
}

void Sessions::UpdateSettings(const ClientSettings& settings) {
  if (settings == settings_) return;
  settings_ = settings;
  auto down = std::make_shared<DownMessage>();
  down->settings = settings;
  Broadcast(std::move(down));
}

}  // namespace troika::coordinator
