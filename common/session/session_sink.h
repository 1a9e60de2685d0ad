#pragma once
// SessionSink: where a job sends what flows down one session stream. Implemented by the gRPC
// session reactor (and by fakes in tests).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/messages.h"

namespace troika::session {

class SessionSink {
 public:
  virtual ~SessionSink() = default;
  // Queues `message` for the stream. Called with the job's lock held: must not block and
  // must not call back into the job. Messages arrive in the order they were sent.
  virtual void Send(std::shared_ptr<const DownMessage> message) = 0;
  // Ends the stream with `status` once what was sent is out (a coordinator that stops but
  // keeps its jobs for a restart). Same rules as Send. Default: nothing (fakes).
  virtual void End(const absl::Status& status) {}
  // Whether the stream ended because its peer went away (its process or its connection died)
  // rather than because either side closed it: an agent closes its session to move on to an
  // elastic job's next generation. Asked when the stream closed. Default: false (fakes).
  virtual bool peer_lost() const { return false; }
};

}  // namespace troika::session
