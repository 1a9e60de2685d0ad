#pragma once
// SessionReactor: the server side of one session stream, for the coordinator and the agent
// alike. Reads Hello, then request batches, goodbyes and exit reports, feeding them to the
// SessionHandler the Hello's job names; writes what the handler sends, one write at a time,
// in order. Deletes itself when the stream is over.

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "common/session/control_stats.h"
#include "common/session/session_handler.h"
#include "common/session/session_sink.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::session {

// Thread contract: gRPC serialises the On* callbacks of one direction; Send() may come from
// any thread (always with the job's lock held).
class SessionReactor final : public grpc::ServerBidiReactor<v1::Up, v1::Down>, public SessionSink {
 public:
  // Finds the handler of a job by name (NOT_FOUND and the like end the stream).
  using Lookup =
      std::function<absl::StatusOr<std::shared_ptr<SessionHandler>>(const std::string& job)>;

  // `server` names this side in the status a handler's error ends the stream with ("the
  // coordinator", "this node's troika-agent"), so the peer can say who refused what.
  // `stats` (optional, must outlive the stream) counts the stream's traffic.
  SessionReactor(Lookup lookup, std::string server, ControlStats* stats = nullptr);

  void Send(std::shared_ptr<const DownMessage> message) override;
  void End(const absl::Status& status) override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;
  // gRPC's word that the stream was cancelled: by the peer, or its connection broke.
  void OnCancel() override { cancelled_ = true; }
  bool peer_lost() const override { return cancelled_; }

 private:
  absl::Status Handle(const v1::Up& up);
  // Ends the stream with `status` once queued writes are out.
  void FinishLocked(const absl::Status& status);
  void StartWriteLocked();

  const Lookup lookup_;
  const std::string server_;
  ControlStats* const stats_;
  v1::Up up_;                                // owned by the read side
  std::shared_ptr<SessionHandler> handler_;  // set by Hello, read side only

  std::mutex mu_;
  // Guarded by mu_.
  std::deque<v1::Down> outbox_;
  bool writing_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status finish_status_;
  absl::Status verdict_;  // the handler's error this side ended the stream with, if it did
  std::atomic<bool> cancelled_ = false;
};

}  // namespace troika::session
