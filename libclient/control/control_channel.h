#pragma once
// ControlChannel: the client's connection to its coordinator — or to the local agent, which
// speaks the same protocol. Plain structs only; the gRPC implementation is
// grpc_control_channel.h.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "libclient/transport/store.h"
#include "troika/types.h"

namespace troika::internal {

// What came down the session stream.
struct SessionEvent {
  enum class Kind { kResponses, kAbort, kClosed };
  Kind kind = Kind::kClosed;
  DownMessage down;  // kResponses: responses, evicted cache ids and cache misses
  // kAbort: why the job was aborted. kClosed: how the stream ended (OK: cleanly).
  absl::Status status;
};

// Thread contract: Join/OpenSession before anything else; then Send and Goodbye from one
// thread (the sender), SendWaitState and SendExecReport from that thread too, Receive from one
// other thread (the receiver), Cancel and store() from any thread.
class ControlChannel {
 public:
  virtual ~ControlChannel() = default;

  // Creates (or looks up) the job, attaches `rank` and waits until every rank attached.
  // `epoch`: Options::epoch. A troika-agent whose elastic job went on past it answers
  // ABORTED with the renumbering (kMembershipChangePayload, as a session's abort carries it).
  virtual absl::StatusOr<Membership> Join(const std::string& job, int size, int rank, int64_t epoch,
                                          const std::string& host, absl::Duration timeout) = 0;
  virtual absl::Status OpenSession(const std::string& job, const std::vector<int>& ranks,
                                   int64_t epoch) = 0;
  virtual absl::Status Send(const std::vector<TensorRequest>& requests) = 0;
  // Tells the coordinator what this rank is blocked waiting for (empty: no longer blocked).
  virtual absl::Status SendWaitState(const WaitState& state) = 0;
  // Reports this rank's execution (see ExecStats).
  virtual absl::Status SendExecReport(const ExecReport& report) = 0;
  // Tells the coordinator that `ranks` stopped executing schedule `id` (docs/protocol.md).
  virtual absl::Status SendScheduleEnded(int64_t id, const std::vector<int>& ranks) = 0;
  // Tells the coordinator that `ranks` deviated from schedule `id` (docs/protocol.md).
  virtual absl::Status SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) = 0;
  // Announces that `ranks` leave, and half-closes the stream.
  virtual absl::Status Goodbye(const std::vector<int>& ranks) = 0;
  // Blocks for the next event; after kClosed, every call returns kClosed.
  virtual SessionEvent Receive() = 0;
  // Ends the stream now; a blocked Receive returns kClosed.
  virtual void Cancel() = 0;
  // The job's key-value store (valid after Join).
  virtual transport::Store& store() = 0;
};

}  // namespace troika::internal
