#pragma once
// Agent: one node of a job, from registration to exit (the lifecycle is docs/agent.md):
//   1. RegisterNode upstream: the node's block of ranks;
//   2. serve the coordinator's protocol to the ranks on a Unix socket (AgentService);
//   3. start the ranks (Supervisor, on the calling thread until they are all gone);
//   4. attach all of them upstream in one call, then open the node's one session stream;
//      the NodeRelay aggregates what the ranks send and fans out what comes down;
//   5. rank exits go upstream at once; an abort from the coordinator stops the ranks; a lost
//      coordinator is reconnected to (RegisterNode, key-value store, Attach, a resumed
//      session) for up to --reconnect_timeout while the ranks wait, then the ranks are stopped;
//      ranks of a job that is not elastic that shut down and attach again form the job anew
//      (agent_incarnation.cc): each is attached upstream again as it asks, and once all of
//      the node's are, the node's session moves to the job's next incarnation;
//   6. once the ranks are gone: finish the upstream session, print one summary line if the
//      node failed, and return the exit code (see kAgentUsage).
//
// Its state is four parts under one lock, each with its own rules and tests: RankTable (this
// node's ranks, generation by generation), UpstreamLink (the session with the coordinator as
// named states and transitions), NodeEnd (why the node ends) and Reformation (a job forming
// anew); the Agent wires them to the supervisor, the relay, the service and the upstream.
//
// Thread contract: one thread calls Run(), once. gRPC threads call the upstream callbacks,
// which only record what happened, hand messages to the relay and ask the supervisor to stop.

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/launch/line_forwarder.h"
#include "agent/launch/process_launcher.h"
#include "agent/launch/supervisor.h"
#include "agent/node/agent_metrics.h"
#include "agent/node/agent_options.h"
#include "agent/node/node_end.h"
#include "agent/node/rank_table.h"
#include "agent/node/reformation.h"
#include "agent/node/upstream_link.h"
#include "agent/relay/upstream.h"
#include "agent/service/attach_gate.h"
#include "common/scheduler.h"
#include "common/session/session_sink.h"

namespace grpc {
class Server;
}
namespace troika {
class ServiceMetrics;
}

namespace troika::agent {

class AgentService;
class NodeRelay;

class Agent {
 public:
  // `launcher`, `out` and `err` must outlive the agent. `signal_fd`: a signalfd(2) delivering
  // SIGINT/SIGTERM (forwarded to the ranks), or -1. Not owned.
  Agent(AgentOptions options, ProcessLauncher& launcher, OutputSink& out, OutputSink& err,
        int signal_fd);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the node until its ranks are gone and returns the exit code. Call once.
  int Run();

