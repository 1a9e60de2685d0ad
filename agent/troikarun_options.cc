#include "agent/troikarun_options.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace troika::agent {

const char kTroikarunUsage[] =
    R"(troikarun: starts N ranks of a Troika training program on this machine and supervises them.

Usage: troikarun -np N [options] -- COMMAND [ARGS...]

Options:
  -np N, --np N            number of ranks to start (required; 1 to 1024)
  --coordinator HOST:PORT  the Troika coordinator the ranks join; default: a coordinator
                           started inside troikarun on 127.0.0.1 (a free port), which lives
                           as long as troikarun
  --job NAME               job name; default troikarun-<pid of troikarun>
  --grace_period DURATION  time between SIGTERM and SIGKILL when ranks are stopped, e.g. 5s,
                           500ms, 1m (a plain number means seconds); default 5s
  --log_level LEVEL        troikarun's own log level: debug, info, warning or error;
                           default warning
  -h, --help               print this help and exit
Options may also be written -name=value or --name=value. Everything after "--" is the rank
command, passed on untouched; COMMAND is looked up in PATH unless it contains a "/".

Each rank runs COMMAND with troikarun's environment plus:
  TROIKA_COORDINATOR  the coordinator address
  TROIKA_JOB          the job name
  TROIKA_RANK         the rank, 0 .. N-1
  TROIKA_SIZE         N
  TROIKA_LOCAL_RANK   equal to TROIKA_RANK: every rank runs on this machine (informational)
  TROIKA_HOST         this machine's host name (gethostname(), or "localhost")
Ranks read stdin from /dev/null. Every line a rank writes is printed with a "[RANK] " prefix,
its stdout on troikarun's stdout and its stderr on troikarun's stderr; an unfinished last line
is printed, with a newline added, when the rank exits. Each rank leads its own process group,
and signals from troikarun reach the whole group.

Supervision: when a rank exits with a non-zero code or is killed by a signal, troikarun reports
it at once ("troikarun: rank 2 exited with code 1"), sends SIGTERM to the other ranks, and
SIGKILL to those still running after the grace period; it then prints a one-line summary
naming the rank. SIGINT or SIGTERM sent to troikarun is forwarded to every rank, with the same
SIGKILL after the grace period; a second SIGINT or SIGTERM sends SIGKILL at once.

Exit status:
  0      every rank exited with code 0
  C      the first rank to fail exited with code C (1..255)
  128+S  the first rank to fail was killed by signal S, or troikarun itself received
         signal S before any rank failed (SIGINT: 130, SIGTERM: 143)
  1      troikarun itself failed (e.g. the embedded coordinator could not start)
  2      invalid command line
  126    COMMAND could not be executed
  127    COMMAND was not found

Example:
  troikarun -np 4 -- ./troika-example-train --steps 100
)";

namespace {

constexpr char kUsageHint[] = " (see troikarun --help)";

absl::Status UsageError(const std::string& message) {
  return absl::InvalidArgumentError(message + kUsageHint);
}

absl::StatusOr<absl::Duration> ParseGracePeriod(const std::string& text) {
  absl::Duration duration;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &duration)) {
    return UsageError(
        absl::StrCat("--grace_period: '", text, "' is not a duration such as 5s, 500ms or 1m"));
  }
  if (duration < absl::ZeroDuration() || duration == absl::InfiniteDuration()) {
    return UsageError(absl::StrCat("--grace_period must be finite and >= 0, got '", text, "'"));
  }
  return duration;
}

// "host:port" ("[v6]:port" too), or "unix:/path".
bool IsCoordinatorAddress(const std::string& value) {
  if (value.rfind("unix:", 0) == 0) return value.size() > 5;
  const size_t colon = value.rfind(':');
  int port = 0;
  return colon != std::string::npos && colon > 0 &&
         absl::SimpleAtoi(value.substr(colon + 1), &port) && port > 0 && port < 65536;
}

// Applies flag `name` = `value` to `options`.
absl::Status SetFlag(const std::string& name, const std::string& value, TroikarunOptions& options) {
  if (name == "np") {
    int np = 0;
    if (!absl::SimpleAtoi(value, &np)) {
      return UsageError(absl::StrCat("-np: '", value, "' is not a number"));
    }
    if (np < 1 || np > kMaxRanks) {
      return UsageError(absl::StrCat("-np must be between 1 and ", kMaxRanks, ", got ", np));
    }
    options.np = np;
  } else if (name == "coordinator") {
    if (!IsCoordinatorAddress(value)) {
      return UsageError(absl::StrCat("--coordinator must be HOST:PORT, got '", value, "'"));
    }
    options.coordinator = value;
  } else if (name == "job") {
    if (value.empty()) return UsageError("--job must not be empty");
    options.job = value;
  } else if (name == "grace_period") {
    absl::StatusOr<absl::Duration> grace = ParseGracePeriod(value);
    if (!grace.ok()) return grace.status();
    options.grace_period = *grace;
  } else if (name == "log_level") {
    options.log_level = value;
  } else {
    return UsageError(absl::StrCat("unknown option '", name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TroikarunOptions> ParseTroikarunArgs(const std::vector<std::string>& args) {
  TroikarunOptions options;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      return UsageError(absl::StrCat("unexpected argument '", arg,
                                     "': the command goes after \"--\", as in "
                                     "troikarun -np 2 -- ",
                                     arg));
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "help" || name == "h") {
      options.help = true;
      return options;
    }
    if (!value.has_value()) {
      if (i + 1 >= args.size() || args[i + 1] == "--") {
        return UsageError(absl::StrCat("option '", arg, "' needs a value"));
      }
      value = args[++i];
    }
    if (absl::Status status = SetFlag(name, *value, options); !status.ok()) return status;
  }
  if (i == args.size()) {
    return UsageError("missing \"--\" before the command: troikarun -np N [options] -- COMMAND");
  }
  options.command.assign(args.begin() + i + 1, args.end());
  if (options.command.empty()) return UsageError("no command after \"--\"");
  if (options.np == 0) return UsageError("-np N is required");
  return options;
}

std::vector<std::string> MergeEnvironment(const std::vector<std::string>& base,
                                          const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (const std::string& entry : base) {
    const std::string name = entry.substr(0, entry.find('='));
    if (overrides.count(name) == 0) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

}  // namespace troika::agent
