#include "agent/launcher/option_checks.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/cli/command_line.h"
#include "agent/launcher/horovodrun_flags.h"
#include "agent/launcher/host_flags.h"

namespace troika::agent {
namespace {

constexpr char kProgram[] = "troikarun";

// Flags that horovodrun's argparse groups exclude from each other: given together, a usage
// error, as there. (The hosts' group is CheckHosts'; the refused flags of the others never get
// here.)
absl::Status CheckExclusiveFlags(const std::set<std::string>& flags) {
  static const auto* groups = new std::vector<std::vector<std::string>>{
      {"hierarchical_allreduce", "no_hierarchical_allreduce"},
      {"hierarchical_allgather", "no_hierarchical_allgather"},
      {"torus_allreduce", "no_torus_allreduce"},
      {"autotune", "no_autotune"},
      {"timeline_mark_cycles", "no_timeline_mark_cycles"},
      {"no_stall_check", "stall_check"},
      {"mpi_threads_disable", "no_mpi_threads_disable"},
      {"log_with_timestamp", "log_without_timestamp", "log_hide_timestamp", "no_log_hide_timestamp",
       "prefix_output_with_timestamp", "prefix_timestamp"},
      {"gloo", "mpi", "jsrun"},
  };
  for (const std::vector<std::string>& group : *groups) {
    std::vector<std::string> given;
    for (const std::string& flag : group) {
      if (flags.count(flag) == 0) continue;
      std::string spelled = "--" + flag;
      for (char& c : spelled) c = c == '_' ? '-' : c;
      given.push_back(spelled);
    }
    if (given.size() > 1) {
      return UsageError(kProgram, absl::StrCat(absl::StrJoin(given, " and "),
                                               " do not go together (nor with horovodrun): "
                                               "give one"));
    }
  }
  return absl::OkStatus();
}

// -H, --hostfile and --host-discovery-script (one of them at most), their ranks and slots.
absl::Status CheckHosts(const std::set<std::string>& given, TroikarunOptions& options) {
  std::vector<std::string> sources;
  if (given.count("hosts") > 0) sources.push_back("-H");
  if (given.count("hostfile") > 0) sources.push_back("--hostfile");
  if (given.count("host_discovery_script") > 0) sources.push_back("--host-discovery-script");
  if (sources.size() > 1) {
    return UsageError(kProgram, absl::StrCat(absl::StrJoin(sources, " and "),
                                             " each give the job's hosts: give one of them"));
  }
  const bool discovery = !options.host_discovery_script.empty();
  if (options.nproc_per_node > 0 && !sources.empty()) {
    return UsageError(kProgram, absl::StrCat("--nproc-per-node does not go with ", sources[0],
                                             ": each host runs as many ranks as its slots"));
  }
  if (!options.hosts.empty() && TotalSlots(options.hosts) < options.np) {
    return UsageError(
        kProgram, absl::StrCat("-np ", options.np, " is more than the ", TotalSlots(options.hosts),
                               " slots of ", sources[0], "'s hosts"));
  }
  if (discovery) {
    // horovodrun's elastic defaults: at least -np ranks, and as many as the hosts have.
    if (options.min_np == 0) options.min_np = options.np;
    if (options.max_np == 0) options.max_np = kMaxRanks;
  }
  return absl::OkStatus();
}

// The embedded coordinator's flags refused with --coordinator, whose own flags decide.
absl::Status CheckCoordinatorFlags(const TroikarunOptions& options) {
  if (options.coordinator.empty()) return absl::OkStatus();
  auto refuse = [](const std::string& what, const std::string& instead) {
    return UsageError(kProgram, absl::StrCat(what,
                                             " troikarun's embedded coordinator; with "
                                             "--coordinator, ",
                                             instead));
  };
  if (options.fusion_threshold_bytes.has_value() || options.cycle_time.has_value()) {
    return refuse(
        "--fusion-threshold-mb and --cycle-time-ms (or $HOROVOD_FUSION_THRESHOLD and "
        "$HOROVOD_CYCLE_TIME) set",
        "give them to that coordinator (troika-coordinator --fusion_threshold_bytes, "
        "--cycle_time)");
  }
  if (options.schedules.has_value()) {
    return refuse("--schedules sets", "start that coordinator with --schedules=true or false");
  }
  if (!options.host_discovery_script.empty()) {
    return refuse("--host-discovery-script drains hosts through",
                  "start troika-agent on each host yourself (docs/elastic.md)");
  }
  if (!options.timeline.empty()) {
    return refuse("--timeline (or $HOROVOD_TIMELINE) is written by",
                  "start one with `troikactl timeline start JOB FILE`");
  }
  if (options.cache_capacity.has_value()) {
    return refuse("--cache-capacity sets", "start that coordinator with --cache_capacity");
  }
  const AutotuneFlags& autotune = options.autotune;
  if (autotune.enabled || !autotune.log_file.empty() || autotune.warmup_samples ||
      autotune.steps_per_sample || autotune.max_samples) {
    return refuse("--autotune and its flags set",
                  "start that coordinator with --autotune (troika-coordinator --help)");
  }
  const StallCheckFlags& stall = options.stall_check;
  if (stall.disabled || stall.warning_time || stall.shutdown_time) {
    return refuse("the stall-check flags set",
                  "start that coordinator with --stall_warning_time and --stall_shutdown_time");
  }
  return absl::OkStatus();
}

// The embedded coordinator's TLS flags go together: a certificate with its key and the CA the
// agents verify it with; a client CA only with a certificate; none with --coordinator (that
// coordinator's TLS is its own, and the agents reach it as TROIKA_TLS_* say).
absl::Status CheckTlsFlags(const TroikarunOptions& options) {
  const bool any = !options.tls_cert.empty() || !options.tls_key.empty() ||
                   !options.tls_ca.empty() || !options.tls_client_ca.empty();
  if (!any) return absl::OkStatus();
  if (!options.coordinator.empty()) {
    return UsageError(kProgram,
                      "--tls-cert, --tls-key, --tls-ca and --tls-client-ca set troikarun's "
                      "embedded coordinator; with --coordinator, its agents reach it as "
                      "TROIKA_TLS_CA, TROIKA_TLS_CERT and TROIKA_TLS_KEY in troikarun's "
                      "environment say");
  }
  if (options.tls_cert.empty() || options.tls_key.empty() || options.tls_ca.empty()) {
    return UsageError(kProgram,
                      "TLS of the embedded coordinator needs --tls-cert, --tls-key and --tls-ca "
                      "(the CA the agents verify its certificate with)");
  }
  return absl::OkStatus();
}

// Flags that do nothing here, as horovodrun ignores them too: a warning each.
void AddWarnings(const std::set<std::string>& given, TroikarunOptions& options) {
  auto warn = [&](const std::string& flag, const std::string& why) {
    options.warnings.push_back(absl::StrCat(flag, " does nothing here: ", why));
  };
  const bool hosts = !options.hosts.empty() || !options.host_discovery_script.empty();
  const char* no_hosts = "no -H, --hostfile or --host-discovery-script";
  if (!hosts) {
    if (given.count("ssh_port") > 0) warn("-p/--ssh-port", no_hosts);
    if (given.count("ssh_identity_file") > 0) warn("-i/--ssh-identity-file", no_hosts);
    if (given.count("start_timeout") > 0) warn("--start-timeout", no_hosts);
    if (given.count("network_interfaces") > 0) warn("--network-interfaces", no_hosts);
  }
  if (given.count("slots_per_host") > 0 && options.host_discovery_script.empty()) {
    warn("--slots-per-host", "it gives the slots of --host-discovery-script's hosts");
  }
  if (options.min_np == 0) {
    const char* not_elastic = "not an elastic job (--min-np or --host-discovery-script)";
    if (given.count("reset_limit") > 0) warn("--reset-limit", not_elastic);
    if (given.count("blacklist_cooldown_range") > 0) {
      warn("--blacklist-cooldown-range", not_elastic);
    }
  }
  const AutotuneFlags& autotune = options.autotune;
  if (!autotune.enabled && (!autotune.log_file.empty() || autotune.warmup_samples ||
                            autotune.steps_per_sample || autotune.max_samples)) {
    warn("the --autotune-* flags", "no --autotune");
  }
  const StallCheckFlags& stall = options.stall_check;
  const absl::Duration warning = stall.warning_time.value_or(absl::Seconds(60));
  if (!stall.disabled && stall.shutdown_time && *stall.shutdown_time > absl::ZeroDuration() &&
      *stall.shutdown_time <= warning) {
    warn("--stall-check-shutdown-time-seconds",
         absl::StrCat("a stalled job is shut down only after a time above the warning time (",
                      absl::FormatDuration(warning), "), as with horovodrun"));
  }
}

}  // namespace

absl::Status CheckTroikarunOptions(const std::set<std::string>& flags, TroikarunOptions& options) {
  if (absl::Status s = CheckExclusiveFlags(flags); !s.ok()) return s;
  const std::set<std::string> given = SettingsOf(flags);
  if (options.np == 0) return UsageError(kProgram, "-np N is required");
  if (absl::Status s = CheckHosts(given, options); !s.ok()) return s;
  if (absl::Status s = CheckCoordinatorFlags(options); !s.ok()) return s;
  if (absl::Status s = CheckTlsFlags(options); !s.ok()) return s;
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
  AddWarnings(given, options);
  return absl::OkStatus();
}

}  // namespace troika::agent
