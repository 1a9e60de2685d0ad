#include "agent/launcher/horovodrun_flags.h"

#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/cli/command_line.h"

namespace troika::agent {
namespace {

constexpr char kProgram[] = "troikarun";

// Flags with no equivalent in troikarun, and why (the usage error's text after the flag).
const std::map<std::string, std::string>& Refused() {
  static const auto* refused = new std::map<std::string, std::string>{
      {"mpi",
       "troikarun has no MPI controller: its coordinator negotiates every collective, and it "
       "launches as horovodrun --gloo does; drop --mpi"},
      {"jsrun",
       "troikarun does not launch through jsrun (IBM LSF): give the job's hosts with -H or "
       "--hostfile instead"},
      {"mpi_args",
       "troikarun runs no mpirun to pass arguments to; set the ranks' variables with "
       "-x NAME=VALUE"},
      {"binding_args",
       "process binding is mpirun's and jsrun's; bind the ranks in the command instead "
       "(numactl or taskset before it)"},
      {"mpi_threads_disable", "Troika's ranks use no MPI; drop it"},
      {"num_nccl_streams",
       "Troika runs NCCL on one stream per device, in the order the coordinator sets; drop it"},
      {"torus_allreduce",
       "Troika has no 2D torus allreduce; NCCL chooses its own algorithm across hosts "
       "(-x NCCL_ALGO=Ring or Tree), and --hierarchical-allreduce is Troika's for CPU tensors"},
      {"autotune_gaussian_process_noise",
       "Troika's autotuner fits the noise of its Gaussian process to the samples (maximum "
       "likelihood, docs/autotune.md); drop it"},
      {"timeline_mark_cycles",
       "Troika's coordinator negotiates as requests arrive, with no cycles to mark; its "
       "timeline shows every negotiation (docs/timeline.md)"},
      {"thread_affinity",
       "libtroika does not pin its threads; pin each rank instead (numactl or taskset before "
       "the command)"},
      {"log_without_timestamp", "Troika's log lines always carry their time"},
      {"log_hide_timestamp", "Troika's log lines always carry their time"},
      {"prefix_output_with_timestamp",
       "troikarun prefixes the ranks' lines with their rank only; pipe its output through "
       "ts(1) (moreutils) for times"},
      {"prefix_timestamp",
       "troikarun prefixes the ranks' lines with their rank only; pipe its output through "
       "ts(1) (moreutils) for times"},
  };
  return *refused;
}

// Switches that ask for what troikarun does anyway.
const std::set<std::string>& Accepted() {
  static const auto* accepted = new std::set<std::string>{
      "gloo",                     // troikarun launches as horovodrun --gloo
      "disable_cache",            // troikarun checks the hosts every time: it caches nothing
      "no_torus_allreduce",       // never a torus
      "no_mpi_threads_disable",   // no MPI
      "no_timeline_mark_cycles",  // no cycles to mark
      "log_with_timestamp",       // always
      "no_log_hide_timestamp",    // always
  };
  return *accepted;
}

// How a flag was spelled on the command line, for messages.
std::string Spelled(const std::string& name) {
  std::string flag = name;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return "--" + flag;
}

absl::Status ParseInt(const std::string& name, const std::string& value, int min, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min) {
    return UsageError(kProgram, absl::StrCat(Spelled(name), ": '", value,
                                             "' is not a whole number of at least ", min));
  }
  return absl::OkStatus();
}

absl::Status ParseSeconds(const std::string& name, const std::string& value, bool positive,
                          absl::Duration* out) {
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !std::isfinite(seconds) || seconds < 0 ||
      (positive && seconds == 0) || seconds > 1e9) {
    return UsageError(kProgram,
                      absl::StrCat(Spelled(name), ": '", value, "' is not a ",
                                   positive ? "positive" : "non-negative", " number of seconds"));
  }
  *out = absl::Seconds(seconds);
  return absl::OkStatus();
}

// A flag of the embedded coordinator's; nullopt if `name` is none.
std::optional<absl::Status> SetCoordinatorFlag(const std::string& name, const std::string& value,
                                               TroikarunOptions& options) {
  AutotuneFlags& autotune = options.autotune;
  StallCheckFlags& stall = options.stall_check;
  int n = 0;
  absl::Duration seconds;
  absl::Status status;
  if (name == "cache_capacity") {
    status = ParseInt(name, value, 0, &n);
    if (status.ok()) options.cache_capacity = n;
  } else if (name == "autotune" || name == "no_autotune") {
    autotune.enabled = name == "autotune";
  } else if (name == "autotune_log_file") {
    if (value.empty()) return UsageError(kProgram, "--autotune-log-file needs a file");
    autotune.log_file = value;
  } else if (name == "autotune_warmup_samples") {
    status = ParseInt(name, value, 0, &n);
    if (status.ok()) autotune.warmup_samples = n;
  } else if (name == "autotune_steps_per_sample") {
    status = ParseInt(name, value, 1, &n);
    if (status.ok()) autotune.steps_per_sample = n;
  } else if (name == "autotune_bayes_opt_max_samples") {
    status = ParseInt(name, value, 0, &n);
    if (status.ok()) autotune.max_samples = n;
  } else if (name == "no_stall_check" || name == "stall_check") {
    stall.disabled = name == "no_stall_check";
  } else if (name == "stall_check_warning_time_seconds") {
    status = ParseSeconds(name, value, false, &seconds);
    if (status.ok()) stall.warning_time = seconds;
  } else if (name == "stall_check_shutdown_time_seconds") {
    status = ParseSeconds(name, value, false, &seconds);
    if (status.ok()) stall.shutdown_time = seconds;
  } else {
    return std::nullopt;
  }
  return status;
}

