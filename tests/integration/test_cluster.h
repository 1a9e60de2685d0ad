#pragma once
// TestCluster: a real coordinator on loopback (port 0) and N ranks as threads, each with its
// own troika::Context over real Gloo TCP — the whole client and service, in one process.

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/state/secret.h"
#include "gtest/gtest.h"
#include "troika/troika.h"

namespace troika::testing {

// Runs `command` in a shell; returns its exit code (-1 if it did not exit normally), its
// stdout and stderr appended to `output`.
inline int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs fn(rank) on `size` threads at once and joins them.
inline void OnEveryRank(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

inline constexpr char kTestJobToken[] = "test-job-token";
inline constexpr char kTestAdminToken[] = "test-admin-token";

class TestCluster {
 public:
  explicit TestCluster(coordinator::NegotiatorOptions negotiator = {})
      : TestCluster(WithNegotiator(negotiator)) {}
  // Any listen address in `options` is replaced by loopback port 0, served in plaintext (as
  // troikarun's embedded coordinator), with kTestAdminToken as its admin token; every job
  // uses kTestJobToken. Clients started from this process — agents, troikactl, troika_init —
  // find TROIKA_PLAINTEXT=1 and both tokens in their environment; RankOptions() says it.
  // TROIKA_TEST_SCHEDULES=1 in the environment turns steady-state schedules on, and
  // TROIKA_TEST_TRANSPORT names the ranks' data plane (suites re-run with them:
  // tests/integration/CMakeLists.txt).
  explicit TestCluster(coordinator::CoordinatorOptions options) {
    if (const char* on = std::getenv("TROIKA_TEST_SCHEDULES"); on != nullptr && *on == '1') {
      options.registry.job.schedules = true;
    }
    options.listen_address = "127.0.0.1:0";
    options.tls = {};
    options.tls.plaintext = true;
    options.service.admin_token = coordinator::Secret::Of(kTestAdminToken);
    setenv("TROIKA_PLAINTEXT", "1", 1);
    setenv("TROIKA_JOB_TOKEN", kTestJobToken, 1);
    setenv("TROIKA_ADMIN_TOKEN", kTestAdminToken, 1);
    auto c = coordinator::Coordinator::Start(options);
    EXPECT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(coordinator_->port()); }
  coordinator::Coordinator& coordinator() { return *coordinator_; }

  Options RankOptions(const std::string& job, int rank, int size) const {
    Options o;
    o.coordinator = address();
    o.plaintext = true;
    o.job_token = kTestJobToken;
    o.job = job;
    o.rank = rank;
    o.size = size;
    o.host = "localhost";
    o.attach_timeout = absl::Seconds(30);
    o.data_timeout = absl::Seconds(60);
    if (const char* transport = std::getenv("TROIKA_TEST_TRANSPORT"); transport != nullptr) {
      o.transport = transport;
    }
    return o;
  }

  // Joins `size` ranks to `job` concurrently; every Init must succeed.
  std::vector<std::unique_ptr<Context>> Join(const std::string& job, int size) {
    std::vector<std::unique_ptr<Context>> contexts(size);
    OnEveryRank(size, [&](int rank) {
      auto c = Context::Init(RankOptions(job, rank, size));
      EXPECT_TRUE(c.ok()) << "rank " << rank << ": " << c.status();
      if (c.ok()) contexts[rank] = *std::move(c);
    });
    for (auto& c : contexts) {
      if (!c) ADD_FAILURE() << "a rank failed to join";
    }
    return contexts;
  }

 private:
  static coordinator::CoordinatorOptions WithNegotiator(coordinator::NegotiatorOptions n) {
    coordinator::CoordinatorOptions options;
    options.registry.job.negotiator = n;
    return options;
  }

  std::unique_ptr<coordinator::Coordinator> coordinator_;
};

}  // namespace troika::testing
