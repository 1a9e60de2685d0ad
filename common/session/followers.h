#pragma once
// Followers: the sessions of an elastic generation that ended before they reached the next
// generation's session table. The next generation Follows the change that ended generation
// `ended_epoch` (a DownMessage with abort_reason and membership_change); a session of that
// epoch that opens there is sent the change, as the ended generation's sessions were, owns no
// rank, and what it sends until it closes is void (docs/elastic.md). A session of another
// epoch is not a follower: the owner checks it as any other.
//
// One rule for both session tables that apply it: the coordinator's job
// (coordinator/job/sessions.h) and the agent's relay (agent/relay/node_relay.h).
//
// Thread contract: not thread-safe; the owner serialises every call under its lock. Open
// calls SessionSink::Send (SessionSink's rules).

#include <cstdint>
#include <memory>
#include <set>

#include "common/messages.h"
#include "common/session/session_sink.h"

namespace troika::session {

class Followers {
 public:
  // This generation is the one `change` made when generation `ended_epoch` ended.
  void Follow(std::shared_ptr<const DownMessage> change, int64_t ended_epoch);
  // A session of `epoch` opens: true if it follows the change (it was sent the change).
  bool Open(SessionSink* sink, int64_t epoch);
  bool contains(SessionSink* sink) const { return sinks_.contains(sink); }
  // `sink` closed: true if it was a follower (it owned no rank).
  bool Close(SessionSink* sink) { return sinks_.erase(sink) > 0; }
  // The change that ended generation `epoch`, if this generation is the one it made.
  std::shared_ptr<const DownMessage> ChangeOf(int64_t epoch) const {
    return change_ && epoch == ended_epoch_ ? change_ : nullptr;
  }

 private:
  std::shared_ptr<const DownMessage> change_;
  int64_t ended_epoch_ = 0;
  std::set<SessionSink*> sinks_;
};

}  // namespace troika::session
