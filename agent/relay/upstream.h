#pragma once
// Upstream: the agent's gRPC client of the coordinator. One channel (with keepalive pings, so
// a vanished coordinator is noticed within the liveness timeout), carrying:
//   - RegisterNode (at start-up),
//   - one Attach of all the node's ranks (asynchronous),
//   - the node's ONE session stream: Hello with all the node's ranks, then, in call order,
//     request batches, goodbyes, exit reports and wait states; what comes down goes to callbacks,
//   - the ranks' key-value calls, forwarded asynchronously (no thread waits on them).
//
// Coordinator restart: the session can be opened again once the previous one ended (with
// Hello.resume); key-value calls wait for a coordinator that is down and are sent again when
// the connection breaks under them, within their deadline; the keys set through this
// upstream are kept so that ReplayKvSets() can put them into a restarted coordinator.
//
// Thread-safe. Nothing here blocks but WaitForConnection(); callbacks run on gRPC threads (or, for
// a call that fails at once, on the caller's) and must not block. Messages queued before
// OpenSession() are sent right after its Hello.

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/relay/node_relay.h"
#include "common/address.h"
#include "common/session/session_sink.h"
#include "common/tls.h"
#include "troika/types.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::agent {

struct UpstreamOptions {
  // The coordinator: host:port, unix:/path, ... (common/address.h). Required; Create() fails
  // with INVALID_ARGUMENT naming what is wrong with a malformed one.
  std::string address;
  // A coordinator that answers no keepalive ping for this long is gone: the session ends
  // (UNAVAILABLE). Pings go every half of it, each answered within the other half.
  // Default 10 s.
  absl::Duration liveness_timeout = absl::Seconds(10);
  // Largest message sent or received. Default 64 MiB.
  int max_message_bytes = 64 << 20;
  // Transport security toward a host:port coordinator (common/tls.h).
  ClientTls tls;
  // The job's token, carried by every call. Empty: a job this agent's RegisterNode creates
  // gets a generated token, which later calls carry.
  std::string job_token;
  // The job's minimum size, sent with RegisterNode: an elastic job (docs/elastic.md). 0: not
  // elastic.
  int min_size = 0;
  int max_size = 0;  // RegisterNode's max_size (0: the size)
};

struct NodeBlock {
  int first_rank = 0;
  int node_rank = 0;  // -1: a node admitted to a running elastic job
  int size = 0;       // ranks of the generation the block belongs to
  int64_t epoch = 0;  // that generation
  // A node admitted at a commit: every node admitted with it that gave a join id, this one too
  // (RegisterNodeResponse.admitted).
  std::vector<MembershipChange::Admitted> admitted;
};

class Upstream final : public RelayUpstream {
 public:
  using AttachCallback = std::function<void(absl::StatusOr<std::vector<Membership>>)>;
  using DownCallback = std::function<void(std::shared_ptr<const DownMessage>)>;
  // How the session ended: OK after CloseSession() was answered; otherwise why.
  using ClosedCallback = std::function<void(const absl::Status&)>;
  template <typename Response>
  using UnaryCallback = std::function<void(const absl::Status&, Response&)>;

  static absl::StatusOr<std::unique_ptr<Upstream>> Create(UpstreamOptions options);
  // Cancel()s, then waits for every call and the session to end.
  ~Upstream() override;
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  const std::string& address() const { return options_.address; }
  // Cancel() was called: the agent is stopping.
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  using RegisterCallback = std::function<void(absl::StatusOr<NodeBlock>)>;

  // The agent's first connection, at start-up: blocks up to `timeout` until the channel is
  // connected. UNAVAILABLE naming the address and the cause (common/address.h) — at once for
  // a socket that does not exist or a host name that does not resolve; CANCELLED once
  // `cancelled` (polled every 100 ms) returns true. Later calls wait for the coordinator on
  // their own (a restarting one, within their deadlines).
  absl::Status WaitForConnection(absl::Duration timeout, const std::function<bool()>& cancelled);

