// MetricsServer, the process collector and RpcMetrics over real sockets: the HTTP port on
// port 0, and a gRPC server on port 0 whose default health service gives a unary method
// (Check) and a streaming one (Watch) without a proto of our own.

#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "tests/http_get.h"

namespace troika {
namespace {

using ::testing::HasSubstr;
using testing::HttpGet;
using testing::HttpResponse;
using ::testing::Not;
using ::testing::StartsWith;

std::unique_ptr<MetricsServer> StartOrDie(MetricsServer::Readiness readiness = nullptr) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", std::move(readiness));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::shared_ptr<prometheus::Registry> RegistryWithCounter(const std::string& name, double value) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name(name).Help("test").Register(*registry).Add({}).Increment(value);
  return registry;
}

TEST(MetricsServerTest, PortZeroBindsAFreePortAndServesTheTextFormat) {
  std::unique_ptr<MetricsServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);
  auto first = RegistryWithCounter("first_things_total", 3);
  auto second = RegistryWithCounter("second_things_total", 5);
  server->Register(first);
  server->Register(second);
  const std::string raw = testing::RawHttpGet(server->port(), "/metrics").value_or("");
  EXPECT_THAT(raw, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(raw, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  const size_t at_first = raw.find("\nfirst_things_total 3\n");
  const size_t at_second = raw.find("\nsecond_things_total 5\n");
  ASSERT_NE(at_first, std::string::npos) << raw;
  ASSERT_NE(at_second, std::string::npos) << raw;
  EXPECT_LT(at_first, at_second) << "registration order";
}

TEST(MetricsServerTest, ExpiredCollectableIsSkipped) {
  std::unique_ptr<MetricsServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  auto gone = RegistryWithCounter("gone_things_total", 1);
  auto kept = RegistryWithCounter("kept_things_total", 2);
  server->Register(gone);
  server->Register(kept);
  gone.reset();
  absl::StatusOr<HttpResponse> r = HttpGet(server->port(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, Not(HasSubstr("gone_things_total")));
  EXPECT_THAT(r->body, HasSubstr("kept_things_total 2\n"));
}

TEST(MetricsServerTest, HealthzIsOkAndReadyzFollowsTheReadinessCallback) {
  std::mutex mu;
  absl::Status ready = absl::UnavailableError("not attached to the job yet");
  std::unique_ptr<MetricsServer> server = StartOrDie([&]() {
    std::lock_guard<std::mutex> lock(mu);
    return ready;
  });
  ASSERT_NE(server, nullptr);
  absl::StatusOr<HttpResponse> health = HttpGet(server->port(), "/healthz");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  absl::StatusOr<HttpResponse> r = HttpGet(server->port(), "/readyz");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "not attached to the job yet\n");
  {
    std::lock_guard<std::mutex> lock(mu);
    ready = absl::OkStatus();
  }
  r = HttpGet(server->port(), "/readyz");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
}

TEST(MetricsServerTest, OtherPathsAreNotFound) {
  std::unique_ptr<MetricsServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/", "/nothing", "/metrics/extra", "/metricsx", "/healthz/"}) {
    absl::StatusOr<HttpResponse> r = HttpGet(server->port(), path);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status();
    EXPECT_EQ(r->status, 404) << path;
  }
}

TEST(MetricsServerTest, StopsPromptlyAfterServing) {
  // civetweb alone needs up to 2 s to notice a stop; a process should not wait for that.
  for (const char* address : {"127.0.0.1:0", "0.0.0.0:0"}) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(address, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(HttpGet((*server)->port(), "/healthz").ok());
    const auto start = std::chrono::steady_clock::now();
    server->reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << address;
  }
}

TEST(MetricsServerTest, PortInUseIsUnavailableNamingTheAddress) {
  // Occupy a port with a plain listening socket.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = testing::Loopback(0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(address, nullptr);
  close(fd);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable) << server.status();
  EXPECT_THAT(server.status().message(), HasSubstr(address));
}

TEST(MetricsServerTest, MalformedAddressIsInvalidArgument) {
  for (const char* address : {"", "9091", "127.0.0.1:http", "127.0.0.1:70000", ":"}) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(address, nullptr);
    ASSERT_FALSE(server.ok()) << address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
  }
}

// The value of the metric `name` (a counter's or gauge's value, a histogram's sample count)
// with exactly `labels`, or -1 if absent.
double Value(const std::vector<prometheus::MetricFamily>& families, const std::string& name,
             const std::vector<prometheus::ClientMetric::Label>& labels = {}) {
  for (const prometheus::MetricFamily& family : families) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      if (m.label != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(m.histogram.sample_count);
        default:
          return -1;
      }
    }
  }
  return -1;
}

TEST(ProcessCollectorTest, ReportsThisProcessFromProc) {
  const std::vector<prometheus::MetricFamily> f = MakeProcessCollector()->Collect();
  const double cpu = Value(f, "process_cpu_seconds_total");
  const double rss = Value(f, "process_resident_memory_bytes");
  const double vm = Value(f, "process_virtual_memory_bytes");
  const double fds = Value(f, "process_open_fds");
  const double max_fds = Value(f, "process_max_fds");
  const double start = Value(f, "process_start_time_seconds");
  EXPECT_GE(cpu, 0);
  EXPECT_GT(rss, 1 << 20);  // a gtest binary is more than a MiB
  EXPECT_GE(vm, rss);
  EXPECT_GE(fds, 3);  // stdin, stdout, stderr
  EXPECT_GE(max_fds, fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600) << "this test started within the hour";
}

