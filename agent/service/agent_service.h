#pragma once
// AgentService: the coordinator's gRPC service as the agent serves it to its node's ranks, on
// a Unix socket, so an unchanged client library talks to the agent exactly as it would to the
// coordinator:
//   - CreateJob: answered here (the agent's own job and size; anything else is
//     FAILED_PRECONDITION); for a generation of an elastic job that has ended (the request's
//     epoch), the renumbering to the one in force (CreateJobResponse.change);
//   - Attach: for this node's ranks only, of the generation in force (else ABORTED);
//     answered when the agent's one upstream Attach of all its ranks completes (AttachGate),
//     with the same error for all if it fails; ranks that left (goodbye) and attach again
//     are handed to `attach_again` first, then wait in the gate for the job's next
//     incarnation (docs/agent.md);
//   - Session: the coordinator's SessionReactor over the NodeRelay;
//   - KvSet / KvGet / KvWait: forwarded upstream asynchronously, with the caller's deadline;
//   - RegisterNode: UNIMPLEMENTED (agents do not nest).
// Nothing blocks a gRPC thread.
//
// Thread-safe (gRPC calls it from its own threads). The gate, relay and upstream must outlive
// the server that serves this service.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/relay/node_relay.h"
#include "agent/relay/upstream.h"
#include "agent/service/attach_gate.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::agent {

// The renumbering from generation `epoch` to the one in force, composed of `changes` (an
// elastic job's membership changes, in order): for each rank of generation `epoch`, its rank
// in the last (-1: gone); `epoch` and `size` the last's. None if `epoch` is the last's or
// `changes` do not hold every change since it.
std::optional<MembershipChange> ChangeSince(const std::vector<MembershipChange>& changes,
                                            int64_t epoch);

struct AgentServiceOptions {
  std::string job;         // the agent's job
  int size = 0;            // its ranks
  std::vector<int> ranks;  // this node's ranks
  // Called (on a gRPC thread; must not block) with ranks that left the job and attach again,
  // before they wait in the gate: OK, or the error to answer them with. Null: such ranks wait
  // in the gate as any (an elastic job). Constant.
  std::function<absl::Status(const std::vector<int>& ranks)> attach_again;
};

class AgentService final : public v1::Coordinator::CallbackService {
 public:
  AgentService(AgentServiceOptions options, AttachGate& gate, std::shared_ptr<NodeRelay> relay,
               Upstream& upstream);

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* context,
                                      const v1::CreateJobRequest* request,
                                      v1::CreateJobResponse* response) override;
  grpc::ServerUnaryReactor* Attach(grpc::CallbackServerContext* context,
                                   const v1::AttachRequest* request,
                                   v1::AttachResponse* response) override;
  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* context,
                                         const v1::RegisterNodeRequest* request,
                                         v1::RegisterNodeResponse* response) override;
  grpc::ServerBidiReactor<v1::Up, v1::Down>* Session(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const v1::KvSetRequest* request,
                                  v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* context,
                                   const v1::KvWaitRequest* request,
                                   v1::KvWaitResponse* response) override;

  // An elastic job's next generation (docs/elastic.md): the job's new size, this node's ranks
  // in it, and the relay of their sessions. Sessions already open stay with the old relay.
  // `change`: the membership change that made it (none: a node that had no rank left starts
  // over with a rank it restarted, whose numbers are its environment's).
  void Reform(int size, std::vector<int> ranks, std::shared_ptr<NodeRelay> relay,
              const std::optional<MembershipChange>& change);

 private:
  // NOT_FOUND unless `job` is the agent's job.
  absl::Status CheckJob(const std::string& job) const;

  AttachGate& gate_;
  Upstream& upstream_;
  mutable std::mutex mu_;
  AgentServiceOptions options_;       // guarded by mu_ (the job name is constant)
  std::shared_ptr<NodeRelay> relay_;  // guarded by mu_
  // Guarded by mu_: the job's membership changes since this node's ranks started, in order.
  // A rank attaching for an ended generation (it learned of a change, then the job changed
  // again before it attached) is answered with the renumbering (CreateJobResponse.change).
  std::vector<MembershipChange> changes_;
};

}  // namespace troika::agent
