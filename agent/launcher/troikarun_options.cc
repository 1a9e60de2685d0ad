#include "agent/launcher/troikarun_options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "agent/launcher/config_file.h"
#include "agent/launcher/horovodrun_flags.h"
#include "agent/launcher/host_flags.h"
#include "agent/launcher/option_checks.h"

namespace troika::agent {
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

absl::Status ParseInt(const std::string& flag, const std::string& value, int min, int max,
                      int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
    return UsageError(kProgram, absl::StrCat(flag, ": '", value, "' is not a whole number from ",
                                             min, " to ", max));
  }
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

// A positive number of seconds (or a duration such as 1m), from `what` (a flag or a variable).
absl::Status ParseTimeout(const std::string& what, const std::string& value, absl::Duration* out) {
  double seconds = 0;
  absl::Duration duration;
  if (absl::SimpleAtod(value, &seconds) && std::isfinite(seconds) && seconds <= 1e9) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(value, &duration) || duration == absl::InfiniteDuration()) {
    duration = absl::ZeroDuration();
  }
  if (duration <= absl::ZeroDuration()) {
    return UsageError(kProgram, absl::StrCat(what, ": '", value,
                                             "' is not a positive number of "
                                             "seconds"));
  }
  *out = duration;
  return absl::OkStatus();
}

// horovodrun's --log-level (TRACE .. FATAL) or troikarun's --log_level, any case.
absl::Status SetLogLevel(const std::string& value, TroikarunOptions& options) {
  std::string level = absl::AsciiStrToLower(value);
  const std::string horovod = absl::AsciiStrToUpper(value);
  if (level == "trace") level = "debug";
  if (level == "fatal") level = "error";
  if (level != "debug" && level != "info" && level != "warning" && level != "error") {
    return UsageError(kProgram, absl::StrCat("--log-level: '", value,
                                             "' is not one of debug, "
                                             "info, warning, error (or horovodrun's TRACE .. "
                                             "FATAL)"));
  }
  options.log_level = level;
  options.rank_env["HOROVOD_LOG_LEVEL"] = horovod;  // as horovodrun sets it for its ranks
  return absl::OkStatus();
}

// -x NAME=VALUE, or -x NAME with troikarun's value of NAME.
absl::Status SetExtraVariable(const std::string& value, const HorovodEnvironment& env,
                              TroikarunOptions& options) {
  const std::string name = value.substr(0, value.find('='));
  const bool valid = !name.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(name[0])) &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
                     });
  if (!valid) {
    return UsageError(kProgram, absl::StrCat("-x: '", value,
                                             "' is not NAME or NAME=VALUE (a "
                                             "name is letters, digits and '_')"));
  }
  if (name.size() < value.size()) {
    options.extra_env.push_back(value);
    return absl::OkStatus();
  }
  std::optional<std::string> inherited = env.getenv ? env.getenv(name) : std::nullopt;
  if (!inherited.has_value()) {
    options.warnings.push_back(
        absl::StrCat("-x ", name, ": ", name, " is not set here; the ranks do not get it"));
    return absl::OkStatus();
  }
  options.extra_env.push_back(absl::StrCat(name, "=", *inherited));
  return absl::OkStatus();
}

// --network-interfaces eth0,eth1 (or --network-interface, repeated): their union, in order.
absl::Status AddInterfaces(const std::string& value, TroikarunOptions& options) {
  for (absl::string_view name : absl::StrSplit(value, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name.empty()) {
      return UsageError(kProgram, absl::StrCat("--network-interfaces: '", value,
                                               "' is not a comma-separated list of names"));
    }
    std::vector<std::string>& nics = options.network_interfaces;
    if (std::find(nics.begin(), nics.end(), name) == nics.end()) nics.emplace_back(name);
  }
  return absl::OkStatus();
}

absl::Status SetCooldownRange(const std::string& value, TroikarunOptions& options) {
  const auto [low_text, high_text] = JoinedValues(value);
  int low = 0, high = 0;
  if (!absl::SimpleAtoi(low_text, &low) || !absl::SimpleAtoi(high_text, &high)) {
    return UsageError(kProgram, absl::StrCat("--blacklist-cooldown-range: '", low_text, " ",
                                             high_text, "' is not two numbers of seconds"));
  }
  // horovodrun's bounds (its elastic HostState): 1 s to 1 h.
  if (low < 1 || high > 3600 || low > high) {
    return UsageError(kProgram, absl::StrCat("--blacklist-cooldown-range ", low, " ", high,
                                             ": want 1 <= MIN <= MAX <= 3600 seconds"));
  }
  options.blacklist_cooldown_range = std::make_pair(low, high);
  return absl::OkStatus();
}

