#pragma once
// SessionHandler: what a session stream talks to once its Hello named a job — a coordinator
// Job, or an agent's relay of its node. The server-side stream (SessionReactor) is shared by
// both, which is what lets a rank speak the same protocol to either.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/messages.h"
#include "common/session/session_sink.h"

namespace troika::session {

// Thread-safe. Errors returned are protocol violations by the peer: the stream ends with them.
class SessionHandler {
 public:
  virtual ~SessionHandler() = default;
  // Binds `sink` to `ranks` until CloseSession(sink, ...).
  virtual absl::Status OpenSession(const std::vector<int>& ranks, int64_t epoch,
                                   SessionSink* sink) = 0;
  // Binds `sink` to `ranks` of a peer that reconnects after a coordinator restart, having
  // seen `resume` of the job's response order (docs/protocol.md, Coordinator restart). Only a
  // coordinator's jobs take it.
  virtual absl::Status ResumeSession(const std::vector<int>& ranks, int64_t epoch,
                                     const SessionResume& resume, SessionSink* sink) {
    return absl::FailedPreconditionError("only a coordinator resumes sessions");
  }
  // The peer's answer to a replay request: `responses`, numbered from `first_seq`.
  virtual absl::Status Replay(SessionSink* sink, int64_t first_seq,
                              std::vector<Response> responses) {
    return absl::InvalidArgumentError("no replay was asked for");
  }
  virtual absl::Status Submit(SessionSink* sink, std::vector<TensorRequest> requests) = 0;
  // The session's `ranks` leave cleanly.
  virtual absl::Status Goodbye(SessionSink* sink, const std::vector<int>& ranks) = 0;
  virtual absl::Status ReportExit(SessionSink* sink, const RankExit& exit) = 0;
  // The session's rank `state.rank` is blocked waiting for `state.waiting_for` (empty: no
  // longer blocked).
  virtual absl::Status ReportWaitState(SessionSink* sink, const WaitState& state) = 0;
  // The session's rank `report.rank` reports its execution (ClientSettings asked for it).
  virtual absl::Status ReportExec(SessionSink* sink, const ExecReport& report) = 0;
  // The session's `ranks` stopped executing steady-state schedule `id` (docs/protocol.md).
  virtual absl::Status EndSchedule(SessionSink* sink, int64_t id, const std::vector<int>& ranks) {
    return absl::InvalidArgumentError("this peer sent no schedule");
  }
  // The session's `ranks` deviated from schedule `id`: every rank is told to deviate too.
  virtual absl::Status DeviateSchedule(SessionSink* sink, int64_t id,
                                       const std::vector<int>& ranks) {
    return absl::InvalidArgumentError("this peer sent no schedule");
  }
  // The stream is over: `ended` is OK if the peer closed it or it broke, else the error this
  // side ended it with (one of the handler's errors above: the peer's protocol violation).
  // No Send() reaches `sink` after this returns.
  virtual void CloseSession(SessionSink* sink, const absl::Status& ended) = 0;
};

}  // namespace troika::session
