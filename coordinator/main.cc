// troika-coordinator: the long-lived coordinator service. Parses flags and wires objects.

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"
#include "coordinator/state/secret.h"
#include "coordinator/state/state_store.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070", "host:port for the gRPC service (port 0: any)");
ABSL_FLAG(int64_t, fusion_threshold_bytes, int64_t{64} << 20,
          "largest fused allreduce in bytes; 0 disables fusion");
ABSL_FLAG(absl::Duration, cycle_time, absl::Milliseconds(1),
          "longest time a ready allreduce is held back to fuse with others still arriving, and "
          "a rank holds its requests to send those submitted together in one message (a wait "
          "or poll sends them at once); 0 holds nothing");
ABSL_FLAG(int, cache_capacity, 1024,
          "response-cache entries per job: repeated requests travel as small ids; 0 disables");
ABSL_FLAG(absl::Duration, max_wait, absl::Minutes(5),
          "cap on attach and key-value waits; the default for requests without a timeout");
ABSL_FLAG(absl::Duration, liveness_timeout, absl::Seconds(10),
          "a peer that answers no keepalive for this long is gone; its jobs are aborted");
ABSL_FLAG(absl::Duration, session_open_timeout, absl::Seconds(60),
          "once every rank of a job attached, ranks whose agent has not opened its session "
          "within this are lost (an elastic job goes on without them; any other is aborted)");
ABSL_FLAG(absl::Duration, stall_warning_time, absl::Seconds(60),
          "warn (once) about a tensor some ranks submitted and others not for this long; 0: off");
ABSL_FLAG(absl::Duration, stall_shutdown_time, absl::ZeroDuration(),
          "abort the job when a tensor stays stalled for this long; 0: never");
ABSL_FLAG(absl::Duration, straggler_margin, absl::Milliseconds(10),
          "log a rank as a straggler when it is last for most tensors and late by this on average");
ABSL_FLAG(bool, deadlock_detection, true,
          "abort a job at once when every live rank is blocked waiting for tensors that other "
          "ranks never submit");
ABSL_FLAG(bool, schedules, true,
          "steady-state schedules (docs/protocol.md): once a job's steps repeat, its ranks run "
          "them without a round trip per collective until one deviates (false: every "
          "collective is negotiated, as Horovod does)");
ABSL_FLAG(bool, schedule_buckets, true,
          "with --schedules: fuse a schedule's neighbouring allreduces into collectives of up "
          "to the fusion threshold once the ranks show that none needs one's result before it "
          "submits the next (docs/protocol.md)");
ABSL_FLAG(int, max_job_size, 65536, "most ranks one job may have");
ABSL_FLAG(int, max_jobs, 10000, "most jobs held at once; more are refused (RESOURCE_EXHAUSTED)");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port for HTTP /metrics, /healthz and /readyz (docs/metrics.md); empty: off");
ABSL_FLAG(int, metrics_max_rank_series, 1024,
          "export per-rank metric series only for jobs of at most this many ranks");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "largest gRPC message accepted, in bytes");
ABSL_FLAG(int, max_pending_tensors, 65536,
          "most tensors one job (process set) may have pending at once (RESOURCE_EXHAUSTED "
          "beyond)");
ABSL_FLAG(std::string, tls_cert, "", "TLS: PEM certificate chain of the gRPC listener");
ABSL_FLAG(std::string, tls_key, "", "TLS: PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "mutual TLS: PEM CA that signs client certificates; clients without one are refused");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token that troikactl's calls (list, show, cancel, timeline) "
          "must carry; none: administrative calls are refused");
ABSL_FLAG(bool, plaintext, false,
          "serve gRPC without TLS (loopback, trusted networks); required when no --tls_cert is "
          "given");
ABSL_FLAG(std::string, timeline_dir, ".",
          "directory where `troikactl timeline start` writes timelines (clients name only a file)");
ABSL_FLAG(bool, autotune, false,
          "tune fusion threshold and cycle time of every job by Bayesian optimisation "
          "(docs/autotune.md)");
ABSL_FLAG(int, autotune_warmup_samples, 3, "autotune: samples discarded at the start");
ABSL_FLAG(int, autotune_steps_per_sample, 10, "autotune: training steps per sample");
ABSL_FLAG(int, autotune_max_samples, 20, "autotune: configurations evaluated (the budget)");
ABSL_FLAG(std::string, autotune_dir, "",
          "autotune: where each job writes <job>-autotune.csv (one row per configuration) and "
          "<job>-autotune.params (the best); a job restored from --state_dir starts from its "
          ".params file there; default: --state_dir; empty: no files");
ABSL_FLAG(std::string, autotune_params_in, "",
          "start every job from the fusion threshold and cycle time in this .params file "
          "(written by an earlier --autotune run); overrides --fusion_threshold_bytes and "
          "--cycle_time");
ABSL_FLAG(std::string, state_dir, "",
          "directory where every live job's definition (size, token digest, node blocks, process "
          "sets) and tuned parameters are kept, so that a coordinator restarted on the same "
          "address with the same directory knows its jobs and their agents resume them; "
          "with it, SIGTERM keeps the jobs for the next coordinator instead of aborting them "
          "(docs/protocol.md); default: none");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound port is written to this file once serving (useful with port 0)");

