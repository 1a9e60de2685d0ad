#pragma once
// troikarun's command line (hand-parsed, see command_line.h).
//
// Pure functions; thread-safe.

#include <cstdint>
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

struct TroikarunOptions {
  // Number of ranks to start: -np N. Required, 1..kMaxRanks.
  int np = 0;
  // Ranks per troika-agent: --nproc-per-node P. 0 (default): np, one agent. np must be a
  // multiple of it; troikarun starts np / P agents.
  int nproc_per_node = 0;
  // --min-np M: an elastic job that goes on without lost ranks while at least M remain
  // (docs/elastic.md). 0 (default): not elastic.
  int min_np = 0;
  // --max-np X: an elastic job's maximum: agents registering while it runs (started by hand
  // with troika-agent) are admitted at a commit up to X ranks. 0 (default): np.
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
  // troikarun's own log level (and the embedded coordinator's): --log_level. Default "warning".
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
  // -x NAME or -x NAME=VALUE (repeatable): variables set for every rank on every host, as
  // "NAME=VALUE" entries.
  std::vector<std::string> extra_env;
  // --network-interface NAMES: the data plane's interface(s) on every host. Empty: chosen
  // among the interfaces all hosts share.
  std::vector<std::string> network_interfaces;
  // --verbose: troikarun says what it does (hosts checked, interface chosen, commands run).
  bool verbose = false;
  // --help / -h was given: print kTroikarunUsage and exit 0; nothing else is validated.
  bool help = false;
  // The rank command: everything after "--". Not empty.
  std::vector<std::string> command;

  // P: nproc_per_node, or np when it is 0.
  int RanksPerAgent() const { return nproc_per_node > 0 ? nproc_per_node : np; }
};

inline constexpr int kMaxRanks = 1024;

// The complete --help text.
extern const char kTroikarunUsage[];

// horovodrun's environment variables, read as the defaults of troikarun's flags (empty:
// unset).
struct HorovodEnvironment {
  std::string timeline;          // HOROVOD_TIMELINE: --timeline
  std::string fusion_threshold;  // HOROVOD_FUSION_THRESHOLD, in bytes: --fusion-threshold-mb
  std::string cycle_time;        // HOROVOD_CYCLE_TIME, in ms: --cycle-time-ms
  static HorovodEnvironment FromProcess();
};

// Parses `args` (argv without argv[0]), with `horovod`'s values as defaults. INVALID_ARGUMENT with
// a message naming the problem (unknown flag, missing "--", -np < 1, bad duration, ...).
absl::StatusOr<TroikarunOptions> ParseTroikarunArgs(const std::vector<std::string>& args,
                                                    const HorovodEnvironment& horovod = {});

}  // namespace troika::agent
