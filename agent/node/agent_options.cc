#include "agent/node/agent_options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/cli/command_line.h"

namespace troika::agent {

const char kAgentUsage[] =
    R"(troika-agent: the Troika agent of one node: starts the node's ranks of a job, supervises
them, and relays their control traffic to the coordinator on one stream.

Usage: troika-agent --coordinator=HOST:PORT --job=NAME --nnodes=N --nproc-per-node=P
                    [options] -- COMMAND [ARGS...]

Options:
  --coordinator HOST:PORT   the Troika coordinator: HOST a name, an IPv4 address or [IPv6],
                            PORT 1-65535 (dns:///HOST:PORT and unix:PATH too); required
  --tls_ca PEM              TLS to a HOST:PORT coordinator: the CA of its certificate;
                            default $TROIKA_TLS_CA
  --tls_cert PEM, --tls_key PEM
                            this node's client certificate and key, for a coordinator that
                            requires mutual TLS; default $TROIKA_TLS_CERT, $TROIKA_TLS_KEY
  --plaintext BOOL          true: no TLS to a HOST:PORT coordinator (it must serve plaintext
                            too); default $TROIKA_PLAINTEXT, else false. A HOST:PORT
                            coordinator needs --tls_ca or --plaintext true
  --job_token_file PATH     the job's token, which every call on the job carries; default
                            $TROIKA_JOB_TOKEN, else the file $TROIKA_JOB_TOKEN_FILE; none: a
                            job this agent creates gets a generated token (one node only)
  --job NAME                the job; every agent of the job gives the same name; required
  --nnodes N                nodes (agents) in the job; required; the job has N*P ranks
  --nproc-per-node P        ranks this agent starts (1 to 1024); required
  --min_np M                an elastic job: when ranks are lost (a rank exits non-zero or is
                            killed, a node is lost) and at least M remain, the job goes on
                            with the survivors as its next generation, renumbered, instead
                            of aborting (docs/elastic.md); every agent of the job gives the
                            same M; default 0: not elastic
  --max_np X                an elastic job's maximum: a node that registers once the job has
                            no block left (a new or returning node) waits, and is admitted at
                            the job's next commit with its ranks after the others', up to X
                            ranks; default: N*P (0)
  --max_restarts R          an elastic job: a rank of this node that fails (exits non-zero, is
                            killed) is started again, up to R times in all for the node; the
                            job goes on without it at once, and it rejoins, renumbered, at the
                            job's next commit, from rank 0's state; default 0
  --node_rank K             this node's block of ranks, K*P .. K*P+P-1 (0 <= K < N);
                            default -1: the lowest free block, or the block this host
                            registered before (agents sharing a host must give K)
  --host NAME               this node's name, which groups ranks into local ranks;
                            default: gethostname()
  --data_host ADDR          the address the ranks give their data-plane peers (sets
                            TROIKA_DATA_HOST); default: the client library's choice
  --data_interface NAMES    the data plane's address is that of the first of these interfaces
                            (comma-separated, e.g. eth0) this host has up; not with --data_host
  --socket_dir DIR          where the ranks' Unix socket is created; default /tmp
  --grace_period DURATION   time between SIGTERM and SIGKILL when ranks are stopped; default 5s
  --liveness_timeout DUR    the coordinator is considered gone when it answers no keepalive
                            ping for this long; default 10s
  --reconnect_timeout DUR   how long to keep trying to reach a coordinator that is gone (say
                            it restarts) and resume the job, before stopping the ranks (an
                            elastic node waiting to join: and register again);
                            default 60s (0: stop them at once)
  --aggregation_window DUR  how long a collective waits for the node's other ranks before
                            what has arrived goes upstream; default 2ms (0: never waits)
  --attach_timeout DUR      how long to wait for the coordinator and for the other nodes to
                            attach (an elastic job goes on without nodes that did not attach
                            in time if at least --min_np ranks did); default 60s
  --connect_timeout DUR     how long to wait at start for the first connection to the
                            coordinator before failing with the address and the cause (a
                            malformed address, a missing socket or a host that does not
                            resolve fail at once); at most --attach_timeout; default 10s
  --metrics_listen HOST:PORT  serve HTTP /metrics, /healthz and /readyz there (docs/metrics.md);
                            default: off
  --stop_with_parent BOOL   true: stop the ranks (as on SIGTERM) when the process that started
                            the agent exits; default false (troikarun sets it)
  --launcher_stdin BOOL     true: started by troikarun over ssh: read the job's environment
                            from stdin (NUL-separated NAME=value entries, an empty one last),
                            then stop the ranks (as on SIGTERM) when stdin ends, so that no
                            rank outlives troikarun; default false
  --print_interfaces        (alone) print this host's IPv4 interfaces, "NAME ADDRESS" lines,
                            and exit: what troikarun asks each host before a job
  --log_level LEVEL         debug, info, warning or error; default warning
  -h, --help                print this help and exit
Durations are written 5s, 500ms, 1m (a plain number means seconds). Options may also be
written -name=value or --name value, with "-" or "_" inside names. Everything after "--" is
the rank command, passed on untouched; COMMAND is looked up in PATH unless it contains a "/".

Lifecycle: the agent registers its node with the coordinator (RegisterNode) and gets its block
of ranks; serves the ranks the coordinator's protocol on a Unix socket; starts the P ranks;
attaches all of them upstream in one call; and opens ONE session stream for all of them. Each
collective a tensor needs goes upstream as one request for the node once every local rank has
submitted it, or, after the aggregation window, as what has arrived.

Each rank runs COMMAND with the agent's environment plus:
  TROIKA_COORDINATOR  unix:SOCKET_DIR/troika-agent-<pid of the agent>.sock
  TROIKA_JOB          the job name
  TROIKA_RANK         the rank, K*P .. K*P+P-1
  TROIKA_SIZE         N*P
  TROIKA_LOCAL_RANK   the rank's index on this agent, 0 .. P-1
  TROIKA_LOCAL_SIZE   P
  TROIKA_DEVICE       equal to TROIKA_LOCAL_RANK: the local device (GPU) to use
  TROIKA_HOST         --host
  TROIKA_DATA_HOST    --data_host, when given
and, as horovodrun --gloo sets them, with this agent as the node:
  HOROVOD_RANK, HOROVOD_SIZE              TROIKA_RANK, TROIKA_SIZE
  HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE  TROIKA_LOCAL_RANK, TROIKA_LOCAL_SIZE
  HOROVOD_CROSS_RANK  this node's index among the job's nodes: its first rank / P (K when
                      --node_rank K)
  HOROVOD_CROSS_SIZE  the number of nodes: the job's ranks / P (N) when this agent registered
  HOROVOD_HOSTNAME    --host
An elastic job's rank started again, or on a node admitted later, gets the rank and size of
the generation it starts in (TROIKA_RANK, TROIKA_SIZE and HOROVOD_RANK, HOROVOD_SIZE alike).
Ranks read stdin from /dev/null. Every line a rank writes is printed with a "[RANK] " prefix
(the global rank), stdout on stdout and stderr on stderr.

Supervision: a rank exiting 0 has left the job (a goodbye goes upstream for it if it did not
say one). A rank exiting non-zero or killed by a signal is reported to the coordinator at once,
which aborts the job on every node (with --min_np: ends the generation, and the other ranks
go on); its session ending without a goodbye while its process
lives on is reported after 2 seconds as lost. When the job is aborted (by any node) or the
coordinator is lost, the agent sends SIGTERM to its ranks, SIGKILL to those still running
after the grace period, and prints one line: "troika-agent: job aborted: REASON". SIGINT or
SIGTERM sent to the agent is forwarded to every rank, with the same SIGKILL after the grace
period; a second one sends SIGKILL at once. Ranks of a job that is not elastic may shut down
and join again in the same processes (init after shutdown): the job forms anew, with the
same ranks, once every rank joined again; a rank that exits instead, or fails, after its
shutdown fails the others at once, naming it; one that never joins again, at
--attach_timeout (docs/agent.md).

Exit status:
  0      every rank of this node exited with code 0
  C      the rank whose exit aborted the job (on any node) exited with code C (1..255)
  128+S  that rank was killed by signal S, or the agent received signal S first
  1      the agent failed (cannot register or attach, lost the coordinator), or the job was
         aborted for another reason
  2      invalid command line
  126    COMMAND could not be executed
  127    COMMAND was not found
  Otherwise, without word from the coordinator, the exit code of this node's first failing
  rank (its code, or 128 + its signal).

Example:
  troika-agent --coordinator=coordinator:7070 --job=resnet --nnodes=2 --nproc-per-node=8 \
      -- ./train --epochs 90
)";

namespace {

constexpr char kProgram[] = "troika-agent";

absl::Status ParseInt(const std::string& flag, const std::string& value, int min, int max,
                      int* out) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    return UsageError(kProgram, absl::StrCat("--", flag, ": '", value, "' is not a number"));
  }
  if (n < min || n > max) {
    return UsageError(
        kProgram, absl::StrCat("--", flag, " must be between ", min, " and ", max, ", got ", n));
  }
  *out = n;
  return absl::OkStatus();
}