// A flag about where the ranks run (hosts, ssh, elastic hosts); nullopt if `name` is none.
std::optional<absl::Status> SetHostFlag(const std::string& name, const std::string& value,
                                        TroikarunOptions& options) {
  if (name == "hosts" || name == "H" || name == "hostfile") {
    absl::StatusOr<std::vector<HostSlots>> hosts =
        name == "hostfile" ? ReadHostfile(value) : ParseHostList(value);
    if (!hosts.ok()) return hosts.status();
    options.hosts = *std::move(hosts);
    return absl::OkStatus();
  }
  if (name == "ssh_port" || name == "p") {
    return ParseInt("-p/--ssh-port", value, 1, 65535, &options.ssh_port);
  }
  if (name == "ssh_identity_file" || name == "i") {
    if (value.empty()) return UsageError(kProgram, "-i/--ssh-identity-file needs a file");
    options.ssh_identity_file = value;
    return absl::OkStatus();
  }
  if (name == "start_timeout") {
    return ParseTimeout("--start-timeout", value, &options.start_timeout);
  }
  if (name == "host_discovery_script") {
    if (value.empty()) return UsageError(kProgram, "--host-discovery-script needs a script");
    options.host_discovery_script = value;
    return absl::OkStatus();
  }
  if (name == "slots_per_host") {
    return ParseCount("--slots-per-host", value, &options.slots_per_host);
  }
  if (name == "reset_limit") {
    return ParseInt("--reset-limit", value, 0, 1 << 30, &options.reset_limit);
  }
  if (name == "blacklist_cooldown_range") return SetCooldownRange(value, options);
  if (name == "network_interfaces" || name == "network_interface" || name == "nics") {
    return AddInterfaces(value, options);
  }
  return std::nullopt;
}

// Applies flag `name` = `value` to `options`.
absl::Status SetFlag(const std::string& name, const std::string& value,
                     const HorovodEnvironment& env, TroikarunOptions& options) {
  if (name == "np" || name == "num_proc") return ParseCount("-np", value, &options.np);
  if (name == "nproc_per_node")
    return ParseCount("--nproc-per-node", value, &options.nproc_per_node);
  if (name == "min_np" || name == "min_num_proc") {
    return ParseCount("--min-np", value, &options.min_np);
  }
  if (name == "max_np" || name == "max_num_proc") {
    return ParseCount("--max-np", value, &options.max_np);
  }
  if (name == "max_restarts") return ParseCount("--max-restarts", value, &options.max_restarts);
  if (name == "fusion_threshold_mb") {
    return ParseFusionThreshold("--fusion-threshold-mb", value, 1 << 20, options);
  }
  if (name == "cycle_time_ms") return ParseCycleTime("--cycle-time-ms", value, options);
  if (name == "log_level") return SetLogLevel(value, options);
  if (name == "x") return SetExtraVariable(value, env, options);
  if (name == "attach_timeout" || name == "elastic_timeout") {
    absl::StatusOr<absl::Duration> timeout = ParseDurationFlag(
        kProgram, name == "attach_timeout" ? "attach_timeout" : "elastic-timeout", value, true);
    if (!timeout.ok()) return timeout.status();
    options.attach_timeout = *timeout;
    return absl::OkStatus();
  }
  if (std::optional<absl::Status> s = SetHostFlag(name, value, options)) return *s;
  if (std::optional<absl::Status> s = SetHorovodrunFlag(name, value, options)) return *s;
  if (name == "verbose") {
    options.verbose = true;
  } else if (name == "check_build" || name == "cb") {
    options.check_build = true;
  } else if (name == "version" || name == "v") {
    options.version = true;
  } else if (name == "coordinator") {
    if (absl::Status s = CheckCoordinatorFlag(kProgram, value); !s.ok()) return s;
    options.coordinator = value;
  } else if (name == "job") {
    if (value.empty()) return UsageError(kProgram, "--job must not be empty");
    options.job = value;
  } else if (name == "grace_period") {
    absl::StatusOr<absl::Duration> grace = ParseDurationFlag(kProgram, "grace_period", value);
    if (!grace.ok()) return grace.status();
    options.grace_period = *grace;
  } else if (name == "schedules") {
    if (value != "on" && value != "off") {
      return UsageError(kProgram, absl::StrCat("--schedules: '", value, "' is not on or off"));
    }
    options.schedules = value == "on";
  } else if (name == "timeline" || name == "timeline_filename") {
    if (value.empty()) return UsageError(kProgram, "--timeline needs a file");
    options.timeline = value;
  } else if (name == "output_filename") {
    if (value.empty()) return UsageError(kProgram, "--output-filename needs a directory");
    options.output_filename = value;
  } else if (name == "tls_cert" || name == "tls_key" || name == "tls_ca" ||
             name == "tls_client_ca") {
    if (value.empty()) {
      return UsageError(kProgram, absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}),
                                               " needs a PEM file"));
    }
    (name == "tls_cert"  ? options.tls_cert
     : name == "tls_key" ? options.tls_key
     : name == "tls_ca"  ? options.tls_ca
                         : options.tls_client_ca) = value;
  } else if (name == "config_file") {
    if (value.empty()) return UsageError(kProgram, "--config-file needs a file");
    options.config_file = value;
  } else {
    return UsageError(kProgram, absl::StrCat("unknown option '", name, "'"));
  }
  return absl::OkStatus();
}

