#include "agent/cli/command_line.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/address.h"

extern char** environ;

namespace troika::agent {

absl::Status UsageError(const std::string& program, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(message, " (see ", program, " --help)"));
}

std::pair<std::string, std::string> JoinedValues(const std::string& value) {
  const size_t separator = value.find(kValueSeparator);
  if (separator == std::string::npos) return {value, ""};
  return {value.substr(0, separator), value.substr(separator + 1)};
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const std::string& program, const FlagSetter& set,
                                             const FlagSyntax& syntax) {
  CommandLine line;
  bool standalone = false;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (syntax.bare_command) break;
      return UsageError(program, absl::StrCat("unexpected argument '", arg,
                                              "': the command goes after \"--\", as in ", program,
                                              " [options] -- ", arg));
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "help" || name == "h") {
      line.help = true;
      return line;
    }
    std::replace(name.begin(), name.end(), '-', '_');
    // A value that is the next argument; "--" ends the options, so it is none.
    auto next = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size() || args[i + 1] == "--") return std::nullopt;
      return args[++i];
    };
    if (syntax.switches.count(name) > 0) {
      if (value.has_value()) {
        return UsageError(
            program, absl::StrCat("option '", arg.substr(0, arg.find('=')), "' takes no value"));
      }
      value = "";
      standalone = standalone || syntax.standalone.count(name) > 0;
    } else if (syntax.pairs.count(name) > 0) {
      std::optional<std::string> first = value.has_value() ? std::nullopt : next();
      std::optional<std::string> second = first.has_value() ? next() : std::nullopt;
      if (!second.has_value()) {
        return UsageError(program, absl::StrCat("option '", arg.substr(0, arg.find('=')),
                                                "' needs two values, as in ",
                                                arg.substr(0, arg.find('=')), " A B"));
      }
      value = absl::StrCat(*first, std::string(1, kValueSeparator), *second);
    } else if (!value.has_value()) {
      value = next();
      if (!value.has_value()) {
        return UsageError(program, absl::StrCat("option '", arg, "' needs a value"));
      }
    }
    if (absl::Status status = set(name, *value); !status.ok()) return status;
  }
  const bool dashes = i < args.size() && args[i] == "--";
  line.command.assign(args.begin() + i + (dashes ? 1 : 0), args.end());
  if (line.command.empty() && standalone) return line;
  if (!dashes && !syntax.bare_command) {
    return UsageError(program, absl::StrCat("missing \"--\" before the command: ", program,
                                            " [options] -- COMMAND"));
  }
  if (line.command.empty()) {
    return UsageError(program, syntax.bare_command
                                   ? absl::StrCat("no command: ", program, " [options] COMMAND")
                                   : "no command after \"--\"");
  }
  return line;
}

absl::Status CheckElasticFlags(const std::string& program, const ElasticFlagNames& names,
                               int min_np, int max_np, int max_restarts, int ranks,
                               const std::string& ranks_named) {
  if (min_np > ranks) {
    return UsageError(program, absl::StrCat(names.min_np, " ", min_np, " is above ", ranks_named));
  }
  if (max_np > 0 && min_np == 0) {
    return UsageError(program,
                      absl::StrCat(names.max_np, " needs ", names.min_np, " (an elastic job)"));
  }
  if (max_restarts > 0 && min_np == 0) {
    return UsageError(
        program, absl::StrCat(names.max_restarts, " needs ", names.min_np, " (an elastic job)"));
  }
  if (max_np > 0 && max_np < ranks) {
    return UsageError(program, absl::StrCat(names.max_np, " ", max_np, " is below ", ranks_named));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& program,
                                                 const std::string& flag, const std::string& text,
                                                 bool positive) {
  absl::Duration duration;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &duration)) {
    return UsageError(program, absl::StrCat("--", flag, ": '", text,
                                            "' is not a duration such as 5s, 500ms or 1m"));
  }
  if (duration < absl::ZeroDuration() || duration == absl::InfiniteDuration() ||
      (positive && duration == absl::ZeroDuration())) {
    return UsageError(program, absl::StrCat("--", flag, " must be finite and ",
                                            positive ? "> 0" : ">= 0", ", got '", text, "'"));
  }
  return duration;
}

absl::Status CheckCoordinatorFlag(const std::string& program, const std::string& value) {
  absl::StatusOr<CoordinatorAddress> address = ParseCoordinatorAddress(value);
  if (!address.ok()) {
    return UsageError(program, absl::StrCat("--coordinator: ", address.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFlagFile(const std::string& program, const std::string& flag,
                                         const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string text;
  ssize_t n = fd < 0 ? -1 : 0;
  char buffer[4096];
  while (fd >= 0 && (n = read(fd, buffer, sizeof(buffer))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  const int error = errno;
  if (fd >= 0) close(fd);
  if (n < 0) {
    return UsageError(program,
                      absl::StrCat(flag, " ", path, ": cannot read it: ", strerror(error)));
  }
  return text;
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

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** var = environ; *var != nullptr; ++var) env.emplace_back(*var);
  return env;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace troika::agent