absl::Status ParseDuration(const std::string& flag, const std::string& value, bool positive,
                           absl::Duration* out) {
  absl::StatusOr<absl::Duration> d = ParseDurationFlag(kProgram, flag, value, positive);
  if (!d.ok()) return d.status();
  *out = *d;
  return absl::OkStatus();
}

absl::Status SetString(const std::string& flag, const std::string& value, std::string* out) {
  if (value.empty()) return UsageError(kProgram, absl::StrCat("--", flag, " must not be empty"));
  *out = value;
  return absl::OkStatus();
}

absl::Status SetFlag(const std::string& name, const std::string& value, AgentOptions& o) {
  if (name == "coordinator") {
    if (absl::Status s = CheckCoordinatorFlag(kProgram, value); !s.ok()) return s;
    o.coordinator = value;
    return absl::OkStatus();
  }
  if (name == "job_token_file") return SetString(name, value, &o.job_token_file);
  if (name == "tls_ca") return SetString(name, value, &o.tls_ca);
  if (name == "tls_cert") return SetString(name, value, &o.tls_cert);
  if (name == "tls_key") return SetString(name, value, &o.tls_key);
  if (name == "plaintext") {
    if (value != "true" && value != "false") {
      return UsageError(kProgram, "--plaintext must be true or false");
    }
    o.plaintext = value == "true";
    return absl::OkStatus();
  }
  if (name == "job") return SetString(name, value, &o.job);
  if (name == "nnodes") return ParseInt(name, value, 1, 1 << 16, &o.nnodes);
  if (name == "nproc_per_node") {
    return ParseInt("nproc-per-node", value, 1, kMaxRanksPerNode, &o.nproc_per_node);
  }
  if (name == "node_rank") return ParseInt(name, value, -1, 1 << 16, &o.node_rank);
  if (name == "min_np") return ParseInt(name, value, 0, 1 << 16, &o.min_np);
  if (name == "max_np") return ParseInt(name, value, 0, 1 << 16, &o.max_np);
  if (name == "max_restarts") return ParseInt(name, value, 0, 1 << 16, &o.max_restarts);
  if (name == "host") return SetString(name, value, &o.host);
  if (name == "data_host") {
    o.data_host = value;
    return absl::OkStatus();
  }
  if (name == "data_interface") {
    o.data_interfaces = absl::StrSplit(value, ',', absl::SkipEmpty());
    if (o.data_interfaces.empty()) return UsageError(kProgram, "--data_interface needs a name");
    return absl::OkStatus();
  }
  if (name == "launcher_stdin") {
    if (value != "true" && value != "false") {
      return UsageError(kProgram, "--launcher_stdin must be true or false");
    }
    o.launcher_stdin = value == "true";
    return absl::OkStatus();
  }
  if (name == "socket_dir") return SetString(name, value, &o.socket_dir);
  if (name == "grace_period") return ParseDuration(name, value, false, &o.grace_period);
  if (name == "liveness_timeout") return ParseDuration(name, value, true, &o.liveness_timeout);
  if (name == "reconnect_timeout") return ParseDuration(name, value, false, &o.reconnect_timeout);
  if (name == "aggregation_window") return ParseDuration(name, value, false, &o.aggregation_window);
  if (name == "attach_timeout") return ParseDuration(name, value, true, &o.attach_timeout);
  if (name == "connect_timeout") return ParseDuration(name, value, true, &o.connect_timeout);
  if (name == "stop_with_parent") {
    if (value != "true" && value != "false") {
      return UsageError(kProgram, "--stop_with_parent must be true or false");
    }
    o.stop_with_parent = value == "true";
    return absl::OkStatus();
  }
  if (name == "log_level") return SetString(name, value, &o.log_level);
  if (name == "metrics_listen") {
    const size_t colon = value.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(value.substr(colon + 1), &port) || port < 0 || port > 65535) {
      return UsageError(kProgram,
                        absl::StrCat("--metrics_listen must be HOST:PORT, got '", value, "'"));
    }
    o.metrics_listen = value;
    return absl::OkStatus();
  }
  return UsageError(kProgram, absl::StrCat("unknown option '", name, "'"));
}

}  // namespace

