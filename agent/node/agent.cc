#include "agent/node/agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/cli/command_line.h"
#include "agent/relay/node_relay.h"
#include "agent/relay/upstream.h"
#include "agent/service/agent_service.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "grpcpp/grpcpp.h"

namespace troika::agent {
namespace {

// Once told of an abort, ranks get this long (at most the grace period) to exit on their own,
// with their own error message, before SIGTERM.
constexpr absl::Duration kStopNotice = absl::Seconds(1);

int LaunchFailureCode(const absl::Status& status) {
  if (absl::IsNotFound(status)) return 127;
  if (absl::IsPermissionDenied(status)) return 126;
  return 1;
}

// The coordinator's reason starts "job 'NAME' aborted: "; the summary says that already.
std::string BareReason(const std::string& reason, const std::string& job) {
  const std::string prefix = absl::StrCat("job '", job, "' aborted: ");
  return absl::StartsWith(reason, prefix) ? reason.substr(prefix.size()) : reason;
}

}  // namespace

Agent::Agent(AgentOptions options, ProcessLauncher& launcher, OutputSink& out, OutputSink& err,
             int signal_fd)
    : options_(std::move(options)),
      launcher_(launcher),
      out_(out),
      err_(err),
      signal_fd_(signal_fd),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      link_(options_.attach_timeout) {}

Agent::~Agent() {
  if (metrics_) metrics_->StopServing();  // its handlers read the objects below
  // Callbacks may reach every object below until the upstream calls and the server are over.
  server_.reset();
  if (scheduler_) scheduler_->Stop();
  upstream_.reset();
  service_.reset();
  relay_.reset();
  scheduler_.reset();
  supervisor_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
}

int Agent::Connect(absl::Duration timeout) {
  // A thread waits, so that a signal is still answered at once.
  std::atomic<bool> stop{false};
  std::optional<absl::Status> connected;  // guarded by mu_
  std::thread waiter([&] {
    absl::Status s = upstream_->WaitForConnection(timeout, [&stop] { return stop.load(); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      connected = std::move(s);
    }
    Wake();
  });
  const int signal =
      WaitUntil([&connected] { return connected.has_value(); }, absl::InfiniteFuture());
  stop = true;
  waiter.join();
  if (signal > 0) {
    Say(absl::StrCat("received ", SignalDescription(signal), " while connecting"));
    return 128 + signal;
  }
  if (!connected->ok()) {
    Say(absl::StrCat("registering with job '", options_.job, "': ", connected->message()));
    return 1;
  }
  return 0;
}

int Agent::Register() {
  UpstreamOptions upstream_options;
  upstream_options.address = options_.coordinator;
  upstream_options.liveness_timeout = options_.liveness_timeout;
  upstream_options.tls = {options_.tls_ca, options_.tls_cert, options_.tls_key, options_.plaintext};
  upstream_options.job_token = options_.job_token;
  upstream_options.min_size = options_.min_np;
  upstream_options.max_size = options_.max_np;
  auto upstream = Upstream::Create(upstream_options);
  if (!upstream.ok()) {
    Say(std::string(upstream.status().message()));
    return 1;
  }
  upstream_ = *std::move(upstream);
  // The first connection fails fast, naming the address and the cause: a missing socket or a
  // host that does not resolve at once, anything else after --connect_timeout.
  if (int code = Connect(std::min(options_.connect_timeout, options_.attach_timeout)); code != 0) {
    return code;
  }
  const int size = options_.nnodes * options_.nproc_per_node;
  absl::StatusOr<NodeBlock> block;
  for (;;) {
    // A node joining a running elastic job is answered at the job's next commit.
    upstream_->RegisterNode(
        options_.job, size, options_.host, options_.nproc_per_node, options_.node_rank,
        options_.min_np > 0 ? absl::InfiniteDuration() : options_.attach_timeout,
        [this](absl::StatusOr<NodeBlock> block) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            registration_ = std::move(block);
          }
          Wake();
        });
    const int signal =
        WaitUntil([this] { return registration_.has_value(); }, absl::InfiniteFuture());
    if (signal > 0) {
      Say(absl::StrCat("received ", SignalDescription(signal), " while registering"));
      return 128 + signal;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      block = *std::move(registration_);
      registration_.reset();
    }
    // An elastic node waits for its job as long as it takes (to join at a commit, or for its
    // first generation): a coordinator lost meanwhile (restarted with its --state_dir) is
    // waited for, within --reconnect_timeout, and asked again.
    if (options_.min_np == 0 || !absl::IsUnavailable(block.status())) break;
    TROIKA_LOG(WARNING) << block.status().message() << "; registering again";
    // (A coordinator restoring its jobs answers at once that it is restarting.)
    if (int signal = WaitUntil([] { return false; }, absl::Now() + kRegisterAgain); signal > 0) {
      Say(absl::StrCat("received ", SignalDescription(signal), " while registering"));
      return 128 + signal;
    }
    if (int code = Connect(options_.reconnect_timeout); code != 0) return code;
  }
  if (!block.ok()) {
    Say(std::string(block.status().message()));
    return 1;
  }
  std::vector<int> labels;
  for (int i = 0; i < options_.nproc_per_node; ++i) labels.push_back(block->first_rank + i);
  placement_.node_rank = block->node_rank;
  placement_.size = block->size;
  // Horovod's cross rank and size: this node's index among the job's nodes of P ranks, and
  // their number. A block's first rank is its node rank times P, also for a node admitted to
  // a running elastic job (its block follows the others').
  placement_.cross_rank = block->first_rank / options_.nproc_per_node;
  placement_.cross_size = (block->size + options_.nproc_per_node - 1) / options_.nproc_per_node;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.Start(labels, options_.max_restarts, block->epoch);
    reformation_.Start(labels);
    link_ = UpstreamLink(options_.attach_timeout);  // from now, if it waited to join
  }
  if (block->node_rank < 0) {
    TROIKA_LOG(WARNING) << "admitted to job '" << options_.job
                        << "' at a commit: " << FormatRanks(labels) << " of " << placement_.size;
  } else {
    TROIKA_LOG(INFO) << "node rank " << block->node_rank << " of job '" << options_.job
                     << "': " << FormatRanks(labels);
  }
  return 0;
}