  // Creates or looks up job `job` of `size` ranks and reserves `nproc` ranks for this node
  // (block `node_rank`, or any free one if -1); `done` gets the block. Waits up to `timeout`
  // for the coordinator to be reachable.
  void RegisterNode(const std::string& job, int size, const std::string& host, int nproc,
                    int node_rank, absl::Duration timeout, RegisterCallback done,
                    const std::string& join_id = "");
  // Attaches all of `ranks` (on `host`) for generation `epoch` at once; `done` gets their
  // memberships, in order, once every rank of the job attached, or the error: ABORTED with the
  // renumbering (MembershipChangeOf) when the generation ended before (AttachResponse.change).
  // `again`: the ranks shut down and attach to the job's next incarnation
  // (AttachRequest.again; give epoch 0).
  void Attach(const std::string& job, const std::vector<int>& ranks, const std::string& host,
              int64_t epoch, absl::Duration timeout, AttachCallback done, bool again = false);
  // Opens the session: Hello{job, ranks, epoch, resume}, then what was queued. Once a session
  // ended (on_closed ran), another may be opened: `resume` then says what the node has seen.
  void OpenSession(const std::string& job, const std::vector<int>& ranks, int64_t epoch,
                   const std::optional<SessionResume>& resume, DownCallback on_down,
                   ClosedCallback on_closed);
  // Sets every key set through this upstream again (a restarted coordinator lost them);
  // `done` gets the first error, or OK.
  void ReplayKvSets(absl::Time deadline, std::function<void(const absl::Status&)> done);
  // Forgets the keys set so far: the job formed anew, and they were its last incarnation's.
  void ForgetKvSets();
  // Half-closes the session once everything queued is written; the coordinator then ends it
  // (on_closed with OK). Later messages are dropped.
  void CloseSession();
  // Ends the session and every pending call now (CANCELLED); their callbacks still run.
  void Cancel();

  // RelayUpstream: queued for the session.
  void SendRequests(v1::RequestBatch batch) override;
  void SendGoodbye(const std::vector<int>& ranks) override;
  void SendRankExit(const RankExit& exit) override;
  void SendWaitState(const WaitState& state) override;
  void SendExecReport(const ExecReport& report) override;
  void SendScheduleEnded(int64_t id, const std::vector<int>& ranks) override;
  void SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) override;
  void SendReplay(v1::ResponseBatch batch) override;

  // A rank's key-value call, forwarded with `deadline`.
  void KvSet(const v1::KvSetRequest& request, absl::Time deadline,
             UnaryCallback<v1::KvSetResponse> done);
  void KvGet(const v1::KvGetRequest& request, absl::Time deadline,
             UnaryCallback<v1::KvGetResponse> done);
  void KvWait(const v1::KvWaitRequest& request, absl::Time deadline,
              UnaryCallback<v1::KvWaitResponse> done);

 private:
  class Session;
  template <typename Request, typename Response>
  struct Call;

  Upstream(UpstreamOptions options, CoordinatorAddress address,
           std::shared_ptr<grpc::Channel> channel);

  // Starts one asynchronous unary call through `start` and tracks it for Cancel().
  template <typename Request, typename Response, typename Start>
  void StartUnary(const Request& request, absl::Time deadline, Start start,
                  UnaryCallback<Response> done);
  // A rank's key-value call: waits for a coordinator that is down, and is sent again if the
  // connection breaks under it, until `deadline`.
  template <typename Request, typename Response, typename Start>
  void ForwardKv(const Request& request, absl::Time deadline, Start start,
                 UnaryCallback<Response> done);
  void Enqueue(v1::Up up);
  void StartNextWriteLocked();
  void OnWriteDone(bool ok);
  void OnSessionDone(Session& session, const grpc::Status& status);
  // A key the ranks set, kept for ReplayKvSets.
  void RememberKvSet(const v1::KvSetRequest& request);
  absl::Status Describe(const grpc::Status& status, const std::string& what) const;

  // Constant after construction.
  const UpstreamOptions options_;
  const CoordinatorAddress address_;  // options_.address, parsed
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  // Guarded by mu_.
  bool cancelled_ = false;
  std::string job_token_;  // options' token, or the one RegisterNode's job was created with
  // Unary calls in flight, each kept alive by its entry until its callback ran.
  std::map<grpc::ClientContext*, std::shared_ptr<void>> calls_;
  // Sessions opened and not yet over (their OnDone returned); the last is current.
  std::vector<std::unique_ptr<Session>> sessions_;
  Session* session_ = nullptr;                       // the current one, once OpenSession()
  bool session_done_ = false;                        // the current one ended: its OnDone began
  int live_sessions_ = 0;                            // sessions whose OnDone has not returned
  std::map<std::string, v1::KvSetRequest> kv_sets_;  // by key, as last set
  std::deque<v1::Up> outbox_;                        // front is being written while writing_
  bool writing_ = false;
  bool closing_ = false;      // CloseSession(): half-close once outbox_ is empty
  bool writes_done_ = false;  // the half-close was started
  ClosedCallback on_closed_;
};

}  // namespace troika::agent