absl::StatusOr<AgentOptions> ParseAgentArgs(const std::vector<std::string>& args) {
  AgentOptions options;
  if (absl::Status s = ParseCommandLineInto(args, kProgram, SetFlag, options); !s.ok()) return s;
  if (options.help) return options;
  if (options.coordinator.empty()) return UsageError(kProgram, "--coordinator is required");
  if (options.job.empty()) return UsageError(kProgram, "--job is required");
  if (options.nnodes == 0) return UsageError(kProgram, "--nnodes is required");
  if (options.nproc_per_node == 0) return UsageError(kProgram, "--nproc-per-node is required");
  const int ranks = options.nnodes * options.nproc_per_node;
  if (absl::Status s = CheckElasticFlags(kProgram, {"--min_np", "--max_np", "--max_restarts"},
                                         options.min_np, options.max_np, options.max_restarts,
                                         ranks, absl::StrCat("the job's ", ranks, " ranks"));
      !s.ok()) {
    return s;
  }
  if (options.node_rank >= options.nnodes) {
    return UsageError(kProgram, absl::StrCat("--node_rank ", options.node_rank,
                                             " is not below --nnodes ", options.nnodes));
  }
  if (static_cast<int64_t>(options.nnodes) * options.nproc_per_node > (1 << 16)) {
    return UsageError(kProgram, "--nnodes x --nproc-per-node must be at most 65536 ranks");
  }
  if (!options.data_host.empty() && !options.data_interfaces.empty()) {
    return UsageError(kProgram,
                      "--data_host and --data_interface both name the data plane's "
                      "address: give one");
  }
  if (options.host.empty()) options.host = HostName();
  return options;
}

}  // namespace troika::agent
