#pragma once
// The hand-parsed command lines of troikarun and troika-agent: parsed by hand rather than with
// absl flags because everything after "--" is the rank command, passed on untouched, and absl
// would interpret the command's own "--flags" or reorder positional arguments.
//
// Pure functions; thread-safe.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troika::agent {

// Sets one option from its name (without dashes; "-" inside a name reads as "_", so
// --nproc-per-node is nproc_per_node) and its value.
using FlagSetter = std::function<absl::Status(const std::string& name, const std::string& value)>;

struct CommandLine {
  bool help = false;                 // -h, -help or --help was given (nothing else was parsed)
  std::vector<std::string> command;  // the command; not empty unless `help` or a standalone flag
};

// What a program's flags look like beyond the usual "--name value" (names as `set` gets them,
// e.g. "check_build"). The default is troika-agent's: every flag takes one value, and the
// command follows "--".
struct FlagSyntax {
  // Flags that take no value ("--verbose"): `set` gets "". "--verbose=x" is an error.
  std::set<std::string> switches;
  // Flags that take two values ("--blacklist-cooldown-range 60 300", as argparse's nargs=2):
  // `set` gets both joined by kValueSeparator (JoinedValues splits them). "--name=A" is an
  // error.
  std::set<std::string> pairs;
  // Switches that need no command ("--check-build"): with one of them given, the command may
  // be missing.
  std::set<std::string> standalone;
  // The first argument that is neither an option nor an option's value begins the command, as
  // horovodrun's (argparse's REMAINDER) does; "--" before the command is still accepted.
  // false: the command must follow "--".
  bool bare_command = false;
};

// Joins a pair flag's two values: NUL, which no command-line argument can hold.
inline constexpr char kValueSeparator = '\0';

// A pair flag's two values, as `set` gets them.
std::pair<std::string, std::string> JoinedValues(const std::string& value);

// Parses `args` (argv without argv[0]): options "-name value", "--name value", "-name=value"
// or "--name=value" (switches and pairs as `syntax` says), then "--", then the command (or,
// with `syntax.bare_command`, the command at the first argument that is not an option). Errors
// are INVALID_ARGUMENT and end with " (see PROGRAM --help)"; so should the errors `set` returns
// (use UsageError).
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const std::string& program, const FlagSetter& set,
                                             const FlagSyntax& syntax = {});

// ParseCommandLine into `options`, a program's options struct with `bool help` and
// `std::vector<std::string> command`, which it sets from the CommandLine; `set` applies each
// option to `options`. With `help` set, nothing else was parsed: callers return at once.
template <typename Options>
absl::Status ParseCommandLineInto(const std::vector<std::string>& args, const std::string& program,
                                  absl::Status (*set)(const std::string& name,
                                                      const std::string& value, Options& options),
                                  Options& options, const FlagSyntax& syntax = {}) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(
      args, program,
      [set, &options](const std::string& name, const std::string& value) {
        return set(name, value, options);
      },
      syntax);
  if (!line.ok()) return line.status();
  options.help = line->help;
  options.command = std::move(line->command);
  return absl::OkStatus();
}

// How a program spells its elastic-job flags in its messages: "--min_np" or "--min-np", ...
struct ElasticFlagNames {
  std::string min_np;
  std::string max_np;
  std::string max_restarts;
};

// An elastic job's flags checked against each other and the job's `ranks` (a value of 0: the
// flag was not given): min_np at most `ranks`; max_np and max_restarts only with min_np;
// max_np at least `ranks`. Usage errors name the flags as `names` spells them and the ranks as
// `ranks_named` says ("the job's 8 ranks", "-np 8").
absl::Status CheckElasticFlags(const std::string& program, const ElasticFlagNames& names,
                               int min_np, int max_np, int max_restarts, int ranks,
                               const std::string& ranks_named);

// INVALID_ARGUMENT: `message` + " (see PROGRAM --help)".
absl::Status UsageError(const std::string& program, const std::string& message);

// A duration such as "5s", "500ms", "1m"; a plain number means seconds. Must be finite and
// >= 0 (> 0 with `positive`). Errors name `flag`.
absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& program,
                                                 const std::string& flag, const std::string& text,
                                                 bool positive = false);

// --coordinator's value: an address common/address.h accepts ("host:port", "[v6]:port",
// "unix:/path", ...). Otherwise a usage error "--coordinator: coordinator address 'X' is
// invalid: WHAT (...)".
absl::Status CheckCoordinatorFlag(const std::string& program, const std::string& value);

// The contents of the file a flag names ("--hostfile", `path`). A usage error naming the flag
// and the file if it cannot be read: "--hostfile h.txt: cannot read it: No such file or
// directory".
absl::StatusOr<std::string> ReadFlagFile(const std::string& program, const std::string& flag,
                                         const std::string& path);

// The environment of rank processes: `base` ("NAME=value" entries, e.g. from environ) with
// every variable in `overrides` set, replacing an inherited value of the same name.
std::vector<std::string> MergeEnvironment(const std::vector<std::string>& base,
                                          const std::map<std::string, std::string>& overrides);

// The environment of this process, "NAME=value" entries.
std::vector<std::string> CurrentEnvironment();

// gethostname(), or "localhost".
std::string HostName();

}  // namespace troika::agent