// A flag that becomes a variable of the ranks' environment; nullopt if `name` is none.
std::optional<absl::Status> SetRankFlag(const std::string& name, const std::string& value,
                                        TroikarunOptions& options) {
  std::map<std::string, std::string>& env = options.rank_env;
  if (name == "hierarchical_allreduce" || name == "no_hierarchical_allreduce") {
    // libtroika reads Horovod's variable itself (troika/troika.h, Options).
    env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = name == "hierarchical_allreduce" ? "1" : "0";
  } else if (name == "hierarchical_allgather" || name == "no_hierarchical_allgather") {
    env["HOROVOD_HIERARCHICAL_ALLGATHER"] = name == "hierarchical_allgather" ? "1" : "0";
  } else if (name == "gloo_timeout_seconds") {
    absl::Duration seconds;
    if (absl::Status s = ParseSeconds(name, value, true, &seconds); !s.ok()) return s;
    // Horovod's bound on a Gloo operation is Troika's on any data-plane transfer.
    env["TROIKA_DATA_TIMEOUT"] = absl::StrCat(absl::ToDoubleSeconds(seconds));
  } else if (name == "tcp") {
    env["NCCL_IB_DISABLE"] = "1";  // what horovodrun --tcp sets; Gloo is TCP anyway
  } else {
    return std::nullopt;
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<absl::Status> SetHorovodrunFlag(const std::string& name, const std::string& value,
                                              TroikarunOptions& options) {
  if (auto refused = Refused().find(name); refused != Refused().end()) {
    return UsageError(kProgram, absl::StrCat(Spelled(name),
                                             " is horovodrun's and has no "
                                             "equivalent in troikarun: ",
                                             refused->second));
  }
  if (Accepted().count(name) > 0) return absl::OkStatus();
  if (std::optional<absl::Status> s = SetCoordinatorFlag(name, value, options)) return s;
  return SetRankFlag(name, value, options);
}

const std::set<std::string>& HorovodrunSwitches() {
  static const auto* switches = new std::set<std::string>{
      "autotune",
      "no_autotune",
      "no_stall_check",
      "stall_check",
      "hierarchical_allreduce",
      "no_hierarchical_allreduce",
      "hierarchical_allgather",
      "no_hierarchical_allgather",
      "torus_allreduce",
      "no_torus_allreduce",
      "timeline_mark_cycles",
      "no_timeline_mark_cycles",
      "mpi_threads_disable",
      "no_mpi_threads_disable",
      "tcp",
      "log_with_timestamp",
      "log_without_timestamp",
      "log_hide_timestamp",
      "no_log_hide_timestamp",
      "prefix_output_with_timestamp",
      "prefix_timestamp",
      "gloo",
      "mpi",
      "jsrun",
      "disable_cache",
  };
  return *switches;
}

std::string SettingOf(const std::string& flag) {
  static const auto* settings = new std::map<std::string, std::string>{
      {"no_hierarchical_allreduce", "hierarchical_allreduce"},
      {"no_hierarchical_allgather", "hierarchical_allgather"},
      {"no_torus_allreduce", "torus_allreduce"},
      {"no_autotune", "autotune"},
      {"no_timeline_mark_cycles", "timeline_mark_cycles"},
      {"timeline", "timeline_filename"},
      {"stall_check", "no_stall_check"},
      {"no_mpi_threads_disable", "mpi_threads_disable"},
      {"log_without_timestamp", "log_with_timestamp"},
      {"log_hide_timestamp", "log_with_timestamp"},
      {"no_log_hide_timestamp", "log_with_timestamp"},
      {"gloo", "controller"},
      {"mpi", "controller"},
      {"jsrun", "controller"},
      {"elastic_timeout", "attach_timeout"},
      // One name for every spelling of troikarun's own flags.
      {"H", "hosts"},
      {"num_proc", "np"},
      {"min_num_proc", "min_np"},
      {"max_num_proc", "max_np"},
      {"p", "ssh_port"},
      {"i", "ssh_identity_file"},
      {"cb", "check_build"},
      {"v", "version"},
      {"network_interface", "network_interfaces"},
      {"nics", "network_interfaces"},
      {"prefix_timestamp", "prefix_output_with_timestamp"},
  };
  auto it = settings->find(flag);
  return it == settings->end() ? flag : it->second;
}

std::set<std::string> SettingsOf(const std::set<std::string>& flags) {
  std::set<std::string> settings;
  for (const std::string& flag : flags) settings.insert(SettingOf(flag));
  return settings;
}

}  // namespace troika::agent
