#include "agent/launcher/troikarun_options.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace troika::agent {

const char kTroikarunUsage[] =
    R"(troikarun: starts N ranks of a Troika training program on this machine and supervises them.

Usage: troikarun -np N [options] -- COMMAND [ARGS...]

Options:
  -np N, --np N            number of ranks to start (required; 1 to 1024)
  --nproc-per-node P       ranks per troika-agent: troikarun starts N/P agents on this machine
                           (node ranks 0 .. N/P-1), each starting and relaying P ranks, as
                           N/P nodes of P ranks would run on a cluster; N must be a multiple
                           of P; default N (one agent)
  --min-np M               an elastic job (docs/elastic.md): when ranks are lost (exit
                           non-zero, killed, their agent killed) and at least M remain, the
                           job goes on with the survivors, renumbered (its next generation),
                           instead of aborting; ranks use troika::elastic::Run to carry on
                           from their last commit; troikarun exits 0 if the job finished
                           (its last generation's ranks all shut down and exited 0);
                           default 0: not elastic (any lost rank or agent ends the job)
  --max-np X               an elastic job's maximum: troika-agents started for the job while
                           it runs (new or returning nodes, docs/elastic.md) are admitted at
                           its next commit, up to X ranks; default -np
  --max-restarts R         an elastic job: each agent starts a rank that failed again, up to
                           R times; it rejoins at the job's next commit; default 0
  --coordinator HOST:PORT  the Troika coordinator the agents join (unix:PATH too); default: a
                           coordinator started inside troikarun on 127.0.0.1 (a free port),
                           which lives as long as troikarun, in plaintext; the agents reach
                           a given one as TROIKA_TLS_CA, TROIKA_TLS_CERT, TROIKA_TLS_KEY or
                           TROIKA_PLAINTEXT=1 in troikarun's environment say
  --fusion-threshold-mb MB  the embedded coordinator's fusion threshold: allreduces are fused
                           into one transfer up to MB MiB (0: no fusion); default
                           $HOROVOD_FUSION_THRESHOLD (bytes) if set, else 64
  --cycle-time-ms MS       the embedded coordinator's cycle time: how long a rank holds its
                           requests to send those submitted together in one message (a
                           wait or poll sends them at once), and a ready allreduce may wait
                           for others still being submitted, to fuse with them (0: neither);
                           default $HOROVOD_CYCLE_TIME (ms) if set, else 1
                           (both as horovodrun's; with --coordinator, give them to that
                           coordinator: troika-coordinator --help)
  --schedules on|off       steady-state schedules in the embedded coordinator: once the job's
                           steps repeat, ranks run them without a coordinator round trip
                           per collective until one deviates (docs/protocol.md,
                           Schedules); default on (off: every collective negotiated,
                           as Horovod does)
  --timeline FILE          the embedded coordinator writes the job's timeline (a Chrome
                           trace of every tensor's negotiation and every rank's phases,
                           docs/timeline.md) to FILE for the whole run; default
                           $HOROVOD_TIMELINE if set (as horovodrun; DYNAMIC, horovodrun's
                           word for timelines started later, writes none), else none
  --job NAME               job name; default troikarun-<pid of troikarun>
  --attach_timeout DURATION  how long every rank of the job has to attach (its agent started,
                           the other nodes reached); an elastic job goes on without ranks that
                           did not attach in time if at least --min-np did, any other job
                           fails; default 60s
  --grace_period DURATION  time between SIGTERM and SIGKILL when ranks are stopped, e.g. 5s,
                           500ms, 1m (a plain number means seconds); default 5s
  --log_level LEVEL        log level of troikarun, its coordinator and its agents: debug,
                           info, warning or error; default warning
  -h, --help               print this help and exit
Options may also be written -name=value or --name=value. Everything after "--" is the rank
command, passed on untouched; COMMAND is looked up in PATH unless it contains a "/".

troikarun runs troika-agent (from the directory troikarun itself is in) once per node rank
k with --node_rank k; the agent starts ranks k*P .. k*P+P-1 and relays their control traffic
to the coordinator on one stream (see troika-agent --help and docs/agent.md). Each rank runs
COMMAND with troikarun's environment plus:
  TROIKA_COORDINATOR  its agent's Unix socket, unix:/tmp/troika-agent-<pid>.sock
  TROIKA_JOB          the job name
  TROIKA_RANK         the rank, 0 .. N-1
  TROIKA_SIZE         N
  TROIKA_LOCAL_RANK   the rank's index within its agent, 0 .. P-1
  TROIKA_LOCAL_SIZE   P
  TROIKA_DEVICE       equal to TROIKA_LOCAL_RANK: the local device (GPU) to use
  TROIKA_HOST         this machine's host name (gethostname(), or "localhost")
