// The coordinator's metrics port end to end: a 4-rank job over a real coordinator and Gloo
// marks its steps; /metrics shows the job's series (docs/metrics.md) and passes promtool;
// /healthz, /readyz and the gRPC health service follow the coordinator's life.

#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/http_get.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

constexpr int kSize = 4;
constexpr int kSteps = 5;

coordinator::CoordinatorOptions WithMetrics() {
  coordinator::CoordinatorOptions options;
  options.metrics_listen = "127.0.0.1:0";
  return options;
}

std::string Scrape(TestCluster& cluster) {
  absl::StatusOr<HttpResponse> r = HttpGet(cluster.coordinator().metrics_port(), "/metrics");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->body : "";
}

// The value of the sample `series` (name and labels exactly as exposed), or -1 if absent.
double Sample(const std::string& text, const std::string& series) {
  const std::string key = series + " ";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    if (at == 0 || text[at - 1] == '\n') return std::atof(text.c_str() + at + key.size());
  }
  return -1;
}

// Exit status of `promtool check metrics` on `text`; its output in *report.
int Promtool(const std::string& text, std::string* report) {
  const std::string in = ::testing::TempDir() + "/metrics_test_scrape.txt";
  std::ofstream(in) << text;
  const int rc = RunCommand("promtool check metrics < " + in, report);
  EXPECT_NE(rc, 127)
      << "promtool is not installed: install the Debian package `prometheus` (/usr/bin/promtool)";
  return rc;
}

// grpc.health.v1.Health/Check for service "": the raw response bytes.
absl::StatusOr<std::string> HealthCheck(const std::string& address) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty;  // an empty HealthCheckRequest (service "") is zero bytes
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("cannot read the response");
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST(MetricsTest, FourRankJobIsVisibleOnTheMetricsPortAndPassesPromtool) {
  TestCluster cluster(WithMetrics());
  ASSERT_GT(cluster.coordinator().metrics_port(), 0);
  auto contexts = cluster.Join("metrics", kSize);
  OnEveryRank(kSize, [&](int rank) {
    Context& ctx = *contexts[rank];
    ctx.MarkStep();
    std::vector<float> grad(1024, 1.0f);
    for (int step = 0; step < kSteps; ++step) {
      ASSERT_TRUE(
          ctx.Allreduce("grad", grad.data(), grad.data(), DataType::kFloat32, {1024}).Wait().ok());
      ctx.MarkStep();
    }
  });
  // Step samples go up about once a second (60 s: a not-hung bound).
  const std::string steps = R"(troika_step_duration_seconds_count{troika_job="metrics"})";
  std::string text = Scrape(cluster);
  for (int i = 0; i < 600 && Sample(text, steps) < kSize * kSteps; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = Scrape(cluster);
  }
  EXPECT_EQ(Sample(text, steps), kSize * kSteps) << text;
  EXPECT_EQ(Sample(text, R"(troika_collectives_total{op="allreduce",troika_job="metrics"})"),
            kSteps);
  EXPECT_EQ(Sample(text, R"(troika_collective_bytes_total{op="allreduce",troika_job="metrics"})"),
            kSteps * 4096);
  EXPECT_EQ(Sample(text, R"(troika_job_ranks_alive{troika_job="metrics"})"), kSize);
  EXPECT_EQ(Sample(text, R"(troika_streams_connected{method="Session"})"), kSize);
  EXPECT_GE(Sample(text, R"(troika_rpc_duration_seconds_count{method="Attach"})"), kSize);
  EXPECT_GT(Sample(text, "process_resident_memory_bytes"), 0);
  EXPECT_EQ(Sample(text, "troika_jobs_active"), 1);
  std::string report;
  EXPECT_EQ(Promtool(text, &report), 0) << report << text;
  EXPECT_EQ(report, "") << text;

  for (auto& ctx : contexts) ASSERT_TRUE(ctx->Shutdown().ok());
}

TEST(MetricsTest, HealthAndReadinessFollowTheCoordinatorsLife) {
  TestCluster cluster(WithMetrics());
  const int port = cluster.coordinator().metrics_port();
  absl::StatusOr<HttpResponse> health = HttpGet(port, "/healthz");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  absl::StatusOr<HttpResponse> ready = HttpGet(port, "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->status, 200);
  absl::StatusOr<std::string> serving = HealthCheck(cluster.address());
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_EQ(*serving, std::string("\x08\x01", 2));  // status: SERVING

  cluster.coordinator().Shutdown(absl::ZeroDuration());
  ready = HttpGet(port, "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("shutting down"), std::string::npos) << ready->body;
  absl::StatusOr<HttpResponse> missing = HttpGet(port, "/nothing");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
}

}  // namespace
}  // namespace troika::testing
