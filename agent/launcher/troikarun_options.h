#pragma once
// troikarun's command line (hand-parsed, see command_line.h): its own flags and every one of
// horovodrun's, each taken with its meaning or refused saying why (docs/horovodrun.md), and
// horovodrun's YAML --config-file.
//
// Pure functions, except that ParseTroikarunArgs reads the files --hostfile and --config-file
// name; thread-safe.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/cli/command_line.h"

namespace troika::agent {

// A host of a multi-host job and how many ranks it may run: -H host:slots, or a hostfile's
// "host slots=N" line.
struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// horovodrun's autotune flags, for the embedded coordinator's autotuner (docs/autotune.md).
struct AutotuneFlags {
  // --autotune: tune the fusion threshold and the cycle time while the job runs, each one
  // that was given (flag or $HOROVOD_*) held at its value. Default off (--no-autotune).
  bool enabled = false;
  // --autotune-log-file FILE: the CSV of every configuration tried (Troika's columns,
  // docs/autotune.md). Empty (default): none.
  std::string log_file;
  // --autotune-warmup-samples (>= 0; unset: 3), --autotune-steps-per-sample (>= 1; unset: 10),
  // --autotune-bayes-opt-max-samples (>= 0, the configurations tried; unset: 20).
  std::optional<int> warmup_samples;
  std::optional<int> steps_per_sample;
  std::optional<int> max_samples;
};

// horovodrun's stall-check flags, for the embedded coordinator's stall inspector.
struct StallCheckFlags {
  // --no-stall-check: neither warnings nor shutdown. Default false (--stall-check).
  bool disabled = false;
  // --stall-check-warning-time-seconds S: a tensor some ranks submitted and others not for S
  // seconds is reported, naming the missing ranks (0: never). Unset: 60 s.
  std::optional<absl::Duration> warning_time;
  // --stall-check-shutdown-time-seconds S: such a tensor aborts the job after S seconds, if S
  // is above the warning time (as horovodrun). Unset: never.
  std::optional<absl::Duration> shutdown_time;
};

struct TroikarunOptions {
  // Number of ranks to start: -np N. Required, 1..kMaxRanks.
  int np = 0;
  // Ranks per troika-agent: --nproc-per-node P. 0 (default): np, one agent. np must be a
  // multiple of it; troikarun starts np / P agents.
  int nproc_per_node = 0;
  // --min-np M: an elastic job that goes on without lost ranks while at least M remain
  // (docs/elastic.md). 0 (default): not elastic; with --host-discovery-script: np (as
  // horovodrun).
  int min_np = 0;
  // --max-np X: an elastic job's maximum: agents registering while it runs (started by hand
  // with troika-agent) are admitted at a commit up to X ranks. 0 (default): np; with
  // --host-discovery-script: kMaxRanks (horovodrun's "unbounded": as many as the hosts have).
  int max_np = 0;
  // --max-restarts R: each agent starts a failed rank again, up to R times (elastic jobs).
  int max_restarts = 0;
  // Coordinator to use: --coordinator HOST:PORT. Empty (default): start an embedded one on
  // 127.0.0.1 with a free port.
  std::string coordinator;
  // Job name: --job NAME. Empty (default): "troikarun-<pid>".
  std::string job;
  // Time between SIGTERM and SIGKILL when stopping ranks: --grace_period 5s. Default 5 s.
  absl::Duration grace_period = absl::Seconds(5);
  // The agents' --attach_timeout: how long every rank of the job has to attach. Default 60 s.
  absl::Duration attach_timeout = absl::Seconds(60);
  // troikarun's own log level (and the embedded coordinator's and the agents'): --log_level or
  // horovodrun's --log-level, any case; one of "debug", "info", "warning", "error" (Horovod's
  // TRACE reads as debug, FATAL as error). Default "warning".
  std::string log_level = "warning";
  // The embedded coordinator's fusion threshold (--fusion-threshold-mb, as horovodrun) and
  // cycle time (--cycle-time-ms); unset: the coordinator's defaults (64 MiB, 1 ms). Refused
  // with --coordinator (a coordinator of one's own is configured by its own flags), as is
  // --timeline.
  std::optional<int64_t> fusion_threshold_bytes;
  std::optional<absl::Duration> cycle_time;
  // --schedules on|off: whether the embedded coordinator publishes steady-state schedules.
  // Unset: on. Refused with --coordinator (that coordinator's own flag decides).
  std::optional<bool> schedules;
  // --timeline FILE: the embedded coordinator writes the job's timeline to FILE (relative to
  // troikarun's directory) for the whole run.
  std::string timeline;
  // Hosts (-H host1:slots,host2:slots or --hostfile FILE): troikarun starts one troika-agent
  // per host used, over ssh unless the host is this machine (docs/hosts.md). Empty (default):
  // every rank on this machine.
  std::vector<HostSlots> hosts;
  // ssh's port (-p/--ssh-port; 0: ssh's default) and identity file (-i/--ssh-identity-file;
  // empty: ssh's default).
  int ssh_port = 0;
  std::string ssh_identity_file;
  // --start-timeout SECONDS (horovodrun's; default $HOROVOD_START_TIMEOUT, else 30 s): how
  // long the hosts have to answer the reachability check.
  absl::Duration start_timeout = absl::Seconds(30);
  // -x NAME or -x NAME=VALUE (repeatable): variables set for every rank on every host, NAME
  // taking troikarun's value (troikarun forwards its whole environment to remote hosts as
  // horovodrun does; -x adds or overrides), as "NAME=VALUE" entries.
  std::vector<std::string> extra_env;
  // --network-interfaces NAMES (comma-separated; --network-interface, repeatable, and --nics
  // too, as horovodrun's): the interface(s) of the data plane on every host, each once, in the
  // order given. Empty: chosen among the interfaces all hosts share.
  std::vector<std::string> network_interfaces;
  // --output-filename DIR: every rank's stdout and stderr also go to DIR/rank.N/stdout and
  // DIR/rank.N/stderr (N zero-padded as horovodrun pads it; RankFileSink writes them).
  std::string output_filename;
  // Elastic across hosts: --host-discovery-script FILE (prints "host" or "host:slots" lines,
  // the hosts available now), --slots-per-host N (slots of a host printed without them;
  // default 1), --reset-limit N (the job fails at a reset once N happened, as horovodrun's: 0
  // fails it at its first; -1, the default: no limit) and
  // --blacklist-cooldown-range MIN MAX (seconds a failed host is left out, growing with each
  // failure; unset: for good).
  std::string host_discovery_script;
  int slots_per_host = 0;  // 0: not given (1)
  int reset_limit = -1;
  std::optional<std::pair<int, int>> blacklist_cooldown_range;
  // TLS of the embedded coordinator (docs/hosts.md, TLS): --tls-cert and --tls-key, its
  // certificate (naming the addresses the agents reach it at) and key; --tls-ca, the CA that
  // signed it, which every agent verifies it with (given to them as TROIKA_TLS_CA); and
  // --tls-client-ca, the CA of the client certificates it then requires (mutual TLS: the
  // agents present TROIKA_TLS_CERT and TROIKA_TLS_KEY from troikarun's environment). Empty:
  // plaintext, the job's token admitting agents and ranks.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::string tls_client_ca;
  // --verbose: troikarun says what it does (hosts checked, interface chosen, commands run).
  bool verbose = false;
  // The embedded coordinator's response cache: --cache-capacity N entries (0: no cache).
  // Unset: the coordinator's default, 1024. Refused with --coordinator, as are `autotune` and
  // `stall_check`.
  std::optional<int> cache_capacity;
  AutotuneFlags autotune;
  StallCheckFlags stall_check;
  // Variables that horovodrun's flags set for the ranks (--hierarchical-allreduce:
  // HOROVOD_HIERARCHICAL_ALLREDUCE=1, --gloo-timeout-seconds: TROIKA_DATA_TIMEOUT, --tcp:
  // NCCL_IB_DISABLE=1, --log-level: HOROVOD_LOG_LEVEL, ...; docs/horovodrun.md). troikarun sets
  // them in every rank's environment on every host, beneath -x's.
  std::map<std::string, std::string> rank_env;
  // --config-file FILE: horovodrun's YAML file, already applied to these options (flags given
  // on the command line win over it, as horovodrun's).
  std::string config_file;
  // -cb / --check-build: print what this build has (CheckBuildReport) and exit 0. -np and the
  // command are then not needed, and the flags are not checked against each other.
  bool check_build = false;
  // -v / --version: print VersionReport() (check_build.h) and exit 0, as -cb.
  bool version = false;
  // Notes for troikarun to print on stderr, each "troikarun: " + note, before it starts: flags
  // that do nothing here (as horovodrun, which ignores them), -x of a variable that is not set.
  std::vector<std::string> warnings;
  // --help / -h was given: print kTroikarunUsage and exit 0; nothing else is validated.
  bool help = false;
  // The rank command: from the first argument that is not an option or an option's value (as
  // horovodrun's), or everything after "--". Not empty unless help, check_build or version.
  std::vector<std::string> command;