and what horovodrun --gloo sets, with each agent as a node:
  HOROVOD_RANK, HOROVOD_SIZE              TROIKA_RANK, TROIKA_SIZE
  HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE  TROIKA_LOCAL_RANK, TROIKA_LOCAL_SIZE
  HOROVOD_CROSS_RANK  the agent's node rank k, 0 .. N/P-1
  HOROVOD_CROSS_SIZE  N/P
  HOROVOD_HOSTNAME    TROIKA_HOST
(With the default P = N: 0 .. N-1, N, 0 and 1, as horovodrun -np N on one host. With P < N
the agents stand for nodes of one host: the local and cross numbers are theirs, while
hvd.local_rank() and hvd.cross_rank() group the ranks by host name: 0 .. N-1 and 0.)
Ranks read stdin from /dev/null. Every line a rank writes is printed with a "[RANK] " prefix,
its stdout on troikarun's stdout and its stderr on troikarun's stderr; an unfinished last line
is printed, with a newline added, when the rank exits. Each rank leads its own process group,
and signals reach the whole group.

Supervision: when a rank exits with a non-zero code or is killed by a signal, its agent
reports it at once ("troika-agent: rank 2 exited with code 1; stopping ..."), and the
coordinator aborts the job on every agent: each sends SIGTERM to its ranks, and SIGKILL to
those still running after the grace period, and prints why ("troika-agent: job aborted:
rank 2 on HOST exited with code 1"). troikarun then prints a one-line summary naming the
cause. SIGINT or SIGTERM sent to troikarun is forwarded to every agent, which forwards it to
its ranks, with the same SIGKILL after the grace period; a second SIGINT or SIGTERM sends
SIGKILL at once. Ranks exiting 0 are never a failure. Ranks that shut down may join the
job again in the same processes (init after shutdown, as with horovodrun --gloo; not with
--min-np): it forms anew once every rank joined again (docs/agent.md).

Exit status:
  0      every rank exited with code 0
  C      the rank whose failure aborted the job exited with code C (1..255)
  128+S  that rank was killed by signal S, or troikarun itself received signal S before any
         rank failed (SIGINT: 130, SIGTERM: 143)
  1      troikarun or an agent failed (e.g. the embedded coordinator could not start, the
         coordinator was lost), or the job was aborted for a reason other than a rank's exit
  2      invalid command line
  126    COMMAND could not be executed
  127    COMMAND was not found

Examples:
  troikarun -np 4 -- ./troika-example-train --steps 100
  troikarun -np 4 --nproc-per-node 2 -- ./troika-example-train --steps 100
)";

namespace {

constexpr char kProgram[] = "troikarun";

absl::Status ParseCount(const std::string& flag, const std::string& value, int* out) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    return UsageError(kProgram, absl::StrCat(flag, ": '", value, "' is not a number"));
  }
  if (n < 1 || n > kMaxRanks) {
    return UsageError(kProgram,
                      absl::StrCat(flag, " must be between 1 and ", kMaxRanks, ", got ", n));
  }
  *out = n;
  return absl::OkStatus();
}

// A fusion threshold in units of `unit` bytes (MiB for the flag, bytes for horovodrun's
// variable), 0 to 1 TiB.
absl::Status ParseFusionThreshold(const std::string& what, const std::string& value, double unit,
                                  TroikarunOptions& options) {
  double n = 0;
  if (!absl::SimpleAtod(value, &n) || !(n >= 0) || n * unit > double{1 << 20} * (1 << 20)) {
    return UsageError(kProgram,
                      absl::StrCat(what, ": '", value, "' is not a size ",
                                   unit == 1 ? "in bytes" : "in MiB", " between 0 and 1 TiB"));
  }
  options.fusion_threshold_bytes = static_cast<int64_t>(n * unit);
  return absl::OkStatus();
}

absl::Status ParseCycleTime(const std::string& what, const std::string& value,
                            TroikarunOptions& options) {
  double ms = 0;
  if (!absl::SimpleAtod(value, &ms) || !(ms >= 0) || ms > 60'000) {
    return UsageError(
        kProgram, absl::StrCat(what, ": '", value, "' is not a time in ms between 0 and 60000"));
  }
  options.cycle_time = absl::Microseconds(std::llround(ms * 1000));
  return absl::OkStatus();
}