int Agent::Run() {
  if (!options_.metrics_listen.empty()) {
    if (absl::Status s = StartMetrics(); !s.ok()) {
      Say(std::string(s.message()));
      return 1;
    }
  }
  if (int code = Register(); code != 0) return code;

  scheduler_ = std::make_unique<Scheduler>();
  const std::vector<int>& labels = table_.labels();
  {
    std::lock_guard<std::mutex> lock(mu_);  // a metrics scrape may read relay_
    relay_ = MakeRelay(placement_.size, labels);
  }
  AgentServiceOptions service_options;
  service_options.job = options_.job;
  service_options.size = placement_.size;
  service_options.ranks = labels;
  if (options_.min_np == 0) {
    // Ranks that shut down and call init again form the job anew (agent_incarnation.cc).
    service_options.attach_again = [this](const std::vector<int>& ranks) {
      return AttachAgain(ranks);
    };
  }
  service_ = std::make_unique<AgentService>(std::move(service_options), gate_, relay_, *upstream_);
  if (absl::Status s = StartServer(); !s.ok()) {
    Say(std::string(s.message()));
    Teardown();
    return 1;
  }

  SupervisorOptions supervisor_options;
  supervisor_options.name = "troika-agent";
  supervisor_options.grace_period = options_.grace_period;
  supervisor_options.stop_delay = std::min(kStopNotice, options_.grace_period);
  supervisor_options.signal_fd = signal_fd_;
  supervisor_options.labels = labels;
  supervisor_options.stop_on_failure = options_.min_np == 0;  // elastic: the others go on
  supervisor_options.on_exit = [this](int label, const ExitStatus& exit) {
    processes_.running.fetch_sub(1);
    processes_.exits[exit.signal != 0 ? 2 : exit.code != 0 ? 1 : 0].fetch_add(1);
    const int local = label - table_.labels().front();
    int rank;
    std::shared_ptr<NodeRelay> relay;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rank = table_.RankOf(local);  // its rank in the generation in force, and that one's relay
      relay = relay_;
      table_.RecordExit(local, exit);
    }
    // Before the exit goes upstream: the change that drops the rank finds it restarting.
    if (!exit.ok()) MaybeRestart(local);
    if (rank >= 0) relay->ProcessExited(rank, exit.code, exit.signal);
  };
  supervisor_ = std::make_unique<Supervisor>(launcher_, out_, err_, supervisor_options);
  if (absl::Status s = supervisor_->Start(RankSpecs(table_.epoch())); !s.ok()) {
    Say(std::string(s.message()));
    Teardown();
    return LaunchFailureCode(s);
  }
  processes_.running.fetch_add(static_cast<int>(labels.size()));
  upstream_->Attach(
      options_.job, labels, options_.host, table_.epoch(), options_.attach_timeout,
      [this](absl::StatusOr<std::vector<Membership>> m) { OnAttached(std::move(m)); });
  SupervisorResult result = supervisor_->Run();
  FinishUpstream(result.signal != 0);
  const int code = ExitCode(result);
  Teardown();
  return code;
}

