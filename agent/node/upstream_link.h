#pragma once
// UpstreamLink: where the node's session with the coordinator stands, as named states and the
// transitions between them (docs/agent.md, "Lifecycle"):
//
//   kAttaching      the attach of the generation in force is in flight (the first one, an
//                   elastic job's next generation, a node rejoining), or answered and its
//                   session opening (also a job's next incarnation's)
//   kOpen           attached; the session is open
//   kReforming      an elastic generation ended: its session closes (or breaks: an ended
//                   generation has nothing to resume), then this node's survivors attach as
//                   the next one (kAttaching)
//   kLeaving        the same with none of this node's ranks in the next generation: once the
//                   session closed, nothing goes on (kClosed) — unless a restarted rank rejoins
//                   meanwhile (kReforming)
//   kReincarnating  a job that is not elastic forms anew: the ended incarnation's session
//                   closes, then the next one's opens (kAttaching, then kOpen)
//   kReconnecting   the coordinator was lost: registering and attaching again, until the
//                   reconnect deadline
//   kResuming       reconnected: a resumed session is open, and its `resumed` has not come
//   kClosed         the session ended for good, or the attach failed
//
// Each transition names the states it leaves from; from any other it is refused (it returns
// false and the state stays), so a late callback of an earlier state (an attach answered after
// its session closed) cannot move the node back. Plain state: not thread-safe (the Agent's
// lock guards it).

#include "absl/time/time.h"

namespace troika::agent {

class UpstreamLink {
 public:
  enum class State {
    kAttaching,
    kOpen,
    kReforming,
    kLeaving,
    kReincarnating,
    kReconnecting,
    kResuming,
    kClosed,
  };
  static const char* Name(State state);

  // Starts in kAttaching, now; each attach has `attach_timeout` to be answered.
  explicit UpstreamLink(absl::Duration attach_timeout = absl::ZeroDuration());

  State state() const { return state_; }
  // The session is up (metrics, /readyz): kOpen or kResuming.
  bool connected() const { return state_ == State::kOpen || state_ == State::kResuming; }
  // The attach in force was answered (the node waits for that before it closes).
  bool settled() const { return state_ != State::kAttaching && state_ != State::kReforming; }
  // Between sessions on the way to the next (reconnecting, resuming, forming anew): goodbyes
  // go on the next session, so the node waits for it before it closes.
  bool between_sessions() const {
    return state_ == State::kReconnecting || state_ == State::kResuming ||
           state_ == State::kReincarnating;
  }
  // When the attach in force must be answered by (kAttaching, kReforming).
  absl::Time attach_deadline() const { return attach_deadline_; }
  // Until when a lost coordinator is reconnected to (kReconnecting).
  absl::Time reconnect_deadline() const { return reconnect_deadline_; }

  // kAttaching -> kOpen: the attach was answered and the session opened.
  bool Opened();
  // kAttaching -> kClosed: the attach failed.
  bool AttachFailed();
  // kAttaching, kOpen, kResuming -> kReforming (`survivors`: this node has ranks in the next
  // generation) or kLeaving: the generation ended on its session.
  bool Reform(bool survivors);
  // kReforming -> kAttaching, kLeaving -> kClosed: the ended generation's session closed.
  bool ReformClosed();
  // kAttaching, kReconnecting, kResuming -> kAttaching: the attach was answered with a
  // membership change (no session to close); this node's survivors attach the next generation.
  bool ReformBeforeSession();
  // kClosed -> kAttaching, kLeaving -> kReforming: a node with no rank left rejoins with its
  // restarted ranks (from kLeaving once the ended session has closed).
  bool Rejoin();
  // kOpen -> kReincarnating: every rank of the node attached to the next incarnation.
  bool Reincarnate();
  // kReincarnating -> kAttaching (`goes_on`: the next incarnation's session opens) or kClosed:
  // the ended incarnation's session closed.
  bool Reincarnated(bool goes_on);
  // kAttaching, kOpen, kResuming -> kReconnecting: the session broke; the
  // coordinator is reconnected to until `deadline`.
  bool Lost(absl::Time deadline);
  // kReconnecting -> kResuming: registered and attached again; the resumed session is open.
  bool Reattached();
  // kResuming -> kOpen: the coordinator said `resumed`.
  bool Resumed();
  // kReconnecting, kResuming -> kClosed: reconnecting gave up.
  bool GaveUp();
  // Any state -> kClosed: the session ended and nothing reconnects (the agent closes, the job
  // was aborted, the coordinator refused, or reconnecting gave up).
  void Closed();

 private:
  bool Move(std::initializer_list<State> from, State to);

  absl::Duration attach_timeout_;
  State state_ = State::kAttaching;
  absl::Time attach_deadline_;
  absl::Time reconnect_deadline_ = absl::InfinitePast();
};

}  // namespace troika::agent
