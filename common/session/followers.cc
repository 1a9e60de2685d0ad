// followers.h: the sessions that follow a membership change.

#include "common/session/followers.h"

#include <utility>

namespace troika::session {

void Followers::Follow(std::shared_ptr<const DownMessage> change, int64_t ended_epoch) {
  change_ = std::move(change);
  ended_epoch_ = ended_epoch;
}

bool Followers::Open(SessionSink* sink, int64_t epoch) {
  if (change_ == nullptr || epoch != ended_epoch_) return false;
  sinks_.insert(sink);
  sink->Send(change_);
  return true;
}

}  // namespace troika::session