absl::Status Agent::StartServer() {
  socket_path_ = absl::StrCat(options_.socket_dir, "/troika-agent-", getpid(), ".sock");
  if (socket_path_.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("the socket path ", socket_path_,
                                                   " is too long; choose a shorter --socket_dir"));
  }
  unlink(socket_path_.c_str());  // left behind by an earlier process with our pid
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(service_.get());
  if (metrics_) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
    factories.push_back(metrics_->MakeInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(factories));
  }
  server_ = builder.BuildAndStart();
  if (!server_ || bound == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on unix:", socket_path_,
                                               " (does --socket_dir exist and is it writable?)"));
  }
  return absl::OkStatus();
}

absl::Status Agent::StartMetrics() {
  metrics_ = std::make_unique<ServiceMetrics>(
      std::make_shared<AgentMetrics>(options_.job, [this] { return Snapshot(); }));
  return metrics_->Serve(options_.metrics_listen, [this]() -> absl::Status {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_.connected()) return absl::OkStatus();
    return absl::UnavailableError(link_.state() == UpstreamLink::State::kClosed
                                      ? "the session with the coordinator ended"
                                      : "not attached to the job yet");
  });
}

AgentSnapshot Agent::Snapshot() {
  AgentSnapshot s;
  std::shared_ptr<NodeRelay> relay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    relay = relay_;
    s.upstream_connected = link_.connected();
  }
  if (relay) s.relay = relay->counts();
  s.ranks_running = processes_.running.load();
  s.exits_success = processes_.exits[0].load();
  s.exits_failure = processes_.exits[1].load();
  s.exits_signal = processes_.exits[2].load();
  return s;
}

std::vector<ProcessSpec> Agent::RankSpecs(int64_t epoch) const {
  std::vector<ProcessSpec> specs;
  const std::vector<int>& labels = table_.labels();
  for (int local = 0; local < static_cast<int>(labels.size()); ++local) {
    specs.push_back(RankSpec(local, labels[local], placement_.size, epoch));
  }
  return specs;
}

ProcessSpec Agent::RankSpec(int local, int rank, int size, int64_t epoch) const {
  std::map<std::string, std::string> vars = {
      {"TROIKA_COORDINATOR", "unix:" + socket_path_},
      {"TROIKA_JOB", options_.job},
      {"TROIKA_RANK", std::to_string(rank)},
      {"TROIKA_SIZE", std::to_string(size)},
      {"TROIKA_LOCAL_RANK", std::to_string(local)},
      {"TROIKA_LOCAL_SIZE", std::to_string(table_.labels().size())},
      {"TROIKA_DEVICE", std::to_string(local)},
      {"TROIKA_HOST", options_.host},
      // What a rank of `horovodrun --gloo` sees, for scripts (and Horovod's tests) that read
      // it: the same numbers, with this agent as the node.
      {"HOROVOD_RANK", std::to_string(rank)},
      {"HOROVOD_SIZE", std::to_string(size)},
      {"HOROVOD_LOCAL_RANK", std::to_string(local)},
      {"HOROVOD_LOCAL_SIZE", std::to_string(table_.labels().size())},
      {"HOROVOD_CROSS_RANK", std::to_string(placement_.cross_rank)},
      {"HOROVOD_CROSS_SIZE", std::to_string(placement_.cross_size)},
      {"HOROVOD_HOSTNAME", options_.host},
  };
  if (!options_.data_host.empty()) vars["TROIKA_DATA_HOST"] = options_.data_host;
  // An elastic rank says for which generation it attaches: one that ended meanwhile is
  // answered with the renumbering (Options::epoch).
  if (options_.min_np > 0) vars["TROIKA_EPOCH"] = std::to_string(epoch);
  return {options_.command, MergeEnvironment(CurrentEnvironment(), vars)};
}

