// Agent: an elastic job's next generation (docs/elastic.md, docs/agent.md).

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/node/agent.h"
#include "agent/relay/node_relay.h"
#include "agent/service/agent_service.h"
#include "common/logging.h"
#include "common/messages.h"
#include "common/wire.h"

namespace troika::agent {

std::vector<int> Agent::LiveRanks() const {
  std::vector<int> live;
  for (int rank : current_) {
    if (rank >= 0) live.push_back(rank);
  }
  return live;
}

Agent::NextGeneration Agent::ApplyChangeLocked(const MembershipChange& change) {
  NextGeneration next;
  for (size_t i = 0; i < current_.size(); ++i) {
    int& rank = current_[i];
    const int next_rank = change.NextRank(rank);
    if (rank >= 0 && next_rank < 0) left_.insert(ranks_[i]);
    rank = next_rank;
  }
  // This node's failed ranks that the change admits again (--max_restarts).
  for (auto it = restarting_.begin(); it != restarting_.end();) {
    auto admitted = std::find_if(change.admitted.begin(), change.admitted.end(),
                                 [&](const auto& a) { return a.join_id == it->second; });
    if (admitted == change.admitted.end()) {
      ++it;
      continue;
    }
    current_[it->first] = admitted->first_rank;
    left_.erase(ranks_[it->first]);
    exited_.erase(it->first);  // it starts again (RestartRanks)
    next.restarted.emplace_back(it->first, admitted->first_rank);
    it = restarting_.erase(it);
  }
  // Failed ranks this change drops: the job has room for them again.
  for (auto it = unregistered_.begin(); it != unregistered_.end();) {
    if (current_[*it] >= 0) {
      ++it;
      continue;
    }
    next.to_register.emplace_back(*it, restarting_[*it]);
    it = unregistered_.erase(it);
  }
  next.live = LiveRanks();
  next.relay = relay_ = MakeRelay(change.size, next.live);
  // Ranks of this node that exited while the ended generation ran and that the change keeps
  // (their exit reached no coordinator: it was queued on the ended generation's relay, or
  // arrived after the change was made): the next generation learns of them too.
  for (const auto& [local, exit] : exited_) {
    if (current_[local] >= 0) next.exited.emplace_back(current_[local], exit);
  }
  epoch_ = change.epoch;
  attach_settled_ = next.live.empty();
  attach_deadline_ = absl::Now() + options_.attach_timeout;
  return next;
}

void Agent::StartGeneration(const MembershipChange& change, const NextGeneration& next) {
  TROIKA_LOG(WARNING) << "job '" << options_.job << "' goes on as generation " << change.epoch
                      << " of " << change.size << " ranks"
                      << (next.live.empty()
                              ? std::string(" without this node's ranks")
                              : absl::StrCat(": this node's are now ", FormatRanks(next.live)));
  // Ranks asking from now on are answered with the change; then the ones waiting in the gate
  // are told to ask again, and ranks attaching with their new numbers wait for the next
  // generation's attach.
  service_->Reform(change.size, next.live, next.relay, change);
  gate_.Reset();
  for (const auto& [rank, exit] : next.exited) {
    next.relay->ProcessExited(rank, exit.code, exit.signal);
  }
}

void Agent::RestartRanks(const MembershipChange& change, const NextGeneration& next) {
  for (const auto& [local, rank] : next.restarted) {
    Relaunch(local, rank, change.size, change.epoch);
  }
  for (const auto& [local, join_id] : next.to_register) RegisterRestart(local, join_id);
}

void Agent::Reform(std::shared_ptr<const DownMessage> message) {
  const MembershipChange& change = *message->membership_change;
  std::shared_ptr<NodeRelay> old;
  NextGeneration next;
  int64_t ended = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = relay_;
    ended = epoch_;
    next = ApplyChangeLocked(change);
    reforming_ = true;
    session_open_ = false;
  }
  next.relay->Follows(message, ended);  // before a rank's session can reach it
  StartGeneration(change, next);
  // The ranks learn of the change: their operations fail with it, and they attach again.
  old->Deliver(std::move(message));
  // The ended generation's session closes; OnClosed then attaches the next one.
  upstream_->CloseSession();
  RestartRanks(change, next);
}

bool Agent::ReformBeforeSession(const absl::Status& changed) {
  const std::optional<MembershipChange> change = MembershipChangeOf(changed);
  if (!change) return false;
  std::shared_ptr<NodeRelay> old;
  NextGeneration next;
  int64_t ended = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool goes_on = std::any_of(current_.begin(), current_.end(),
                                     [&](int rank) { return change->NextRank(rank) >= 0; });
    if (!goes_on || abort_ != nullptr || close_requested_ || !lost_.empty()) return false;
    old = relay_;
    ended = epoch_;
    next = ApplyChangeLocked(*change);
    // Taking the job back from a restarted coordinator ends here too.
    reconnecting_ = false;
    awaiting_resume_ = false;
    session_closed_ = false;
  }
  auto message = std::make_shared<DownMessage>();
  message->abort_reason = std::string(changed.message());
  message->membership_change = *change;
  next.relay->Follows(message, ended);  // before a rank's session can reach it
  StartGeneration(*change, next);
  // No session to close. Ranks still waiting in the gate were answered ABORTED and ask again
  // (AgentService::CreateJob answers them with the change); ranks with a session (the node
  // was taking the job back from a restarted coordinator) learn it as from a session.
  old->Deliver(std::move(message));
  // This node attaches the next generation.
  AttachGeneration(next.live, change->epoch);
  RestartRanks(*change, next);
  return true;
}