int main(int argc, char** argv) {
  troika::BlockTerminationSignals();
  troika::ShowFlagsOf("coordinator/main.cc");
  absl::SetProgramUsageMessage(
      "The Troika coordinator: negotiates the collectives of many training jobs.\n"
      "Usage: troika-coordinator [--listen=0.0.0.0:7070] (--tls_cert=PEM --tls_key=PEM "
      "[--tls_client_ca=PEM] | --plaintext) [flags]");
  troika::HandleHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);

  troika::LogSeverity severity;
  if (!troika::ParseLogSeverity(absl::GetFlag(FLAGS_log_level), &severity)) {
    std::fprintf(stderr, "unknown --log_level '%s'\n", absl::GetFlag(FLAGS_log_level).c_str());
    return 2;
  }
  troika::SetMinLogSeverity(severity);

  troika::coordinator::CoordinatorOptions options;
  // What every job the coordinator serves is given.
  troika::coordinator::JobOptions& job = options.registry.job;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  job.negotiator.max_pending_tensors = absl::GetFlag(FLAGS_max_pending_tensors);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.tls.plaintext = absl::GetFlag(FLAGS_plaintext);
  if (const std::string path = absl::GetFlag(FLAGS_admin_token_file); !path.empty()) {
    auto token = troika::ReadTokenFile(path);
    if (!token.ok()) {
      std::fprintf(stderr, "%s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    options.service.admin_token = troika::coordinator::Secret::Of(*token);
  }
  options.liveness_timeout = absl::GetFlag(FLAGS_liveness_timeout);
  options.registry.max_job_size = absl::GetFlag(FLAGS_max_job_size);
  options.registry.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.metrics_max_rank_series = absl::GetFlag(FLAGS_metrics_max_rank_series);
  job.negotiator.fusion_threshold_bytes = absl::GetFlag(FLAGS_fusion_threshold_bytes);
  job.negotiator.cycle_time = absl::GetFlag(FLAGS_cycle_time);
  job.negotiator.cache_capacity = absl::GetFlag(FLAGS_cache_capacity);
  job.session_open_timeout = absl::GetFlag(FLAGS_session_open_timeout);
  job.stall.warning_time = absl::GetFlag(FLAGS_stall_warning_time);
  job.stall.shutdown_time = absl::GetFlag(FLAGS_stall_shutdown_time);
  job.straggler_margin = absl::GetFlag(FLAGS_straggler_margin);
  job.deadlock_detection = absl::GetFlag(FLAGS_deadlock_detection);
  job.schedules = absl::GetFlag(FLAGS_schedules);
  job.schedule_buckets = absl::GetFlag(FLAGS_schedule_buckets);
  options.service.max_wait = absl::GetFlag(FLAGS_max_wait);
  options.service.timeline_dir = absl::GetFlag(FLAGS_timeline_dir);
  if (absl::GetFlag(FLAGS_cache_capacity) < 0 || options.registry.max_jobs < 1 ||
      options.metrics_max_rank_series < 0 || job.negotiator.max_pending_tensors < 1 ||
      options.max_message_bytes < 1024) {
    std::fprintf(stderr,
                 "--cache_capacity and --metrics_max_rank_series must be >= 0; --max_jobs and "
                 "--max_pending_tensors >= 1; --max_message_bytes "
                 ">= 1024\n");
    return 2;
  }
  if (std::string path = absl::GetFlag(FLAGS_autotune_params_in); !path.empty()) {
    absl::StatusOr<troika::coordinator::TuningParams> params =
        troika::coordinator::LoadTuningParams(path);
    if (!params.ok()) {
      std::fprintf(stderr, "--autotune_params_in: %s\n",
                   std::string(params.status().message()).c_str());
      return 2;
    }
    job.negotiator.fusion_threshold_bytes = params->fusion_threshold_bytes;
    job.negotiator.cycle_time = params->cycle_time;
  }
  if (absl::GetFlag(FLAGS_autotune)) {
    troika::coordinator::AutotuneOptions& autotune = job.autotune.emplace().options;
    autotune.warmup_samples = absl::GetFlag(FLAGS_autotune_warmup_samples);
    autotune.steps_per_sample = absl::GetFlag(FLAGS_autotune_steps_per_sample);
    autotune.max_samples = absl::GetFlag(FLAGS_autotune_max_samples);
    if (autotune.steps_per_sample < 1 || autotune.warmup_samples < 0 || autotune.max_samples < 1) {
      std::fprintf(stderr,
                   "--autotune_steps_per_sample and --autotune_max_samples must be >= 1, "
                   "--autotune_warmup_samples >= 0\n");
      return 2;
    }
  }
  options.registry.autotune_dir = absl::GetFlag(FLAGS_autotune_dir);
  if (const std::string dir = absl::GetFlag(FLAGS_state_dir); !dir.empty()) {
    auto store = troika::coordinator::StateStore::Open(dir);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
      return 2;
    }
    options.registry.state_store = *std::move(store);
    if (options.registry.autotune_dir.empty()) options.registry.autotune_dir = dir;
  }

  auto coordinator = troika::coordinator::Coordinator::Start(options);
  if (!coordinator.ok()) {
    TROIKA_LOG(ERROR) << coordinator.status();
    return coordinator.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr || std::fprintf(f, "%d\n", (*coordinator)->port()) < 0 ||
        std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
      TROIKA_LOG(ERROR) << "cannot write --port_file " << path;
      return 1;
    }
  }
  int signal = troika::WaitForTerminationSignal();
  TROIKA_LOG(INFO) << "signal " << signal << " received; shutting down";
  (*coordinator)->Shutdown();
  TROIKA_LOG(INFO) << "coordinator stopped";
  return 0;
}
