#include "agent/node/upstream_link.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace troika::agent {

const char* UpstreamLink::Name(State state) {
  switch (state) {
    case State::kAttaching:
      return "attaching";
    case State::kOpen:
      return "open";
    case State::kReforming:
      return "reforming";
    case State::kLeaving:
      return "leaving";
    case State::kReincarnating:
      return "reincarnating";
    case State::kReconnecting:
      return "reconnecting";
    case State::kResuming:
      return "resuming";
    case State::kClosed:
      return "closed";
  }
  return "?";
}

UpstreamLink::UpstreamLink(absl::Duration attach_timeout)
    : attach_timeout_(attach_timeout), attach_deadline_(absl::Now() + attach_timeout) {}

bool UpstreamLink::Move(std::initializer_list<State> from, State to) {
  if (std::find(from.begin(), from.end(), state_) == from.end()) return false;
  state_ = to;
  if (to == State::kAttaching || to == State::kReforming) {
    attach_deadline_ = absl::Now() + attach_timeout_;
  }
  return true;
}

bool UpstreamLink::Opened() { return Move({State::kAttaching}, State::kOpen); }

bool UpstreamLink::AttachFailed() { return Move({State::kAttaching}, State::kClosed); }

bool UpstreamLink::Reform(bool survivors) {
  return Move({State::kAttaching, State::kOpen, State::kResuming},
              survivors ? State::kReforming : State::kLeaving);
}

bool UpstreamLink::ReformClosed() {
  return Move({State::kReforming}, State::kAttaching) || Move({State::kLeaving}, State::kClosed);
}

bool UpstreamLink::ReformBeforeSession() {
  return Move({State::kAttaching, State::kReconnecting, State::kResuming}, State::kAttaching);
}

bool UpstreamLink::Rejoin() {
  return Move({State::kClosed}, State::kAttaching) || Move({State::kLeaving}, State::kReforming);
}

bool UpstreamLink::Reincarnate() { return Move({State::kOpen}, State::kReincarnating); }

bool UpstreamLink::Reincarnated(bool goes_on) {
  return Move({State::kReincarnating}, goes_on ? State::kAttaching : State::kClosed);
}

bool UpstreamLink::Lost(absl::Time deadline) {
  if (!Move({State::kAttaching, State::kOpen, State::kResuming}, State::kReconnecting)) {
    return false;
  }
  reconnect_deadline_ = deadline;
  return true;
}

bool UpstreamLink::Reattached() { return Move({State::kReconnecting}, State::kResuming); }

bool UpstreamLink::Resumed() { return Move({State::kResuming}, State::kOpen); }

bool UpstreamLink::GaveUp() {
  return Move({State::kReconnecting, State::kResuming}, State::kClosed);
}

void UpstreamLink::Closed() { state_ = State::kClosed; }

}  // namespace troika::agent
