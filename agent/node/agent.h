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
  // This node's ranks in the generation in force (current_ without the gone). Under mu_.
  std::vector<int> LiveRanks() const;
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
  // What a change leaves this node: its ranks in the next generation, the next generation's
  // relay, the restarted ranks it admits (local index, rank), the failed ones it drops
  // (local index, join id) and the exited ones it keeps (rank, how it ended).
  struct NextGeneration {
    std::vector<int> live;
    std::shared_ptr<NodeRelay> relay;
    std::vector<std::pair<int, int>> restarted;
    std::vector<std::pair<int, std::string>> to_register;
    std::vector<std::pair<int, ExitStatus>> exited;
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
  // session again; retried until reconnect_deadline_.
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

  // Set up by Run() before any callback can run; torn down by ~Agent. relay_ is replaced for
  // an elastic job's next generation: read it under mu_.
  std::vector<int> ranks_;  // the node's block, as registered: the ranks' labels
  int size_ = 0;            // the job's ranks when this node registered (RegisterNode)
  // HOROVOD_CROSS_RANK and HOROVOD_CROSS_SIZE of every rank this node starts: the node's
  // index among the job's nodes of P ranks and their number, when it registered.
  int cross_rank_ = 0;
  int cross_size_ = 1;
  std::string socket_path_;
  absl::Time attach_deadline_;
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
  std::atomic<int> ranks_running_{0};
  std::array<std::atomic<int64_t>, 3> exits_{};  // success, failure, signal

  std::mutex mu_;
  // Guarded by mu_ (relay_ only while a metrics scrape may read it: set under mu_).
  std::optional<absl::StatusOr<NodeBlock>> registration_;  // RegisterNode's answer
  // By local index: the rank's number in the generation in force; -1: the job went on
  // without it (an elastic job). ranks_ until the first membership change.
  std::vector<int> current_;
  std::set<int> left_;                     // labels of the ranks the job went on without
  std::map<int, ExitStatus> exited_;       // local index -> how its process ended, until restarted
  int restarts_left_ = 0;                  // --max_restarts, counted down
  std::map<int, std::string> restarting_;  // local index -> join id, while it waits to rejoin
  // Of those, the ones whose loss the coordinator has not applied yet: they register once it
  // has (Reform), so that the job has room for them.
  std::set<int> unregistered_;
  bool reforming_ = false;  // the ended generation's session is closing (Reform)
  // A job that is not elastic forming anew: this node's ranks that attached again, and
  // their memberships once the upstream answered; `id` tells a re-formation's answers from
  // an earlier one's. Then, while the ended incarnation's session closes (reincarnating_),
  // the memberships the gate is to answer with.
  struct Reformation {
    uint64_t id = 0;
    std::set<int> asked;
    std::map<int, Membership> attached;
  };
  std::optional<Reformation> reformation_;
  uint64_t reformations_ = 0;
  bool reincarnating_ = false;
  std::vector<Membership> next_memberships_;
  bool attach_settled_ = false;
  std::string attach_error_;  // non-empty: the upstream attach failed
  bool session_open_ = false;
  bool session_closed_ = false;
  bool close_requested_ = false;
  std::shared_ptr<const DownMessage> abort_;  // the coordinator aborted the job
  std::string lost_;    // non-empty: the upstream session ended unexpectedly: why (GiveUp)
  int node_rank_ = -1;  // from the first RegisterNode
  int64_t epoch_ = 0;   // the generation this node attaches for or runs (RegisterNode, changes)
  bool reconnecting_ = false;     // between losing the coordinator and a new session (or giving up)
  bool awaiting_resume_ = false;  // a resumed session is open; its `resumed` has not come yet
  absl::Time reconnect_deadline_;
};

}  // namespace troika::agent
