#pragma once
// NodeRelay: the agent's side of its ranks' session streams. It implements the same
// SessionHandler as a coordinator Job, so the agent serves its ranks with the coordinator's
// own SessionReactor and a rank cannot tell the two apart.
//
//   local sessions ──Submit──▶ Aggregator ──▶ RelayUpstream (the node's ONE upstream stream)
//   local sessions ◀──Send──── Deliver() ◀─── what the coordinator sends down (fanned out)
//
// What the relay tells the coordinator about its ranks:
//   - Goodbye: a rank said goodbye on its session, or its process exited with code 0 without
//     saying it (it left, cleanly as far as anyone can tell);
//   - RankExit: a rank's process exited non-zero or was killed (ProcessExited), at once; or a
//     rank's session ended without goodbye and no exit report came within
//     `lost_session_grace` (exit_code -1: "lost its session"); or the process of a rank that
//     said goodbye ended (any code: it will not attach again; docs/agent.md);
//   - WaitState and ExecReport: forwarded unchanged, at once (not aggregated), while the rank
//     is live.
// A rank's waiting requests always go upstream before its goodbye or exit report.
//
// Thread-safe: gRPC threads (sessions), the upstream reader (Deliver), the supervisor thread
// (ProcessExited) and the scheduler (timers) all call in; one mutex guards the state and is
// held while calling RelayUpstream and SessionSink::Send, neither of which may block or call
// back. Create with std::make_shared (timers hold weak references).
//
// Requests sent as response-cache ids are aggregated under the tensor name the relay learned
// from the responses that announced the id, and go upstream compacted as one id request.
//
// Coordinator restart (docs/protocol.md): the relay keeps what it forwarded and got no
// response for, and the latest responses it received, numbered (RelayLedger). While the upstream
// session is down (Suspend) nothing goes upstream; the agent reconnects and resumes with
// ResumeState(). The restarted coordinator may ask for responses other nodes missed (answered
// from the log), then says `resumed`: the relay sends again everything without a response,
// then the goodbyes and exit reports of its ranks. The ranks notice nothing but a pause.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/relay/aggregator.h"
#include "agent/relay/relay_ledger.h"
#include "common/clock.h"
#include "common/messages.h"
#include "common/scheduler.h"
#include "common/session/followers.h"
#include "common/session/session_handler.h"
#include "common/session/session_sink.h"
#include "troika/v1/troika.pb.h"

namespace troika::agent {

// What the relay sends on the node's upstream session. Implemented by Upstream (and fakes).
// Messages go upstream in call order; calls never block.
class RelayUpstream {
 public:
  virtual ~RelayUpstream() = default;
  virtual void SendRequests(v1::RequestBatch batch) = 0;
  virtual void SendGoodbye(const std::vector<int>& ranks) = 0;
  virtual void SendRankExit(const RankExit& exit) = 0;
  virtual void SendWaitState(const WaitState& state) = 0;
  virtual void SendExecReport(const ExecReport& report) = 0;
  virtual void SendScheduleEnded(int64_t id, const std::vector<int>& ranks) = 0;
  virtual void SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) = 0;
  // The answer to a replay request (coordinator restart).
  virtual void SendReplay(v1::ResponseBatch batch) = 0;
};

// What a relay has passed on since it was created (agent metrics).
struct RelayCounts {
  int64_t requests_received = 0;   // tensor requests from local ranks
  int64_t requests_forwarded = 0;  // requests sent upstream, after aggregation
  int64_t responses_relayed = 0;   // responses received from the coordinator
};

struct NodeRelayOptions {
  std::string job;         // the job's name (messages)
  int size = 0;            // ranks in the job
  std::vector<int> ranks;  // this node's ranks
  std::string host;        // this node's host, for exit reports
  // How long a tensor waits for the other local ranks. Default 2 ms.
  absl::Duration aggregation_window = absl::Milliseconds(2);
  // How long a session that ended without goodbye waits for its process's exit report
  // before the rank is reported lost. Default 2 s.
  absl::Duration lost_session_grace = absl::Seconds(2);
  // Responses kept to answer a restarted coordinator's replay request. Default 65536.
  int replay_log_responses = 65536;
};

class NodeRelay : public session::SessionHandler, public std::enable_shared_from_this<NodeRelay> {
 public:
  // `upstream`, `scheduler` and `clock` must outlive the relay's last timer (stop the
  // scheduler first).
  NodeRelay(NodeRelayOptions options, RelayUpstream& upstream, Scheduler& scheduler, Clock& clock);
  ~NodeRelay() override;
  NodeRelay(const NodeRelay&) = delete;
  NodeRelay& operator=(const NodeRelay&) = delete;

  // The node's ranks are attached upstream with this epoch and its session upstream is open:
  // the ranks' sessions may open (until then OpenSession fails with UNAVAILABLE), and exit
  // reports of ranks that ended before go up (the upstream takes nothing between sessions).
  void Attached(int64_t epoch);
  // Before the relay serves any session: its generation follows generation `ended_epoch`,
  // which `change` ended (a DownMessage with abort_reason and membership_change). A session of
  // that epoch that opens here — a rank that attached before the change, whose session reached
  // the agent after it — is sent `change`, as the ended generation's sessions were, so that the
  // rank follows it; it is bound to no rank, and what it sends until it closes is void
  // (session::Followers: the coordinator's rule too).
  void Follows(std::shared_ptr<const DownMessage> change, int64_t ended_epoch);
  // What came down the upstream session: for every local session, the same message. After
  // an abort, sessions that open later get the abort at once and submissions are dropped.
  void Deliver(std::shared_ptr<const DownMessage> message);
  // The process of `rank` ended; `exit_code`/`signal` as in RankExit.
  void ProcessExited(int rank, int exit_code, int signal);
  // Forwards the tensors whose aggregation window ended. Run by a timer; tests may call it.
  void FlushExpired();
  // The upstream session is gone: send nothing upstream until a resumed session says
  // `resumed` (Deliver).
  void Suspend();
  // What to tell a restarted coordinator when resuming (Hello.resume).
  SessionResume ResumeState() const;

