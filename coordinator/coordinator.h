#pragma once
// Coordinator: the service assembled — scheduler, job registry and the gRPC server on one
// listening address. Used by troika-coordinator's main(), by troikarun (embedded) and tests.
//
// Thread-safe.

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/scheduler.h"
#include "common/tls.h"
#include "coordinator/job/job_registry.h"
#include "coordinator/service/coordinator_metrics.h"
#include "coordinator/service/coordinator_service.h"

namespace grpc {
class Server;
}
namespace troika {
class ServiceMetrics;
}

namespace troika::coordinator {

struct CoordinatorOptions {
  // host:port to listen on; port 0 picks a free port (see port()). Default "0.0.0.0:7070".
  std::string listen_address = "0.0.0.0:7070";
  // Transport security of the gRPC listener: TLS (certificate and key; with a client CA,
  // mutual TLS) or, asked for explicitly, plaintext. Start() fails with neither.
  ServerTls tls;
  // Largest gRPC message accepted, in bytes. Default 64 MiB.
  int max_message_bytes = 64 << 20;
  // A peer (agent or rank) that answers no keepalive ping for this long is considered gone:
  // its streams end, which aborts its jobs. Default 10 s.
  absl::Duration liveness_timeout = absl::Seconds(10);
  // host:port of the HTTP port serving /metrics, /healthz and /readyz (docs/metrics.md); port
  // 0 picks a free port (see metrics_port()). Default empty: no HTTP port, no RPC metrics.
  std::string metrics_listen;
  // Per-rank metric series only for jobs of at most this many ranks. Default 1024.
  int metrics_max_rank_series = 1024;
  JobRegistryOptions registry;
  ServiceOptions service;
};

class Coordinator {
 public:
  // Starts serving; fails if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(CoordinatorOptions options,
                                                            Clock& clock = Clock::Real());
  ~Coordinator();  // Shutdown()
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int port() const { return port_; }
  // The HTTP metrics port; 0 without metrics_listen.
  int metrics_port() const;
  JobRegistry& registry() { return *registry_; }
  // The timers of the coordinator and its jobs.
  const Scheduler& scheduler() const { return *scheduler_; }
  const session::ControlStats& control_stats() const { return service_->stats(); }

  // Aborts every live job ("coordinator shutting down") — or, with a state store, keeps them
  // for a restarted coordinator: their sessions end with UNAVAILABLE and their agents
  // reconnect (Job::Detach) — lets streams drain for up to `grace`, then stops. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown() completes.
  void Wait();

 private:
  Coordinator() = default;

  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<JobRegistry> registry_;
  std::unique_ptr<CoordinatorService> service_;
  // Only with metrics_listen. Outlives the server (its RPC interceptor); stops serving first
  // in ~Coordinator.
  std::unique_ptr<ServiceMetrics> metrics_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> serving_{false};  // /readyz
  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // guarded by shutdown_mu_
  bool keep_jobs_ = false;  // a state store: Shutdown() detaches jobs instead of aborting
};

}  // namespace troika::coordinator
