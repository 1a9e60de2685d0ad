// Agent: an elastic job's next generation (docs/elastic.md, docs/agent.md).

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/agent_service.h"
#include "agent/node_relay.h"
#include "common/logging.h"
#include "common/messages.h"

namespace troika::agent {

std::vector<int> Agent::LiveRanks() const {
  std::vector<int> live;
  for (int rank : current_) {
    if (rank >= 0) live.push_back(rank);
  }
  return live;
}

void Agent::Reform(std::shared_ptr<const coordinator::DownMessage> message) {
  const MembershipChange& change = *message->membership_change;
  std::shared_ptr<NodeRelay> old, next;
  std::vector<int> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < current_.size(); ++i) {
      int& rank = current_[i];
      const int next = rank >= 0 && rank < static_cast<int>(change.next_rank.size())
                           ? change.next_rank[rank]
                           : -1;
      if (rank >= 0 && next < 0) left_.insert(ranks_[i]);
      rank = next;
    }
    live = LiveRanks();
    old = relay_;
    next = relay_ = MakeRelay(change.size, live);
    reforming_ = true;
    session_open_ = false;
    attach_settled_ = live.empty();
    attach_deadline_ = absl::Now() + options_.attach_timeout;
  }
  TROIKA_LOG(WARNING) << "job '" << options_.job << "' goes on as generation " << change.epoch
                      << " of " << change.size << " ranks"
                      << (live.empty() ? std::string(" without this node's ranks")
                                       : absl::StrCat(": this node's are now ", FormatRanks(live)));
  // Ranks attaching again (with their new numbers) wait for the next generation's attach.
  gate_.Reset();
  service_->Reform(change.size, live, std::move(next));
  // The ranks learn of the change: their operations fail with it, and they attach again.
  old->Deliver(std::move(message));
  // The ended generation's session closes; OnClosed then attaches the next one.
  upstream_->CloseSession();
}

}  // namespace troika::agent