  bool aborted() const;
  // Whether every one of `ranks` is this node's and left the job (said goodbye, or exited 0
  // after its session): attaching again, such a rank attaches to the job's next incarnation.
  bool Left(const std::vector<int>& ranks) const;
  RelayCounts counts() const;
  // Requests waiting for aggregation.
  int waiting() const;

  // SessionHandler. Errors end the local stream: UNAVAILABLE before Attached(),
  // FAILED_PRECONDITION for another epoch, PERMISSION_DENIED for a rank that is not this
  // node's or not the session's, ALREADY_EXISTS for a rank with a session (or gone) or a
  // name submitted twice, INVALID_ARGUMENT for a malformed request.
  absl::Status OpenSession(const std::vector<int>& ranks, int64_t epoch,
                           session::SessionSink* sink) override;
  absl::Status Submit(session::SessionSink* sink, std::vector<TensorRequest> requests) override;
  absl::Status Goodbye(session::SessionSink* sink, const std::vector<int>& ranks) override;
  absl::Status ReportExit(session::SessionSink* sink, const RankExit& exit) override;
  absl::Status ReportWaitState(session::SessionSink* sink, const WaitState& state) override;
  absl::Status ReportExec(session::SessionSink* sink, const ExecReport& report) override;
  absl::Status EndSchedule(session::SessionSink* sink, int64_t id,
                           const std::vector<int>& ranks) override;
  absl::Status DeviateSchedule(session::SessionSink* sink, int64_t id,
                               const std::vector<int>& ranks) override;
  void CloseSession(session::SessionSink* sink, const absl::Status& ended) override;

 private:
  struct RankState {
    session::SessionSink* sink = nullptr;
    bool had_session = false;
    bool departed = false;  // its goodbye went upstream
    bool exited = false;    // its process ended
    bool reported = false;  // a RankExit went upstream
    Scheduler::TaskId lost_timer = 0;
  };

  absl::Status CheckOwnedLocked(session::SessionSink* sink, int rank) const;
  // CheckRequest against the request's process set as far as the relay knows it; remembers
  // what an AddProcessSet / RemoveProcessSet barrier proposes.
  absl::Status CheckInSetLocked(const TensorRequest& request);
  // A set-0 response: an AddProcessSet / RemoveProcessSet that succeeded changes the sets.
  void TrackProcessSetLocked(const Response& response, v1::RequestBatch* batch);
  // Removes `rank` from aggregation, sending what that releases.
  void RetireLocked(int rank);
  void SendBatchLocked(v1::RequestBatch& batch);
  void ArmWindowTimerLocked();
  void ReportLost(int rank);
  // Sends again what got no response, then the ranks' goodbyes and exits.
  void ResendLocked();
  // Marks `exit.rank` reported and sends its exit report (kept for a restarted coordinator).
  void SendExitLocked(const RankExit& exit);
  // The aggregation key of a request sent as cache id `id`.
  std::string CacheKeyLocked(int32_t id) const;
  // A schedule came down: what waits here goes upstream now, and is forgotten by the ledger
  // as the coordinator drops it (the ranks execute it as the schedule's).
  void BeginScheduleLocked(const Schedule& schedule);
  // Whether `request` is one of the schedule's tensors from a rank still executing it (the
  // rank sent it before it had the schedule), or a join that rank sent after one: dropped
  // here as the coordinator would (common/schedule_drops.h).
  bool DroppedForScheduleLocked(const TensorRequest& request);

  // Constant after construction.
  const NodeRelayOptions options_;
  RelayUpstream& upstream_;
  Scheduler& scheduler_;
  Clock& clock_;

  mutable std::mutex mu_;
  // Guarded by mu_.
  int64_t epoch_ = -1;  // -1 until Attached()
  RelayCounts counts_;
  std::map<int, RankState> ranks_;
  std::map<session::SessionSink*, std::vector<int>> sessions_;
  Aggregator aggregator_;
  std::shared_ptr<const DownMessage> abort_;  // set once aborted
  session::Followers followers_;              // Follows()
  // Tensor names of the cache ids the coordinator announced, so requests sent as ids
  // aggregate with the others of their tensor.
  std::map<int32_t, std::string> cache_names_;
  // The steady-state schedule in force (docs/protocol.md, Schedules): its tensors, and the
  // local ranks that have not said ScheduleEnded.
  struct RelaySchedule {
    int64_t id = 0;
    ScheduleTensors tensors;
    std::set<int> executing;
    std::set<int> dropped;  // DropsForSchedule
  };
  std::optional<RelaySchedule> schedule_;
  // Process sets: the job's ranks of each set formed so far (learned from the responses to
  // the AddProcessSet barriers), and what the pending AddProcessSet / RemoveProcessSet
  // barriers propose, by barrier name.
  std::map<int, std::vector<int>> sets_;
  std::map<std::string, std::vector<int>> set_proposals_;
  // The coordinator's latest ClientSettings, for sessions that open after they came.
  std::optional<ClientSettings> settings_;
  // Restart: what a restarted coordinator needs of this node.
  RelayLedger ledger_;
  bool suspended_ = false;
  std::map<int, RankExit> exits_;  // exit reports sent upstream (or held until Attached), by rank
  Scheduler::TaskId window_timer_ = 0;
  absl::Time window_due_ = absl::InfiniteFuture();
};

}  // namespace troika::agent