std::shared_ptr<NodeRelay> Agent::MakeRelay(int size, const std::vector<int>& ranks) {
  NodeRelayOptions relay_options;
  relay_options.job = options_.job;
  relay_options.size = size;
  relay_options.ranks = ranks;
  relay_options.host = options_.host;
  relay_options.aggregation_window = options_.aggregation_window;
  return std::make_shared<NodeRelay>(relay_options, *upstream_, *scheduler_, Clock::Real());
}

std::shared_ptr<NodeRelay> Agent::Relay() {
  std::lock_guard<std::mutex> lock(mu_);
  return relay_;
}

template <typename Predicate>
int Agent::WaitUntil(Predicate done, absl::Time deadline) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done()) return 0;
    }
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return -1;
      timeout_ms =
          static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
    }
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
    if (poll(fds, signal_fd_ >= 0 ? 2 : 1, timeout_ms) < 0 && errno != EINTR) return -1;
    uint64_t count;
    if (fds[0].revents != 0 && read(wake_fd_, &count, sizeof(count)) < 0) {
      // EAGAIN: another reader took it; the predicate is checked again anyway.
    }
    signalfd_siginfo info;
    if (signal_fd_ >= 0 && fds[1].revents != 0 &&
        read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      return static_cast<int>(info.ssi_signo);
    }
  }
}

void Agent::FinishUpstream(bool signalled) {
  // Whatever the ranks did (goodbyes, exit reports) is queued upstream; it only reaches the
  // coordinator once the node is attached and its session open. A user who stopped the agent
  // with a signal does not wait for other nodes to show up.
  absl::Time attach_deadline;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attach_deadline =
        signalled ? absl::Now() + absl::Seconds(1) : link_.attach_deadline() + absl::Seconds(5);
  }
  if (WaitUntil([this] { return link_.settled(); }, attach_deadline) > 0) return;
  // A node resuming with a restarted coordinator sends its goodbyes once resumed; one moving
  // to the job's next incarnation, on that one's session.
  if (WaitUntil([this] { return !link_.between_sessions(); },
                signalled ? absl::Now() + absl::Seconds(1)
                          : absl::Now() + options_.reconnect_timeout + absl::Seconds(5)) > 0) {
    return;
  }
  bool open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open = link_.state() == UpstreamLink::State::kOpen;
    end_.Close();
  }
  if (!open) return;
  upstream_->CloseSession();
  WaitUntil([this] { return link_.state() == UpstreamLink::State::kClosed; },
            absl::Now() + options_.liveness_timeout);
}

void Agent::Wake() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN only: a wake-up is pending anyway.
  }
}

int Agent::ExitCode(const SupervisorResult& result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (result.signal != 0) {
    Say(absl::StrCat("job failed: ", result.Summary()));
    return result.ExitCode();
  }
  if (const DownMessage* abort = end_.abort()) {
    Say(absl::StrCat("job aborted: ", BareReason(abort->abort_reason, options_.job)));
    if (!abort->abort_cause.has_value()) return 1;
    const int code = abort->abort_cause->ShellCode();
    return code >= 1 && code <= 255 ? code : 1;
  }
  if (!end_.attach_error().empty()) {
    Say(end_.attach_error());
    return 1;
  }
  if (!end_.lost().empty()) {
    Say(absl::StrCat("job aborted: ", end_.lost()));
    return 1;
  }
  // An elastic job went on without the ranks it lost: the node failed only if another rank
  // did.
  const std::set<int>& left = table_.left();
  int code = 0;
  if (result.failed_rank >= 0 && !left.count(result.labels[result.failed_rank])) {
    code = result.ExitCode();
  } else {
    for (size_t i = 0; i < result.exits.size() && code == 0; ++i) {
      if (!left.count(result.labels[i])) code = result.exits[i].ShellCode();
    }
  }
  if (code != 0) Say(absl::StrCat("job failed: ", result.Summary()));
  if (code == 0 && !left.empty()) {
    Say(absl::StrCat("the job went on without ",
                     FormatRanks(std::vector<int>(left.begin(), left.end())), " of this node"));
  }
  return code;
}

void Agent::Teardown() {
  if (upstream_) upstream_->Cancel();  // pending key-value calls finish their ranks' calls
  gate_.Complete(absl::CancelledError("the troika-agent is shutting down"));
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_->Wait();
  }
  if (scheduler_) scheduler_->Stop();
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
}

void Agent::Say(const std::string& message) {
  err_.Write(absl::StrCat("troika-agent: ", message, "\n"));
}

}  // namespace troika::agent
