#pragma once
// Sessions: the control streams of one job's ranks — which session owns which rank, the
// numbering of the responses broadcast to them, what they were last told to do
// (ClientSettings), and their resumption after a coordinator restart (docs/protocol.md):
// once every rank's session resumed, the sessions that missed responses another one received
// get them (asked of that one with a replay request), then every session is told `resumed`.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.
// Sinks are called under that lock (SessionSink's rules).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/messages.h"
#include "common/session/followers.h"
#include "common/session/session_sink.h"

namespace troika::coordinator {

// Sessions resuming after a coordinator restart (Sessions::Resume). Outside Sessions so that
// std::optional sees it complete (clang).
struct SessionsResync {
  std::map<session::SessionSink*, int64_t> received;  // per resumed session
  int32_t max_cache_id = 0;
  int64_t max_schedule_id = 0;
  session::SessionSink* leader = nullptr;  // non-null: asked for responses from .. to
  int64_t from = 0, to = 0;
};

class Sessions {
 public:
  // What the resumed sessions said they know, once they all resumed: numbering goes on after
  // `through`; ids at or below the others are the old coordinator's.
  struct Resumed {
    int64_t through = 0;
    int32_t max_cache_id = 0;
    int64_t max_schedule_id = 0;
  };

  // `job`: the job's name, for messages. `settings`: what a session is told when it opens.
  Sessions(std::string job, int size, ClientSettings settings);

  // Whether a new session may open (FAILED_PRECONDITION once sessions resume after a
  // coordinator restart), or a resumed one (not once sessions are new or resumed already).
  absl::Status CanOpen() const;
  absl::Status CanResume(const SessionResume& resume) const;
  // Binds a session of `ranks` (none of them `departed`): INVALID_ARGUMENT for bad ranks,
  // ALREADY_EXISTS for a rank with a session or gone. The session is sent the settings if not
  // default. Call CanOpen / CanResume first.
  absl::Status Open(const std::vector<int>& ranks, session::SessionSink* sink,
                    const std::set<int>& departed);
  absl::Status Resume(const std::vector<int>& ranks, const SessionResume& resume,
                      session::SessionSink* sink, const std::set<int>& departed);
  // Once every rank's session resumed: asks the most advanced one for the responses others
  // missed (nullopt), or, if none did, finishes (every session told `resumed`).
  std::optional<Resumed> Resync();
  // Whether `sink` was asked for a replay.
  bool AwaitsReplay(session::SessionSink* sink) const;
  // The replay asked of `sink`: sends each session what it missed and finishes. A replay
  // that is not what was asked fails (FAILED_PRECONDITION): the job cannot resume.
  absl::StatusOr<Resumed> Replay(int64_t first_seq, const std::vector<Response>& responses);
  // Sessions resume (until every one did and got what it missed): nothing is negotiated.
  bool resyncing() const { return resync_.has_value(); }
  void CancelResync() { resync_.reset(); }

  // This job is the elastic generation that `change` made of generation `epoch`. A session of
  // that generation that opens here (its agent attached it, and the generation ended before
  // the session reached the coordinator) is sent `change`, as that generation's sessions
  // were, and owns no rank: OpenFollower (session::Followers, the rule the agent's relay
  // applies too). Its closing does not count for this job (Job).
  void Follows(std::shared_ptr<const DownMessage> change, int64_t epoch) {
    followers_.Follow(std::move(change), epoch);
  }
  // Whether a session of `epoch` follows the change to this generation: if so it was sent the
  // change, and what it sends until it closes is void (Following).
  bool OpenFollower(session::SessionSink* sink, int64_t epoch) {
    return followers_.Open(sink, epoch);
  }
  bool Following(session::SessionSink* sink) const { return followers_.contains(sink); }
  // The renumbering from generation `epoch` to this one, if this one followed it.
  std::optional<MembershipChange> ChangeFrom(int64_t epoch) const {
    std::shared_ptr<const DownMessage> told = followers_.ChangeOf(epoch);
    if (!told) return std::nullopt;
    return told->membership_change;
  }

  // Unbinds `sink`: its ranks, or empty if it had none.
  std::vector<int> Close(session::SessionSink* sink);
  bool Owns(session::SessionSink* sink, int rank) const;
  // OK if `sink` owns every one of `ranks`; else PERMISSION_DENIED: "a session sent `what`
  // for rank r, which it does not own" (a protocol violation by the peer).
  absl::Status CheckOwns(session::SessionSink* sink, const std::vector<int>& ranks,
                         const char* what) const;
  bool connected(int rank) const { return of_rank_[rank] != nullptr; }
  bool all_connected() const;
  bool empty() const { return ranks_.empty(); }

  void Broadcast(std::shared_ptr<const DownMessage> message) const;
  // Numbers `responses` (they go out next, in one message) and broadcasts them.
  void BroadcastResponses(std::shared_ptr<DownMessage> message);
  // Ends every stream with `status` (a coordinator that stops but keeps its jobs).
  void EndAll(const absl::Status& status) const;
  // Tells every session `settings` if they changed.
  void UpdateSettings(const ClientSettings& settings);

 private:
  absl::Status Bind(const std::vector<int>& ranks, session::SessionSink* sink,
                    const std::set<int>& departed);
  Resumed Finish(int64_t through);

  const std::string job_;
  std::map<session::SessionSink*, std::vector<int>> ranks_;
  std::vector<session::SessionSink*> of_rank_;
  int64_t next_seq_ = 1;                  // the number of the next response broadcast
  bool fresh_ = false;                    // a session opened without resuming
  bool resumed_ = false;                  // the sessions resumed after a coordinator restart
  std::optional<SessionsResync> resync_;  // while the sessions resume
  ClientSettings settings_;               // what the sessions were last sent
  session::Followers followers_;
};

}  // namespace troika::coordinator
