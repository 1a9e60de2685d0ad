#pragma once
// SessionReactor: the server side of one session stream. Reads Hello, then request batches
// and goodbyes, feeding them to the job; writes what the job sends, one write at a time, in
// order. Deletes itself when the stream is over.

#include <deque>
#include <memory>
#include <mutex>

#include "coordinator/job.h"
#include "coordinator/job_registry.h"
#include "coordinator/session_sink.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::coordinator {

// Thread contract: gRPC serialises the On* callbacks of one direction; Send() may come from
// any thread (always with the job's lock held).
class SessionReactor final : public grpc::ServerBidiReactor<v1::Up, v1::Down>, public SessionSink {
 public:
  explicit SessionReactor(JobRegistry& registry);

  void Send(std::shared_ptr<const DownMessage> message) override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;
  void OnCancel() override {}

 private:
  absl::Status Handle(const v1::Up& up);
  // Ends the stream with `status` once queued writes are out.
  void FinishLocked(const absl::Status& status);
  void StartWriteLocked();

  JobRegistry& registry_;
  v1::Up up_;                 // owned by the read side
  std::shared_ptr<Job> job_;  // set by Hello, read side only

  std::mutex mu_;
  // Guarded by mu_.
  std::deque<v1::Down> outbox_;
  bool writing_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status finish_status_;
};

}  // namespace troika::coordinator
