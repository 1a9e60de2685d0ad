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

Agent::NextGeneration Agent::ApplyChangeLocked(const MembershipChange& change) {
  NextGeneration next;
  next.ranks = table_.Apply(change);
  next.relay = relay_ = MakeRelay(change.size, next.ranks.live);
  return next;
}

void Agent::StartGeneration(const MembershipChange& change, const NextGeneration& next) {
  TROIKA_LOG(WARNING) << "job '" << options_.job << "' goes on as generation " << change.epoch
                      << " of " << change.size << " ranks"
                      << (next.ranks.live.empty() ? std::string(" without this node's ranks")
                                                  : absl::StrCat(": this node's are now ",
                                                                 FormatRanks(next.ranks.live)));
  // Ranks asking from now on are answered with the change; then the ones waiting in the gate
  // are told to ask again, and ranks attaching with their new numbers wait for the next
  // generation's attach.
  service_->Reform(change.size, next.ranks.live, next.relay, change);
  gate_.Reset();
  for (const auto& [rank, exit] : next.ranks.exited) {
    next.relay->ProcessExited(rank, exit.code, exit.signal);
  }
}

void Agent::RestartRanks(const MembershipChange& change, const NextGeneration& next) {
  for (const auto& [local, rank] : next.ranks.restarted) {
    Relaunch(local, rank, change.size, change.epoch);
  }
  for (const auto& [local, join_id] : next.ranks.to_register) RegisterRestart(local, join_id);
}

void Agent::Reform(std::shared_ptr<const DownMessage> message) {
  const MembershipChange& change = *message->membership_change;
  std::shared_ptr<NodeRelay> old;
  NextGeneration next;
  int64_t ended = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!link_.Reform(table_.LiveAfter(change))) {
      // Only a session that carries a generation ends it (kAttaching, kOpen, kResuming): the
      // closing one's late change is the next attach's answer (ReformBeforeSession).
      TROIKA_LOG(WARNING) << "job '" << options_.job << "': a change to generation " << change.epoch
                          << " came while the node's session was "
                          << UpstreamLink::Name(link_.state()) << "; the next attach hears it";
      return;
    }
    old = relay_;
    ended = table_.epoch();
    next = ApplyChangeLocked(change);
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
    if (!table_.GoesOn(*change) || end_.stopping()) return false;
    // Taking the job back from a restarted coordinator ends here too.
    if (!link_.ReformBeforeSession()) return false;
    old = relay_;
    ended = table_.epoch();
    next = ApplyChangeLocked(*change);
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
  AttachGeneration(next.ranks.live, change->epoch);
  RestartRanks(*change, next);
  return true;
}

void Agent::MaybeRestart(int local) {
  std::optional<RankTable::Restart> restart;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.min_np == 0 || end_.stopping()) return;
    // Registered once the job has dropped it (Reform).
    restart = table_.TakeRestart(local, absl::StrCat(options_.host, "/", getpid()));
  }
  if (!restart) return;
  supervisor_->Hold(local);
  TROIKA_LOG(WARNING) << "starting rank " << table_.labels()[local] << " of this node again ("
                      << restart->left << " restarts left): it rejoins the job at its next commit";
}

void Agent::RegisterRestart(int local, const std::string& join_id) {
  upstream_->RegisterNode(
      options_.job, placement_.size, options_.host, 1, -1, absl::InfiniteDuration(),
      [this, local, join_id](absl::StatusOr<NodeBlock> block) {
        bool alone, again;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (!table_.Restarting(local)) return;  // the change admitted it (Reform)
          alone = table_.LiveRanks().empty();
          again = absl::IsUnavailable(block.status()) && !end_.aborted_or_closing();
        }
        const int label = table_.labels()[local];
        if (again) {
          TROIKA_LOG(WARNING) << "rank " << label << " of this node: " << block.status().message()
                              << "; registering again";
          scheduler_->RunAfter(kRegisterAgain,
                               [this, local, join_id] { RegisterRestart(local, join_id); });
          return;
        }
        if (!block.ok()) {
          TROIKA_LOG(WARNING) << "rank " << label
                              << " of this node cannot rejoin: " << block.status().message();
          {
            std::lock_guard<std::mutex> lock(mu_);
            table_.DropRestart(local);
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
  bool attach_now = false;
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!table_.Restarting(local)) return;
    // From kClosed it attaches now; from kLeaving once the ended session closed (OnClosed).
    if (!link_.Rejoin()) {
      refused = UpstreamLink::Name(link_.state());
      table_.DropRestart(local);
    } else {
      attach_now = link_.state() == UpstreamLink::State::kAttaching;
      rejoined = table_.Rejoin(local, block.first_rank, block.admitted, block.epoch);
      live = table_.LiveRanks();
      next = relay_ = MakeRelay(block.size, live);
    }
  }
  if (!refused.empty()) {
    TROIKA_LOG(WARNING) << "rank " << table_.labels()[local]
                        << " of this node cannot rejoin: the node's session is " << refused;
    supervisor_->Release(local);
    return;
  }
  gate_.Reset();
  service_->Reform(block.size, live, std::move(next), std::nullopt);
  for (const auto& [index, rank] : rejoined) Relaunch(index, rank, block.size, block.epoch);
  if (attach_now) AttachGeneration(live, block.epoch);
}

void Agent::AttachGeneration(std::vector<int> live, int64_t epoch, absl::Time retry_until) {
  if (retry_until == absl::InfinitePast()) retry_until = absl::Now() + options_.reconnect_timeout;
  upstream_->Attach(options_.job, live, options_.host, epoch, options_.attach_timeout,
                    [this, live, epoch, retry_until](absl::StatusOr<std::vector<Membership>> m) {
                      bool again;
                      {
                        std::lock_guard<std::mutex> lock(mu_);
                        again = absl::IsUnavailable(m.status()) && !end_.aborted_or_closing() &&
                                absl::Now() + kRegisterAgain < retry_until;
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
  TROIKA_LOG(WARNING) << "rank " << table_.labels()[local] << " of this node starts again as rank "
                      << rank << " of " << size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.ForgetExit(local);
  }
  processes_.running.fetch_add(1);
  supervisor_->Relaunch(local, RankSpec(local, rank, size, epoch));
}

}  // namespace troika::agent