void Agent::MaybeRestart(int local) {
  std::string join_id;
  int left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.min_np == 0 || restarts_left_ <= 0 || abort_ != nullptr || !lost_.empty() ||
        close_requested_) {
      return;
    }
    left = --restarts_left_;
    join_id = absl::StrCat(options_.host, "/", getpid(), "/", ranks_[local], "/", left);
    restarting_[local] = join_id;
    unregistered_.insert(local);  // registered once the job has dropped it (Reform)
  }
  supervisor_->Hold(local);
  TROIKA_LOG(WARNING) << "starting rank " << ranks_[local] << " of this node again (" << left
                      << " restarts left): it rejoins the job at its next commit";
}

void Agent::RegisterRestart(int local, const std::string& join_id) {
  upstream_->RegisterNode(
      options_.job, size_, options_.host, 1, -1, absl::InfiniteDuration(),
      [this, local, join_id](absl::StatusOr<NodeBlock> block) {
        bool alone, again;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (!restarting_.count(local)) return;  // the change admitted it (Reform)
          alone = LiveRanks().empty();
          again = absl::IsUnavailable(block.status()) && abort_ == nullptr && !close_requested_;
        }
        if (again) {
          TROIKA_LOG(WARNING) << "rank " << ranks_[local]
                              << " of this node: " << block.status().message()
                              << "; registering again";
          scheduler_->RunAfter(kRegisterAgain,
                               [this, local, join_id] { RegisterRestart(local, join_id); });
          return;
        }
        if (!block.ok()) {
          TROIKA_LOG(WARNING) << "rank " << ranks_[local]
                              << " of this node cannot rejoin: " << block.status().message();
          {
            std::lock_guard<std::mutex> lock(mu_);
            restarting_.erase(local);
          }
          supervisor_->Release(local);
          return;
        }
        // With other ranks the node has a session, on which the change that admitted this
        // one comes (Reform); alone, it has none and joins as a new node would.
        if (alone) Rejoin(local, *block);
      },
      join_id);
}

void Agent::Rejoin(int local, const NodeBlock& block) {
  std::shared_ptr<NodeRelay> next;
  std::vector<std::pair<int, int>> rejoined;  // local index, its rank in block's generation
  std::vector<int> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!restarting_.count(local)) return;
    rejoined.emplace_back(local, block.first_rank);
    for (const auto& [other, join_id] : restarting_) {
      auto admitted = std::find_if(block.admitted.begin(), block.admitted.end(),
                                   [&](const auto& a) { return a.join_id == join_id; });
      if (other != local && admitted != block.admitted.end()) {
        rejoined.emplace_back(other, admitted->first_rank);
      }
    }
    for (const auto& [index, rank] : rejoined) {
      restarting_.erase(index);
      current_[index] = rank;
      left_.erase(ranks_[index]);
    }
    live = LiveRanks();
    next = relay_ = MakeRelay(block.size, live);
    session_open_ = false;
    session_closed_ = false;
    attach_settled_ = false;
    attach_deadline_ = absl::Now() + options_.attach_timeout;
    epoch_ = block.epoch;
  }
  gate_.Reset();
  service_->Reform(block.size, live, std::move(next), std::nullopt);
  for (const auto& [index, rank] : rejoined) Relaunch(index, rank, block.size, block.epoch);
  AttachGeneration(live, block.epoch);
}

void Agent::AttachGeneration(std::vector<int> live, int64_t epoch, absl::Time retry_until) {
  if (retry_until == absl::InfinitePast()) retry_until = absl::Now() + options_.reconnect_timeout;
  upstream_->Attach(options_.job, live, options_.host, epoch, options_.attach_timeout,
                    [this, live, epoch, retry_until](absl::StatusOr<std::vector<Membership>> m) {
                      bool again;
                      {
                        std::lock_guard<std::mutex> lock(mu_);
                        again = absl::IsUnavailable(m.status()) && abort_ == nullptr &&
                                !close_requested_ && absl::Now() + kRegisterAgain < retry_until;
                      }
                      if (!again) return OnAttached(std::move(m));
                      TROIKA_LOG(WARNING)
                          << "attaching generation " << epoch << " of job '" << options_.job
                          << "': " << m.status().message() << "; attaching again";
                      scheduler_->RunAfter(kRegisterAgain, [this, live, epoch, retry_until] {
                        AttachGeneration(live, epoch, retry_until);
                      });
                    });
}

void Agent::Relaunch(int local, int rank, int size, int64_t epoch) {
  TROIKA_LOG(WARNING) << "rank " << ranks_[local] << " of this node starts again as rank " << rank
                      << " of " << size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_.erase(local);
  }
  ranks_running_.fetch_add(1);
  supervisor_->Relaunch(local, RankSpec(local, rank, size, epoch));
}

}  // namespace troika::agent