 private:
  // RegisterNode upstream; 0, or the exit code of a failure.
  // Waits until the coordinator answers (WaitForConnection), within `timeout`: 0, or the
  // exit code (1, or 128 + a signal received meanwhile), said.
  int Connect(absl::Duration timeout);
  int Register();
  // The HTTP metrics port (--metrics_listen): /metrics, /healthz, /readyz.
  absl::Status StartMetrics();
  AgentSnapshot Snapshot();
  absl::Status StartServer();
  std::vector<ProcessSpec> RankSpecs(int64_t epoch) const;
  // The process of local rank `local` as rank `rank` of generation `epoch` of `size` ranks.
  ProcessSpec RankSpec(int local, int rank, int size, int64_t epoch) const;
  // A relay of `ranks` of a job of `size`.
  std::shared_ptr<NodeRelay> MakeRelay(int size, const std::vector<int>& ranks);
  // The relay of the generation in force.
  std::shared_ptr<NodeRelay> Relay();
  void OnAttached(absl::StatusOr<std::vector<Membership>> memberships);
  // An elastic job's generation ended (`message` carries the membership change): the ranks
  // are told, the ended generation's session closes, and OnClosed attaches this node's
  // survivors as the next generation, renumbered.
  void Reform(std::shared_ptr<const DownMessage> message);
  // An attach answered with a membership change (`changed`: MembershipChangeOf): the
  // generation it attached for ended before every rank attached (the job went on without
  // ranks that did not attach in time; also after a coordinator restart). With some of this
  // node's ranks in the change, renumbers them, tells the ranks that have a session, and
  // attaches the next generation: true. Else false: the attach failed.
  bool ReformBeforeSession(const absl::Status& changed);
  // Attaches this node's `live` ranks upstream for elastic generation `epoch` (after the
  // first); OnAttached gets the answer. An attach that finds no coordinator (UNAVAILABLE: it
  // is restarting under the job) is sent again every kRegisterAgain until `retry_until`
  // (InfinitePast: --reconnect_timeout from now); the restarted coordinator restores the job.
  void AttachGeneration(std::vector<int> live, int64_t epoch,
                        absl::Time retry_until = absl::InfinitePast());
  // What a change leaves this node (RankTable::Change) and the next generation's relay.
  struct NextGeneration {
    RankTable::Change ranks;
    std::shared_ptr<NodeRelay> relay;
  };
  // Under mu_: renumbers this node's ranks for `change` and makes the next generation's relay
  // the one in force.
  NextGeneration ApplyChangeLocked(const MembershipChange& change);
  // Then, without the lock: the service and the gate follow, the relay learns of the exits.
  void StartGeneration(const MembershipChange& change, const NextGeneration& next);
  // Last: the restarted ranks the change admits start, the failed ones it drops register.
  void RestartRanks(const MembershipChange& change, const NextGeneration& next);
  // An elastic job's rank of this node failed (local index `local`): with --max_restarts
  // left, it registers to join again (named by a join id) and the supervisor holds its
  // place. The change that admits it (Reform), or, for a node with no other rank left, the
  // RegisterNode answer (Rejoin), starts it again under its new number.
  void MaybeRestart(int local);
  // RegisterNode for such a rank. A call the coordinator could not answer (UNAVAILABLE: it
  // went, or came back and still restores its jobs) is sent again every
  // kRegisterAgain, while the agent goes on (its own reconnecting gives up in time).
  void RegisterRestart(int local, const std::string& join_id);
  // The pause before a registration or a generation's attach that failed UNAVAILABLE is sent
  // again (Register, RegisterRestart, AttachGeneration).
  static constexpr absl::Duration kRegisterAgain = absl::Milliseconds(200);
  // A node with no rank left: its restarting ranks admitted at the commit that answered local
  // rank `local`'s registration with `block` (every one whose join id `block.admitted` names:
  // ranks registered one by one are admitted together) start again and attach as one node.
  void Rejoin(int local, const NodeBlock& block);
  // Starts local rank `local` again as rank `rank` of generation `epoch` of `size` ranks.
  void Relaunch(int local, int rank, int size, int64_t epoch);
  // A job that is not elastic formed anew (agent_incarnation.cc, docs/agent.md). `ranks`
  // left the job (goodbye) and attach again: the first starts the node's re-formation (the
  // gate then waits for the next incarnation); each is attached upstream to it (again).
  // OK, or the error to answer them with (the job was aborted, the agent stops).
  absl::Status AttachAgain(const std::vector<int>& ranks);
  // The upstream attach of `ranks` for re-formation `formation` was answered.
  void OnAttachedAgain(uint64_t formation, absl::StatusOr<std::vector<Membership>> memberships);
  // Every rank of the node attached again: the next incarnation's relay takes over, and the
  // ended one's session closes; OnClosed then opens the next one's and answers the gate.
  void Reincarnate(std::vector<Membership> memberships);
  // OnClosed's part once the ended incarnation's session closed (Reincarnate).
  void OpenNextIncarnation(const absl::Status& closed);
  // The node's upstream session: a new one, or (`resume`) one resuming the job.
  void OpenSession(const std::optional<SessionResume>& resume);
  void OnDown(std::shared_ptr<const DownMessage> message);
  void OnClosed(const absl::Status& status);
  // Coordinator restart: register, put back the key-value store, attach and resume the
  // session again; retried until the link's reconnect deadline.
  void Reconnect();
  // Reconnect's rest: the key-value store put back, this node's live ranks attached, the
  // session resumed.
  void ReattachAfterReconnect(absl::Time deadline);
  void ReconnectFailed(const absl::Status& status);
  // The job is over for this node without an abort from the coordinator (it is gone for
  // good, or refused this node's session): the ranks learn `why` and are stopped.
  void GiveUp(const std::string& why);
  // After the ranks are gone: lets the attach settle and the session end (bounded).
  void FinishUpstream(bool signalled);
  // Waits until `done` holds (checked under mu_): 0; `deadline` passes: -1; or a signal
  // arrives on signal_fd_: its number.
  template <typename Predicate>
  int WaitUntil(Predicate done, absl::Time deadline);
  void Wake();
  int ExitCode(const SupervisorResult& result);
  void Teardown();
  void Say(const std::string& message);

  // Constant after construction.
  const AgentOptions options_;
  ProcessLauncher& launcher_;
  OutputSink& out_;
  OutputSink& err_;
  const int signal_fd_;
  const int wake_fd_;  // an eventfd: the callbacks wake WaitUntil with it

  // Where this node is in the job, from its first RegisterNode; constant after Register().
  struct Placement {
    int size = 0;  // the job's ranks when this node registered
    // HOROVOD_CROSS_RANK and HOROVOD_CROSS_SIZE of every rank this node starts: the node's
    // index among the job's nodes of P ranks and their number, when it registered.
    int cross_rank = 0;
    int cross_size = 1;
    int node_rank = -1;
  };
  Placement placement_;
  // Set up by Run() before any callback can run; torn down by ~Agent. relay_ is replaced for
  // each generation or incarnation: read it under mu_.
  std::string socket_path_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<Upstream> upstream_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<NodeRelay> relay_;
  AttachGate gate_;
  std::unique_ptr<AgentService> service_;
  // Only with --metrics_listen. Outlives server_ (its RPC interceptor); stops serving first
  // in ~Agent.
  std::unique_ptr<ServiceMetrics> metrics_;
  std::unique_ptr<grpc::Server> server_;
  // For metrics: ranks running, and exits by kind (success, failure, signal).
  struct ProcessCounts {
    std::atomic<int> running{0};
    std::array<std::atomic<int64_t>, 3> exits{};
  };
  ProcessCounts processes_;

  std::mutex mu_;
  // Guarded by mu_ (but for table_.labels(), constant once Register() set it; relay_ only
  // while a metrics scrape may read it: set under mu_).
  std::optional<absl::StatusOr<NodeBlock>> registration_;  // RegisterNode's answer
  RankTable table_;          // this node's ranks, generation by generation
  UpstreamLink link_;        // where the node's session stands
  NodeEnd end_;              // why the node is ending, if it is
  Reformation reformation_;  // a job that is not elastic forming anew
};

}  // namespace troika::agent
