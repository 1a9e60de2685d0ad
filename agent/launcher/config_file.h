#pragma once
// horovodrun's --config-file: a YAML file of the tunable flags, read as the flags that set them.
//
//   controller: gloo                 (--gloo; mpi: --mpi)
//   params:          fusion_threshold_mb, cycle_time_ms, cache_capacity,
//                    hierarchical_allreduce, hierarchical_allgather, torus_allreduce
//   autotune:        enabled, log_file, warmup_samples, steps_per_sample,
//                    bayes_opt_max_samples, gaussian_process_noise
//   timeline:        filename, mark_cycles
//   stall_check:     enabled, warning_time_seconds, shutdown_time_seconds
//   library_options: mpi_threads_disable, num_nccl_streams, thread_affinity,
//                    gloo_timeout_seconds
//   logging:         level, with_timestamp
//
// A key names the flag "--SECTION-KEY" or "--KEY" as horovodrun's config_parser maps it; true
// and false pick a switch or its "no" form. As horovodrun: a section present without
// `enabled` leaves autotune off and the stall check on, and a key with no value is skipped.
// Unlike horovodrun, which ignores them, an unknown key is an error (a misspelled key would
// otherwise change nothing without a word).
//
// Pure functions (ReadConfigFile reads its file); thread-safe.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troika::agent {

// One setting of the file, as the flag that sets it.
struct ConfigSetting {
  std::string key;    // where in the file: "params.fusion_threshold_mb"
  std::string flag;   // the flag, as the command-line reader names it: "fusion_threshold_mb"
  std::string value;  // the YAML scalar as written; "" for a switch ("no_stall_check")
  bool operator==(const ConfigSetting&) const = default;
};

// The settings of YAML text `yaml`, in the file's order. INVALID_ARGUMENT naming `file` and
// the key (or the line of a YAML syntax error): an unknown key, a section that is not a
// mapping, a value that is not a scalar, a switch that is not true or false, a controller
// other than gloo or mpi.
absl::StatusOr<std::vector<ConfigSetting>> ParseConfigFile(const std::string& yaml,
                                                           const std::string& file);

// ParseConfigFile of the file at `path`; INVALID_ARGUMENT also if it cannot be read.
absl::StatusOr<std::vector<ConfigSetting>> ReadConfigFile(const std::string& path);

}  // namespace troika::agent
