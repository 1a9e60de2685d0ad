#pragma once
// troika-agent's command line (hand-parsed, see command_line.h).
//
// Pure functions; thread-safe.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troika::agent {

struct AgentOptions {
  // --coordinator HOST:PORT (or unix:PATH). Required.
  std::string coordinator;
  // Transport security toward a HOST:PORT coordinator: --tls_ca PEM (the CA of the
  // coordinator's certificate) and, for mutual TLS, --tls_cert / --tls_key PEM; or
  // --plaintext true. Defaults: TROIKA_TLS_CA, TROIKA_TLS_CERT, TROIKA_TLS_KEY,
  // TROIKA_PLAINTEXT from the environment (set by the caller, see agent_main.cc).
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool plaintext = false;
  // --job_token_file PATH: the job's token (docs/security.md). Default: TROIKA_JOB_TOKEN or
  // the file TROIKA_JOB_TOKEN_FILE from the environment. `job_token` is what agent_main read.
  std::string job_token_file;
  std::string job_token;
  // --job NAME. Required; every agent of the job gives the same.
  std::string job;
  // --nnodes N: agents (nodes) in the job. Required, >= 1.
  int nnodes = 0;
  // --nproc-per-node P: ranks this agent starts. Required, >= 1. The job has N * P ranks.
  int nproc_per_node = 0;
  // --min_np M: an elastic job (docs/elastic.md) that goes on without lost ranks while at
  // least M remain. Default 0: not elastic (a lost rank aborts the job).
  int min_np = 0;
  // --max_np X: an elastic job's maximum: nodes registering while it runs are admitted at a
  // commit up to X ranks. Default 0: the job's size.
  int max_np = 0;
  // --max_restarts N: an elastic job's agent starts a failed rank again, up to N times in
  // all; it rejoins at the job's next commit. Default 0.
  int max_restarts = 0;
  // --node_rank K: which block of ranks (K*P .. K*P+P-1) this node runs. Default -1: the
  // lowest free block (or this host's block, if the host registered before).
  int node_rank = -1;
  // --host NAME: this node's name, used to group ranks into local ranks. Default: gethostname().
  std::string host;
  // --data_host ADDR: the address ranks give their data-plane peers (TROIKA_DATA_HOST).
  // Default empty: the client library's choice.
  std::string data_host;
  // --data_interface NAMES: the data plane's address is the IPv4 address of the first of these
  // interfaces (comma-separated) this host has up, resolved at start. Not with --data_host.
  std::vector<std::string> data_interfaces;
  // --socket_dir DIR: where the ranks' Unix socket goes. Default /tmp.
  std::string socket_dir = "/tmp";
  // --grace_period: time between SIGTERM and SIGKILL when ranks are stopped. Default 5 s.
  absl::Duration grace_period = absl::Seconds(5);
  // --liveness_timeout: a coordinator silent this long is gone. Default 10 s.
  absl::Duration liveness_timeout = absl::Seconds(10);
  // --reconnect_timeout: how long to try to reach a coordinator that is gone (restarting)
  // before stopping the ranks. 0: stop them at once. Default 60 s.
  absl::Duration reconnect_timeout = absl::Seconds(60);
  // --aggregation_window: how long a tensor waits for the node's other ranks. Default 2 ms.
  absl::Duration aggregation_window = absl::Milliseconds(2);
  // --attach_timeout: how long registering and attaching wait for the coordinator and the
  // other nodes. Default 60 s (the client library's default).
  absl::Duration attach_timeout = absl::Seconds(60);
  // --connect_timeout: how long the agent waits at start for its first connection to the
  // coordinator (one that is still starting, or not there at all) before it fails naming the
  // address and the cause; at most --attach_timeout. A malformed --coordinator, a missing
  // socket or an unresolvable host fail at once. Reconnections after the coordinator was lost
  // keep --reconnect_timeout. Default 10 s (the client library's default).
  absl::Duration connect_timeout = absl::Seconds(10);
  // --stop_with_parent: stop (as on SIGTERM) when the process that started the agent exits.
  // Default false; troikarun sets it.
  bool stop_with_parent = false;
  // --launcher_stdin: troikarun started this agent over ssh: it reads the job's environment
  // from stdin first (environment_block.h), and stops (as on SIGTERM) when stdin ends.
  bool launcher_stdin = false;
  // --metrics_listen HOST:PORT: serve /metrics, /healthz and /readyz over HTTP there (port
  // 0: any). Default empty: off.
  std::string metrics_listen;
  // --log_level: debug, info, warning or error. Default "warning".
  std::string log_level = "warning";
  // --help / -h: print kAgentUsage and exit 0; nothing else is validated.
  bool help = false;
  // The rank command: everything after "--". Not empty.
  std::vector<std::string> command;
};

inline constexpr int kMaxRanksPerNode = 1024;

// The complete --help text.
extern const char kAgentUsage[];

// Parses `args` (argv without argv[0]). INVALID_ARGUMENT with a message naming the problem.
absl::StatusOr<AgentOptions> ParseAgentArgs(const std::vector<std::string>& args);

}  // namespace troika::agent