  // P: nproc_per_node, or np when it is 0.
  int RanksPerAgent() const { return nproc_per_node > 0 ? nproc_per_node : np; }
};

inline constexpr int kMaxRanks = 1024;

// The complete --help text.
extern const char kTroikarunUsage[];

// horovodrun's environment variables, read as the defaults of troikarun's flags (empty:
// unset), and troikarun's whole environment, for -x NAME.
struct HorovodEnvironment {
  std::string timeline;          // HOROVOD_TIMELINE: --timeline
  std::string fusion_threshold;  // HOROVOD_FUSION_THRESHOLD, in bytes: --fusion-threshold-mb
  std::string cycle_time;        // HOROVOD_CYCLE_TIME, in ms: --cycle-time-ms
  std::string start_timeout;     // HOROVOD_START_TIMEOUT, in seconds: --start-timeout
  // HOROVOD_ELASTIC_TIMEOUT, in seconds: an elastic job's --attach_timeout (--elastic-timeout).
  std::string elastic_timeout;
  // The value of a variable of troikarun's environment, or nullopt where it is not set (-x
  // NAME). Null: none is set.
  std::function<std::optional<std::string>(const std::string& name)> getenv;
  static HorovodEnvironment FromProcess();
};

// Parses `args` (argv without argv[0]), with `horovod`'s values as defaults, then the
// --config-file (for what no flag set), then checks the flags against each other
// (option_checks.h). INVALID_ARGUMENT with a message naming the problem (unknown flag, no
// command, -np < 1, bad duration, a refused horovodrun flag and why, a hostfile's or config
// file's bad line, flags that do not go together, ...).
absl::StatusOr<TroikarunOptions> ParseTroikarunArgs(const std::vector<std::string>& args,
                                                    const HorovodEnvironment& horovod = {});

}  // namespace troika::agent
