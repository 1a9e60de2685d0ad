// Agent: the node's session with the coordinator — the attach's outcome, the session stream
// (what comes down, how it ends: a generation's reform, an incarnation, a lost coordinator)
// and giving up on it (docs/agent.md).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/node/agent.h"
#include "agent/relay/node_relay.h"
#include "agent/relay/upstream.h"
#include "agent/service/agent_service.h"
#include "common/logging.h"

namespace troika::agent {

void Agent::OnAttached(absl::StatusOr<std::vector<Membership>> memberships) {
  if (ReformBeforeSession(memberships.status())) return;
  // The generation may end as soon as its session is open, and the change reach this node on
  // that session (Reform, on the upstream's thread) before this returns: what follows is
  // then this generation's only, and neither completes the next one's gate nor moves the
  // next one's link.
  const uint64_t gate = gate_.generation();
  const std::shared_ptr<NodeRelay> relay = Relay();
  if (memberships.ok()) {
    const int64_t epoch = memberships->front().epoch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.set_epoch(epoch);
    }
    // The upstream Hello is queued before any rank can open a session (they wait in the gate),
    // and before the relay sends what it holds.
    OpenSession(std::nullopt);
    relay->Attached(epoch);
  } else {
    TROIKA_LOG(WARNING) << memberships.status();
    std::lock_guard<std::mutex> lock(mu_);
    end_.AttachRefused(std::string(memberships.status().message()));
  }
  const bool failed = !memberships.ok();
  gate_.Complete(std::move(memberships), gate);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Refused if the session ended meanwhile (kReconnecting, kClosed): it stays ended.
    if (relay_ == relay) failed ? link_.AttachFailed() : link_.Opened();
  }
  if (failed) supervisor_->Stop("the node could not attach to the job");
  Wake();
}

void Agent::OpenSession(const std::optional<SessionResume>& resume) {
  std::vector<int> ranks;
  int64_t epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks = table_.LiveRanks();
    epoch = table_.epoch();
  }
  upstream_->OpenSession(
      options_.job, ranks, epoch, resume,
      [this](std::shared_ptr<const DownMessage> m) { OnDown(std::move(m)); },
      [this](const absl::Status& s) { OnClosed(s); });
}

void Agent::OnDown(std::shared_ptr<const DownMessage> message) {
  if (message->membership_change) return Reform(std::move(message));
  Relay()->Deliver(message);
  if (message->resumed) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      link_.Resumed();
    }
    TROIKA_LOG(WARNING) << "job '" << options_.job << "' resumed with the coordinator";
    Wake();
    return;
  }
  if (message->abort_reason.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    end_.Aborted(message);
  }
  // Ranks waiting to attach again (the job forming anew) learn why too.
  gate_.Complete(absl::AbortedError(message->abort_reason));
  supervisor_->Stop("the job was aborted");
  Wake();
}

void Agent::OnClosed(const absl::Status& status) {
  std::string lost;
  bool reconnect = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const UpstreamLink::State was = link_.state();
    if (was == UpstreamLink::State::kReincarnating) {
      // The ended incarnation's session closed (Reincarnate): the next one's opens.
      lock.unlock();
      return OpenNextIncarnation(status);
    }
    if (link_.ReformClosed()) {
      // The ended generation's session closed (Reform): this node's survivors attach as the
      // next one (kReforming); with none, nothing of this node goes on (kLeaving). Also when
      // it broke before its close was answered: an ended generation has nothing to resume,
      // and the attach waits for a coordinator that restarts meanwhile (AttachGeneration), as
      // the other nodes' attaches do — resuming instead would meet their new sessions.
      const std::vector<int> live = table_.LiveRanks();
      const int64_t epoch = table_.epoch();  // the next generation's (Reform)
      lock.unlock();
      if (!status.ok()) {
        TROIKA_LOG(WARNING) << "the ended generation's session broke (" << status.message()
                            << "); this node attaches generation " << epoch;
      }
      if (was == UpstreamLink::State::kReforming && !live.empty()) AttachGeneration(live, epoch);
      Wake();
      return;
    }
    if (!end_.aborted_or_closing()) {
      // Only a broken connection is worth reconnecting for: an error status is the
      // coordinator's answer, and its message says so ("the coordinator ended the session:
      // rank 0 already has a session").
      lost = status.ok() ? absl::StrCat("lost the coordinator: the coordinator at ",
                                        options_.coordinator, " ended the session")
             : absl::IsUnavailable(status) || absl::IsCancelled(status)
                 ? absl::StrCat("lost the coordinator: ", status.message())
                 : std::string(status.message());
      reconnect = absl::IsUnavailable(status) &&
                  options_.reconnect_timeout > absl::ZeroDuration() &&
                  link_.Lost(absl::Now() + options_.reconnect_timeout);
    }
    if (!reconnect) link_.Closed();
  }
  if (reconnect) {
    Relay()->Suspend();
    TROIKA_LOG(WARNING) << "lost the coordinator (" << lost << "); reconnecting for up to "
                        << absl::FormatDuration(options_.reconnect_timeout);
    Reconnect();
  } else if (!lost.empty()) {
    GiveUp(lost);
  }
  Wake();
}

void Agent::GiveUp(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    link_.GaveUp();
    if (!end_.Lost(why)) return;
  }
  // The ranks learn why at once, instead of waiting on a coordinator that is gone.
  auto abort = std::make_shared<DownMessage>();
  abort->abort_reason = why;
  Relay()->Deliver(std::move(abort));
  gate_.Complete(absl::UnavailableError(why));  // ranks waiting to attach again
  supervisor_->Stop(why);
  Wake();
}

}  // namespace troika::agent