// Applies flag `name` = `value` to `options`.
absl::Status SetFlag(const std::string& name, const std::string& value, TroikarunOptions& options) {
  if (name == "np") return ParseCount("-np", value, &options.np);
  if (name == "nproc_per_node")
    return ParseCount("--nproc-per-node", value, &options.nproc_per_node);
  if (name == "min_np") return ParseCount("--min-np", value, &options.min_np);
  if (name == "max_np") return ParseCount("--max-np", value, &options.max_np);
  if (name == "max_restarts") return ParseCount("--max-restarts", value, &options.max_restarts);
  if (name == "coordinator") {
    if (absl::Status s = CheckCoordinatorFlag(kProgram, value); !s.ok()) return s;
    options.coordinator = value;
  } else if (name == "job") {
    if (value.empty()) return UsageError(kProgram, "--job must not be empty");
    options.job = value;
  } else if (name == "grace_period") {
    absl::StatusOr<absl::Duration> grace = ParseDurationFlag(kProgram, "grace_period", value);
    if (!grace.ok()) return grace.status();
    options.grace_period = *grace;
  } else if (name == "attach_timeout") {
    absl::StatusOr<absl::Duration> timeout =
        ParseDurationFlag(kProgram, "attach_timeout", value, true);
    if (!timeout.ok()) return timeout.status();
    options.attach_timeout = *timeout;
  } else if (name == "fusion_threshold_mb") {
    return ParseFusionThreshold("--fusion-threshold-mb", value, 1 << 20, options);
  } else if (name == "cycle_time_ms") {
    return ParseCycleTime("--cycle-time-ms", value, options);
  } else if (name == "schedules") {
    if (value != "on" && value != "off") {
      return UsageError(kProgram, absl::StrCat("--schedules: '", value, "' is not on or off"));
    }
    options.schedules = value == "on";
  } else if (name == "timeline") {
    if (value.empty()) return UsageError(kProgram, "--timeline needs a file");
    options.timeline = value;
  } else if (name == "log_level") {
    options.log_level = value;
  } else {
    return UsageError(kProgram, absl::StrCat("unknown option '", name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

HorovodEnvironment HorovodEnvironment::FromProcess() {
  auto get = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  return {get("HOROVOD_TIMELINE"), get("HOROVOD_FUSION_THRESHOLD"), get("HOROVOD_CYCLE_TIME")};
}

absl::StatusOr<TroikarunOptions> ParseTroikarunArgs(const std::vector<std::string>& args,
                                                    const HorovodEnvironment& horovod) {
  TroikarunOptions options;
  // horovodrun's variables first: the flags override them. HOROVOD_TIMELINE=DYNAMIC names no
  // file: Horovod's ranks start such timelines later (Troika's: troikactl timeline start).
  if (horovod.timeline != "DYNAMIC") options.timeline = horovod.timeline;
  if (!horovod.fusion_threshold.empty()) {
    absl::Status s =
        ParseFusionThreshold("$HOROVOD_FUSION_THRESHOLD", horovod.fusion_threshold, 1, options);
    if (!s.ok()) return s;
  }
  if (!horovod.cycle_time.empty()) {
    absl::Status s = ParseCycleTime("$HOROVOD_CYCLE_TIME", horovod.cycle_time, options);
    if (!s.ok()) return s;
  }
  if (absl::Status s = ParseCommandLineInto(args, kProgram, SetFlag, options); !s.ok()) return s;
  if (options.help) return options;
  if (options.np == 0) return UsageError(kProgram, "-np N is required");
  if (!options.coordinator.empty() &&
      (options.fusion_threshold_bytes.has_value() || options.cycle_time.has_value())) {
    return UsageError(kProgram,
                      "--fusion-threshold-mb and --cycle-time-ms (or $HOROVOD_FUSION_THRESHOLD "
                      "and $HOROVOD_CYCLE_TIME) set troikarun's embedded "
                      "coordinator; with --coordinator, give them to that coordinator "
                      "(troika-coordinator --fusion_threshold_bytes, --cycle_time)");
  }
  if (!options.coordinator.empty() && options.schedules.has_value()) {
    return UsageError(kProgram,
                      "--schedules sets troikarun's embedded coordinator; with --coordinator, "
                      "start that coordinator with --schedules=true or false");
  }
  if (!options.coordinator.empty() && !options.timeline.empty()) {
    return UsageError(kProgram,
                      "--timeline (or $HOROVOD_TIMELINE) is written by troikarun's embedded "
                      "coordinator; with --coordinator, start one with `troikactl timeline "
                      "start JOB FILE`");
  }
  if (absl::Status s = CheckElasticFlags(kProgram, {"--min-np", "--max-np", "--max-restarts"},
                                         options.min_np, options.max_np, options.max_restarts,
                                         options.np, absl::StrCat("-np ", options.np));
      !s.ok()) {
    return s;
  }
  if (options.np % options.RanksPerAgent() != 0) {
    return UsageError(kProgram, absl::StrCat("-np ", options.np, " is not a multiple of ",
                                             "--nproc-per-node ", options.nproc_per_node));
  }
  return options;
}

}  // namespace troika::agent
