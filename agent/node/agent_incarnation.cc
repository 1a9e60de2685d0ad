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
  Reformation::Ask ask;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status refusal = end_.Refusal(); !refusal.ok()) return refusal;
    ask = reformation_.Asked();
    if (ask.began) {
      // From now on ranks wait for the next incarnation (lock order: mu_, then the gate's).
      gate_.Reset();
      TROIKA_LOG(INFO) << "job '" << options_.job << "': " << FormatRanks(ranks)
                       << " of this node attach again; the job forms anew once every rank did";
    }
  }
  upstream_->Attach(
      options_.job, ranks, options_.host, /*epoch=*/0, options_.attach_timeout,
      [this, id = ask.id](absl::StatusOr<std::vector<Membership>> m) {
        OnAttachedAgain(id, std::move(m));
      },
      /*again=*/true);
  return absl::OkStatus();
}

void Agent::OnAttachedAgain(uint64_t formation,
                            absl::StatusOr<std::vector<Membership>> memberships) {
  std::vector<Membership> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The incarnation runs once every rank attached: the node's others are answered too.
    switch (reformation_.Answered(formation, memberships, &all)) {
      case Reformation::Outcome::kStale:  // given up already
      case Reformation::Outcome::kWaiting:
        return;
      case Reformation::Outcome::kFailed:
        if (!end_.stopping()) end_.AttachRefused(std::string(memberships.status().message()));
        break;
      case Reformation::Outcome::kComplete:
        break;
    }
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
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!link_.Reincarnate()) {
      refused = UpstreamLink::Name(link_.state());
    } else {
      table_.set_epoch(epoch);
      next = relay_ = MakeRelay(placement_.size, table_.labels());
      exited = table_.ExitsByLabel();
      reformation_.Hold(std::move(memberships));
    }
  }
  if (!refused.empty()) {
    // The session that was to carry the ended incarnation's last words is gone.
    const std::string why = absl::StrCat(
        "the job cannot form anew: the node's session with the coordinator is ", refused);
    gate_.Complete(absl::UnavailableError(why));
    supervisor_->Stop(why);
    Wake();
    return;
  }
  TROIKA_LOG(INFO) << "job '" << options_.job << "' formed anew (epoch " << epoch
                   << "): every rank attached again";
  // Sessions of the ranks open on the next incarnation's relay from now on; a rank whose
  // process ended meanwhile is reported there too.
  service_->Reform(placement_.size, table_.labels(), next, std::nullopt);
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
    memberships = reformation_.TakeHeld();
    stopping = end_.stopping();
    // The next incarnation's session opens (kAttaching, as after an attach), or nothing does.
    link_.Reincarnated(!stopping && closed.ok());
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
    link_.Opened();  // refused if that session ended already
  }
  gate_.Complete(std::move(memberships));
  Wake();
}

}  // namespace troika::agent
