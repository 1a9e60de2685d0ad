// Agent: a job that is not elastic formed anew (docs/agent.md, "Shutting down and attaching
// again"): its ranks shut down (goodbye) and call init again in the same processes, as with
// Horovod's Gloo controller. The node's session stays with the incarnation the ranks left
// while they attach again (their goodbyes, and the exits of ranks that will not attach again,
// still go there); each rank is attached upstream to the next incarnation as it asks; once
// every rank of the node is attached there, the next incarnation's relay takes over, the
// ended one's session closes and the next one's opens, and the gate answers the ranks.

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/node/agent.h"
#include "agent/relay/node_relay.h"
#include "agent/service/agent_service.h"
#include "common/logging.h"

namespace troika::agent {

absl::Status Agent::AttachAgain(const std::vector<int>& ranks) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abort_ != nullptr) return absl::AbortedError(abort_->abort_reason);
    if (!lost_.empty()) return absl::UnavailableError(lost_);
    if (!attach_error_.empty()) return absl::FailedPreconditionError(attach_error_);
    if (close_requested_) return absl::CancelledError("the troika-agent is shutting down");
    if (!reformation_) {
      reformation_.emplace();
      reformation_->id = ++reformations_;
      // From now on ranks wait for the next incarnation (lock order: mu_, then the gate's).
      gate_.Reset();
      TROIKA_LOG(INFO) << "job '" << options_.job << "': " << FormatRanks(ranks)
                       << " of this node attach again; the job forms anew once every rank did";
    }
    id = reformation_->id;
    reformation_->asked.insert(ranks.begin(), ranks.end());
  }
  upstream_->Attach(
      options_.job, ranks, options_.host, /*epoch=*/0, options_.attach_timeout,
      [this, id](absl::StatusOr<std::vector<Membership>> m) { OnAttachedAgain(id, std::move(m)); },
      /*again=*/true);
  return absl::OkStatus();
}

void Agent::OnAttachedAgain(uint64_t formation,
                            absl::StatusOr<std::vector<Membership>> memberships) {
  std::vector<Membership> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reformation_ || reformation_->id != formation) return;  // given up already
    if (memberships.ok()) {
      for (const Membership& m : *memberships) reformation_->attached[m.rank] = m;
      // The incarnation runs once every rank attached: the node's others are answered too.
      if (reformation_->attached.size() < ranks_.size()) return;
      for (int rank : ranks_) all.push_back(reformation_->attached[rank]);
    } else if (abort_ == nullptr && lost_.empty() && !close_requested_) {
      attach_error_ = std::string(memberships.status().message());
    }
    reformation_.reset();
  }
  if (!memberships.ok()) {
    TROIKA_LOG(WARNING) << memberships.status();
    gate_.Complete(memberships.status());
    supervisor_->Stop("the node could not attach to the job again");
    Wake();
    return;
  }
  Reincarnate(std::move(all));
}

void Agent::Reincarnate(std::vector<Membership> memberships) {
  std::shared_ptr<NodeRelay> next;
  std::vector<std::pair<int, ExitStatus>> exited;
  const int64_t epoch = memberships.front().epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch_ = epoch;
    next = relay_ = MakeRelay(size_, ranks_);
    for (const auto& [local, exit] : exited_) exited.emplace_back(ranks_[local], exit);
    reincarnating_ = true;
    session_open_ = false;
    next_memberships_ = std::move(memberships);
  }
  TROIKA_LOG(INFO) << "job '" << options_.job << "' formed anew (epoch " << epoch
                   << "): every rank attached again";
  // Sessions of the ranks open on the next incarnation's relay from now on; a rank whose
  // process ended meanwhile is reported there too.
  service_->Reform(size_, ranks_, next, std::nullopt);
  for (const auto& [rank, exit] : exited) next->ProcessExited(rank, exit.code, exit.signal);
  upstream_->ForgetKvSets();  // the ended incarnation's: no use to a restarted coordinator
  // Everything queued for the ended incarnation goes first; OnClosed opens the next one's.
  upstream_->CloseSession();
}

void Agent::OpenNextIncarnation(const absl::Status& closed) {
  std::vector<Membership> memberships;
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reincarnating_ = false;
    memberships = std::move(next_memberships_);
    next_memberships_.clear();
    stopping = abort_ != nullptr || close_requested_ || !lost_.empty();
    if (stopping || !closed.ok()) session_closed_ = true;
  }
  if (!closed.ok()) {
    gate_.Complete(closed);
    GiveUp(absl::StrCat("lost the coordinator while the job formed anew: ", closed.message()));
    return;
  }
  if (stopping) {
    gate_.Complete(absl::CancelledError("the troika-agent is shutting down"));
    Wake();
    return;
  }
  OpenSession(std::nullopt);
  Relay()->Attached(memberships.front().epoch);
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_open_ = true;
    session_closed_ = false;
  }
  gate_.Complete(std::move(memberships));
  Wake();
}

}  // namespace troika::agent
