#pragma once
// MetricsServer: the HTTP port of a Troika process (coordinator or agent). Serves
//   /metrics  the Prometheus text format of every registered collectable, in registration order
//   /healthz  200 "ok" while the process serves at all (liveness)
//   /readyz   200 "ok" when the readiness callback returns OK, else 503 with its message
// Anything else is 404. Built on civetweb; prometheus-cpp serializes.
//
// Also here, because both the coordinator and the agent use them:
//   MakeProcessCollector()  process_* metrics of this process, read from /proc/self at scrape
//   RpcMetrics              a gRPC server interceptor factory: per-method RPC latency, RPC
//                           counts by status code, connected streams (docs/metrics.md)
//
// Thread-safe. Handlers run on civetweb's threads; the readiness callback and collectables
// must be thread-safe and must not block for long.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/server_interceptor.h"  // complete: ServiceMetrics returns one inline
#include "prometheus/collectable.h"
#include "prometheus/registry.h"

namespace troika {

class MetricsServer {
 public:
  // OK: ready. Otherwise /readyz answers 503 with the status message.
  using Readiness = std::function<absl::Status()>;

  // Listens on `listen_address` ("host:port"; port 0 picks a free port, see port()).
  // UNAVAILABLE naming the address if it cannot be bound; INVALID_ARGUMENT if malformed.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen_address,
                                                              Readiness readiness);
  ~MetricsServer();  // stops serving; waits for handlers in progress
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;

  // Adds `collectable` to /metrics. Held weakly: one that expired is skipped.
  void Register(std::weak_ptr<prometheus::Collectable> collectable);

 private:
  class Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds — the names Prometheus'
// client libraries use — read from /proc/self when collected.
std::shared_ptr<prometheus::Collectable> MakeProcessCollector();

// Metrics of a gRPC server, recorded by an interceptor (install with
// ServerBuilder::experimental().SetInterceptorCreators):
//   troika_rpc_duration_seconds{method}   histogram, unary RPCs, call start to status sent
//   troika_rpcs_total{method,code}        counter, every finished RPC by the status code the
//                                         server sent (CANCELLED when it sent none)
//   troika_streams_connected{method}      gauge, open streaming RPCs
// `method` is the short method name ("Attach"), so cardinality is the service's method count.
class RpcMetrics {
 public:
  // Families are added to `registry`, which must outlive this object.
  explicit RpcMetrics(prometheus::Registry& registry);
  ~RpcMetrics();
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // A factory for ServerBuilder; this object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeInterceptorFactory();

 public:
  class Impl;  // public for the interceptor in metrics_server.cc

 private:
  std::unique_ptr<Impl> impl_;
};

// ServiceMetrics: the metrics port of a Troika service (coordinator or agent): its own
// collectable, the process metrics and its gRPC server's RPC metrics on one MetricsServer.
// Create it before building the gRPC server (to install MakeInterceptorFactory()); Serve()
// once scrapes may be answered; StopServing() before anything the collectable or the
// readiness callback reads goes away. Must outlive the gRPC server.
//
// Thread contract: one thread calls Serve() and StopServing(); scrapes run on the server's.
class ServiceMetrics {
 public:
  explicit ServiceMetrics(std::shared_ptr<prometheus::Collectable> service);
  ~ServiceMetrics();  // StopServing()
  ServiceMetrics(const ServiceMetrics&) = delete;
  ServiceMetrics& operator=(const ServiceMetrics&) = delete;

  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeInterceptorFactory() {
    return rpc_.MakeInterceptorFactory();
  }
  // Starts the HTTP port (MetricsServer::Start's errors) and logs where it listens.
  absl::Status Serve(const std::string& listen_address, MetricsServer::Readiness readiness);
  // Stops the HTTP port, waiting for handlers in progress. Idempotent.
  void StopServing() { server_.reset(); }
  int port() const { return server_ ? server_->port() : 0; }

 private:
  const std::shared_ptr<prometheus::Collectable> service_;
  const std::shared_ptr<prometheus::Collectable> process_;
  const std::shared_ptr<prometheus::Registry> rpc_registry_;
  RpcMetrics rpc_;
  std::unique_ptr<MetricsServer> server_;
};

}  // namespace troika