FlagSyntax TroikarunSyntax() {
  FlagSyntax syntax;
  syntax.switches = HorovodrunSwitches();
  syntax.switches.insert({"verbose", "check_build", "cb", "version", "v"});
  syntax.pairs = {"blacklist_cooldown_range"};
  syntax.standalone = {"check_build", "cb", "version", "v"};
  syntax.bare_command = true;
  return syntax;
}

// horovodrun's variables, before the flags (which override them).
absl::Status ApplyEnvironment(const HorovodEnvironment& horovod, TroikarunOptions& options) {
  // HOROVOD_TIMELINE=DYNAMIC names no file: Horovod's ranks start such timelines later
  // (Troika's: troikactl timeline start).
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
  if (!horovod.start_timeout.empty()) {
    return ParseTimeout("$HOROVOD_START_TIMEOUT", horovod.start_timeout, &options.start_timeout);
  }
  return absl::OkStatus();
}

// The --config-file's settings, each unless a flag on the command line set it (`given`, as
// SettingOf names them).
absl::Status ApplyConfigFile(const std::set<std::string>& given, const HorovodEnvironment& env,
                             TroikarunOptions& options) {
  absl::StatusOr<std::vector<ConfigSetting>> settings = ReadConfigFile(options.config_file);
  if (!settings.ok()) return settings.status();
  for (const ConfigSetting& setting : *settings) {
    if (given.count(SettingOf(setting.flag)) > 0) continue;
    if (absl::Status s = SetFlag(setting.flag, setting.value, env, options); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--config-file ", options.config_file, ": ",
                                                     setting.key, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

HorovodEnvironment HorovodEnvironment::FromProcess() {
  auto get = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  HorovodEnvironment env;
  env.timeline = get("HOROVOD_TIMELINE");
  env.fusion_threshold = get("HOROVOD_FUSION_THRESHOLD");
  env.cycle_time = get("HOROVOD_CYCLE_TIME");
  env.start_timeout = get("HOROVOD_START_TIMEOUT");
  env.elastic_timeout = get("HOROVOD_ELASTIC_TIMEOUT");
  env.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  return env;
}

absl::StatusOr<TroikarunOptions> ParseTroikarunArgs(const std::vector<std::string>& args,
                                                    const HorovodEnvironment& horovod) {
  TroikarunOptions options;
  if (absl::Status s = ApplyEnvironment(horovod, options); !s.ok()) return s;
  // The flags the command line gave: the config file sets only what they did not.
  std::set<std::string> flags;
  absl::StatusOr<CommandLine> line = ParseCommandLine(
      args, kProgram,
      [&](const std::string& name, const std::string& value) {
        flags.insert(name);
        return SetFlag(name, value, horovod, options);
      },
      TroikarunSyntax());
  if (!line.ok()) return line.status();
  options.help = line->help;
  options.command = std::move(line->command);
  if (options.help) return options;
  const std::set<std::string> given = SettingsOf(flags);
  if (!options.config_file.empty()) {
    if (absl::Status s = ApplyConfigFile(given, horovod, options); !s.ok()) return s;
  }
  if (options.check_build || options.version) return options;
  if (!horovod.elastic_timeout.empty() && given.count("attach_timeout") == 0 &&
      (options.min_np > 0 || !options.host_discovery_script.empty())) {
    absl::Status s =
        ParseTimeout("$HOROVOD_ELASTIC_TIMEOUT", horovod.elastic_timeout, &options.attach_timeout);
    if (!s.ok()) return s;
  }
  if (absl::Status s = CheckTroikarunOptions(flags, options); !s.ok()) return s;
  return options;
}

}  // namespace troika::agent