// A gRPC server on port 0 serving only the default health service, with RpcMetrics installed.
class RpcMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(rpc_.MakeInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(f));
    // Some service of our own, or the server refuses to start with only the health service.
    builder.RegisterCallbackGenericService(&unimplemented_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = std::make_unique<grpc::GenericStub>(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // Health/Check of `service` ("" is the server as a whole; others are NOT_FOUND).
  grpc::StatusCode Check(const std::string& service) {
    // HealthCheckRequest: field 1 (service), length-delimited.
    const std::string bytes =
        service.empty()
            ? ""
            : absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::mutex mu;
    std::condition_variable cv;
    std::optional<grpc::Status> status;
    stub_->UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                     &response, [&](grpc::Status s) {
                       std::lock_guard<std::mutex> lock(mu);
                       status = s;
                       cv.notify_all();
                     });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return status.has_value(); });
    return status->error_code();
  }

  // Polls `name{labels}` until it equals `want` (an interceptor records a call's end when the
  // server releases the call, just after the client has seen its status); its last value.
  double WaitFor(const std::string& name,
                 const std::vector<prometheus::ClientMetric::Label>& labels, double want) {
    double value = -1;
    for (int i = 0; i < 500; ++i) {
      value = Value(registry_.Collect(), name, labels);
      if (value == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return value;
  }

  prometheus::Registry registry_;
  RpcMetrics rpc_{registry_};
  grpc::CallbackGenericService unimplemented_;  // answers every other method UNIMPLEMENTED
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(RpcMetricsTest, UnaryCallsAreTimedAndCountedByMethodAndCode) {
  EXPECT_EQ(Check(""), grpc::StatusCode::OK);
  EXPECT_EQ(Check(""), grpc::StatusCode::OK);
  EXPECT_EQ(Check("no.such.Service"), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(WaitFor("troika_rpcs_total", {{"code", "OK"}, {"method", "Check"}}, 2), 2);
  EXPECT_EQ(WaitFor("troika_rpcs_total", {{"code", "NOT_FOUND"}, {"method", "Check"}}, 1), 1);
  EXPECT_EQ(WaitFor("troika_rpc_duration_seconds", {{"method", "Check"}}, 3), 3);
  // Buckets per docs/metrics.md: 100 µs ... 300 s.
  for (const prometheus::MetricFamily& family : registry_.Collect()) {
    if (family.name != "troika_rpc_duration_seconds") continue;
    ASSERT_EQ(family.metric.size(), 1u);
    const auto& buckets = family.metric[0].histogram.bucket;
    ASSERT_GE(buckets.size(), 2u);
    EXPECT_DOUBLE_EQ(buckets.front().upper_bound, 0.0001);
    EXPECT_DOUBLE_EQ(buckets[buckets.size() - 2].upper_bound, 300);  // the last is +Inf
  }
  EXPECT_EQ(Value(registry_.Collect(), "troika_streams_connected", {{"method", "Check"}}), -1)
      << "unary calls are not streams";
}

TEST_F(RpcMetricsTest, StreamIsConnectedUntilCancelled) {
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub_->PrepareCall(&context, "/grpc.health.v1.Health/Watch", &cq);
  auto step = [&cq](auto&& op) {
    op(reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  };
  ASSERT_TRUE(step([&](void* tag) { call->StartCall(tag); }));
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1), response;
  ASSERT_TRUE(step([&](void* tag) { call->Write(request, tag); }));
  ASSERT_TRUE(step([&](void* tag) { call->WritesDone(tag); }));
  ASSERT_TRUE(step([&](void* tag) { call->Read(&response, tag); }));  // status: SERVING
  EXPECT_EQ(WaitFor("troika_streams_connected", {{"method", "Watch"}}, 1), 1);

  context.TryCancel();
  grpc::Status status;
  step([&](void* tag) { call->Finish(&status, tag); });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(WaitFor("troika_streams_connected", {{"method", "Watch"}}, 0), 0);
  // Counted once, with the code the health service sends when its Watch is cancelled.
  EXPECT_EQ(WaitFor("troika_rpcs_total", {{"code", "UNKNOWN"}, {"method", "Watch"}}, 1), 1);
  EXPECT_EQ(Value(registry_.Collect(), "troika_rpc_duration_seconds", {{"method", "Watch"}}), -1)
      << "the latency histogram is for unary calls";
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(ServiceMetricsTest, ServesTheServiceProcessAndRpcMetricsUntilStopped) {
  ServiceMetrics metrics(RegistryWithCounter("service_things_total", 7));
  EXPECT_EQ(metrics.port(), 0);
  ASSERT_TRUE(metrics.Serve("127.0.0.1:0", nullptr).ok());
  const int port = metrics.port();
  ASSERT_GT(port, 0);
  absl::StatusOr<HttpResponse> r = HttpGet(port, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->body, HasSubstr("service_things_total 7\n"));
  EXPECT_THAT(r->body, HasSubstr("process_cpu_seconds_total "));
  metrics.StopServing();
  EXPECT_EQ(metrics.port(), 0);
  EXPECT_FALSE(HttpGet(port, "/healthz").ok()) << "nothing listens after StopServing";
}

}  // namespace
}  // namespace troika
