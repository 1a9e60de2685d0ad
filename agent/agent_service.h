#pragma once
// AgentService: the coordinator's gRPC service as the agent serves it to its node's ranks, on
// a Unix socket, so an unchanged client library talks to the agent exactly as it would to the
// coordinator:
//   - CreateJob: answered here (the agent's own job and size; anything else is
//     FAILED_PRECONDITION);
//   - Attach: for this node's ranks only; answered when the agent's one upstream Attach of all
//     its ranks completes (AttachGate), with the same error for all if it fails;
//   - Session: the coordinator's SessionReactor over the NodeRelay;
//   - KvSet / KvGet / KvWait: forwarded upstream asynchronously, with the caller's deadline;
//   - RegisterNode: UNIMPLEMENTED (agents do not nest).
// Nothing blocks a gRPC thread.
//
// Thread-safe (gRPC calls it from its own threads). The gate, relay and upstream must outlive
// the server that serves this service.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/attach_gate.h"
#include "agent/node_relay.h"
#include "agent/upstream.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::agent {

struct AgentServiceOptions {
  std::string job;         // the agent's job
  int size = 0;            // its ranks
  std::vector<int> ranks;  // this node's ranks
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
  void Reform(int size, std::vector<int> ranks, std::shared_ptr<NodeRelay> relay);

 private:
  // NOT_FOUND unless `job` is the agent's job.
  absl::Status CheckJob(const std::string& job) const;

  AttachGate& gate_;
  Upstream& upstream_;
  mutable std::mutex mu_;
  AgentServiceOptions options_;       // guarded by mu_ (the job name is constant)
  std::shared_ptr<NodeRelay> relay_;  // guarded by mu_
};

}  // namespace troika::agent
