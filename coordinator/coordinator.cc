#include "coordinator/coordinator.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace troika::coordinator {

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(CoordinatorOptions options,
                                                                Clock& clock) {
  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<Coordinator> c(new Coordinator);
  c->scheduler_ = std::make_unique<Scheduler>();
  c->registry_ = std::make_unique<JobRegistry>(options.registry, *c->scheduler_, clock);
  c->keep_jobs_ = options.registry.state_store != nullptr;
  if (const int restored = c->registry_->RestoreJobs(); restored > 0) {
    TROIKA_LOG(INFO) << "restored " << restored << " jobs from "
                     << options.registry.state_store->dir() << "; waiting for their agents";
  }
  c->service_ = std::make_unique<CoordinatorService>(*c->registry_, options.service);
  grpc::ServerBuilder builder;
  // grpc.health.v1.Health on the same port: SERVING until Shutdown().
  grpc::EnableDefaultHealthCheckService(true);
  if (!options.metrics_listen.empty()) {
    c->metrics_ = std::make_unique<ServiceMetrics>(std::make_shared<CoordinatorMetrics>(
        *c->registry_, CoordinatorMetricsOptions{options.metrics_max_rank_series,
                                                 options.registry.job.stall.warning_time}));
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
    factories.push_back(c->metrics_->MakeInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(factories));
  }
  builder.AddListeningPort(options.listen_address, *credentials, &c->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Pings every half timeout, each answered within the other half, or the connection dies.
  const int half_ms = static_cast<int>(absl::ToInt64Milliseconds(options.liveness_timeout) / 2);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, std::max(half_ms, 100));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, std::max(half_ms, 100));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Peers ping us at the same rate; do not punish them for it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.RegisterService(c->service_.get());
  c->server_ = builder.BuildAndStart();
  if (!c->server_ || c->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address, " (address in use?)"));
  }
  TROIKA_LOG(INFO) << "coordinator listening on " << options.listen_address << " (port " << c->port_
                   << ")";
  c->serving_ = true;
  if (c->metrics_) {
    Coordinator* self = c.get();
    absl::Status s = c->metrics_->Serve(options.metrics_listen, [self]() -> absl::Status {
      if (self->serving_) return absl::OkStatus();
      return absl::UnavailableError("the coordinator is shutting down");
    });
    if (!s.ok()) return s;
  }
  return c;
}

int Coordinator::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

Coordinator::~Coordinator() {
  Shutdown(absl::ZeroDuration());
  if (metrics_) metrics_->StopServing();  // before what its handlers read
}

void Coordinator::Shutdown(absl::Duration grace) {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  serving_ = false;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  if (keep_jobs_) {
    registry_->DetachAll("the coordinator is restarting; its jobs resume with their agents");
  } else {
    registry_->AbortAll("the coordinator is shutting down");
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  // No timer may fire into a job or the registry while they are destroyed.
  scheduler_->Stop();
}

void Coordinator::Wait() { server_->Wait(); }

}  // namespace troika::coordinator
