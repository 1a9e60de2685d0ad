// Agent: taking the job back from a restarted coordinator (docs/agent.md, docs/protocol.md).

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/node/agent.h"
#include "agent/relay/node_relay.h"
#include "agent/relay/upstream.h"
#include "common/logging.h"

namespace troika::agent {

void Agent::Reconnect() {
  absl::Time deadline;
  bool later_generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_.state() != UpstreamLink::State::kReconnecting) return;
    deadline = link_.reconnect_deadline();
    // An elastic job past its first generation: this node's ranks are no block of the job's
    // first ranks any more; the restarted coordinator knows the generation from its record.
    later_generation = options_.min_np > 0 && table_.epoch() > 1;
  }
  if (later_generation) return ReattachAfterReconnect(deadline);
  const int size = options_.nnodes * options_.nproc_per_node;
  upstream_->RegisterNode(
      options_.job, size, options_.host, options_.nproc_per_node, placement_.node_rank,
      std::max(deadline - absl::Now(), absl::Milliseconds(1)),
      [this, deadline](absl::StatusOr<NodeBlock> block) {
        if (!block.ok()) return ReconnectFailed(block.status());
        if (block->first_rank != table_.labels().front()) {
          return GiveUp(absl::StrCat("lost the coordinator: it gave this node ranks from ",
                                     block->first_rank, " on reconnecting; it had ",
                                     FormatRanks(table_.labels())));
        }
        ReattachAfterReconnect(deadline);
      });
}

void Agent::ReattachAfterReconnect(absl::Time deadline) {
  upstream_->ReplayKvSets(deadline, [this, deadline](const absl::Status& s) {
    if (!s.ok()) return ReconnectFailed(s);
    std::vector<int> live;
    int64_t epoch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live = table_.LiveRanks();
      epoch = table_.epoch();
    }
    upstream_->Attach(options_.job, live, options_.host, epoch,
                      std::max(deadline - absl::Now(), absl::Milliseconds(1)),
                      [this](absl::StatusOr<std::vector<Membership>> memberships) {
                        // The restored generation ended without nodes that did not come back:
                        // the job goes on as the next one.
                        if (ReformBeforeSession(memberships.status())) return;
                        // Another generation in force is ABORTED (the coordinator checks).
                        if (!memberships.ok()) return ReconnectFailed(memberships.status());
                        {
                          std::lock_guard<std::mutex> lock(mu_);
                          // Not if it gave up meanwhile.
                          if (!link_.Reattached()) return;
                        }
                        TROIKA_LOG(WARNING) << "reconnected to the coordinator; resuming job '"
                                            << options_.job << "'";
                        OpenSession(Relay()->ResumeState());
                        Wake();
                      });
  });
}

void Agent::ReconnectFailed(const absl::Status& status) {
  bool retry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_.state() != UpstreamLink::State::kReconnecting) return;
    // Unreachable, not every node back in time, or a call cut by a coordinator stopping: try
    // again while there is time (unless this agent is the one stopping).
    retry = (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
             (absl::IsCancelled(status) && !upstream_->cancelled())) &&
            absl::Now() + absl::Seconds(1) < link_.reconnect_deadline();
  }
  if (!retry) return GiveUp(absl::StrCat("lost the coordinator: ", status.message()));
  TROIKA_LOG(INFO) << "reconnecting: " << status << "; trying again in 1s";
  scheduler_->RunAfter(absl::Seconds(1), [this] { Reconnect(); });
}

}  // namespace troika::agent
