#include "agent/launcher/embedded_coordinator.h"

namespace troika::agent {
namespace {

coordinator::AutotuneConfig Autotune(const TroikarunOptions& options) {
  coordinator::AutotuneConfig config;
  coordinator::AutotuneOptions& tune = config.options;
  const AutotuneFlags& flags = options.autotune;
  tune.warmup_samples = flags.warmup_samples.value_or(tune.warmup_samples);
  tune.steps_per_sample = flags.steps_per_sample.value_or(tune.steps_per_sample);
  tune.max_samples = flags.max_samples.value_or(tune.max_samples);
  // A parameter that was given is held where it is: a search range of one point. (The
  // autotuner clamps a 0 to its smallest step, 1 byte or 1 us: no fusion, no wait, as 0 is.)
  if (options.fusion_threshold_bytes.has_value()) {
    tune.min_fusion_bytes = tune.max_fusion_bytes = *options.fusion_threshold_bytes;
  }
  if (options.cycle_time.has_value()) {
    tune.min_cycle_time = tune.max_cycle_time = *options.cycle_time;
  }
  config.csv_path = flags.log_file;
  return config;
}

coordinator::StallOptions Stall(const StallCheckFlags& flags) {
  coordinator::StallOptions stall;
  if (flags.disabled) return {absl::ZeroDuration(), absl::ZeroDuration()};
  stall.warning_time = flags.warning_time.value_or(stall.warning_time);
  // horovodrun shuts a stalled job down only after a shutdown time above the warning time.
  if (flags.shutdown_time.has_value() && *flags.shutdown_time > stall.warning_time) {
    stall.shutdown_time = *flags.shutdown_time;
  }
  return stall;
}

}  // namespace

coordinator::CoordinatorOptions EmbeddedCoordinatorOptions(const TroikarunOptions& options,
                                                           const std::string& listen_address) {
  coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.listen_address = listen_address;
  coordinator_options.tls.plaintext = options.tls_cert.empty();
  coordinator_options.tls.cert_file = options.tls_cert;
  coordinator_options.tls.key_file = options.tls_key;
  coordinator_options.tls.client_ca_file = options.tls_client_ca;
  coordinator::JobOptions& job = coordinator_options.registry.job;
  coordinator::NegotiatorOptions& negotiation = job.negotiator;
  negotiation.fusion_threshold_bytes =
      options.fusion_threshold_bytes.value_or(negotiation.fusion_threshold_bytes);
  negotiation.cycle_time = options.cycle_time.value_or(negotiation.cycle_time);
  negotiation.cache_capacity = options.cache_capacity.value_or(negotiation.cache_capacity);
  job.schedules = options.schedules.value_or(true);
  job.stall = Stall(options.stall_check);
  if (options.autotune.enabled) job.autotune = Autotune(options);
  return coordinator_options;
}

}  // namespace troika::agent
