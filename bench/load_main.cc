// troika-load-bench: one troika-coordinator process driven by simulated nodes and ranks with a
// fake data plane. Each simulated endpoint speaks the real protocol over gRPC — an agent's (one
// session for its node's ranks, requests compacted per node: aggregation) or a rank's (one
// session per rank) — submits `--tensors` allreduces per step, waits for their responses and
// starts the next step at once (the data plane takes no time). Reports steps/s, negotiated
// tensors/s, negotiation latency (request sent to response received, p50/p99 over every
// tensor), and the coordinator process's CPU (cores busy) and resident memory.
//
// Usage: troika-load-bench [--ranks 64,256,1024,4096] [--ranks_per_node 8] [--tensors 200]
//                          [--modes agg+cache,agg,direct+cache,direct] [--seconds 5]

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/flags_usage.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "troika/v1/troika.grpc.pb.h"

ABSL_FLAG(std::string, ranks, "64,256,1024,4096", "simulated job sizes to run, in order");
ABSL_FLAG(int, ranks_per_node, 8, "ranks per simulated node (agent) in the aggregated modes");
ABSL_FLAG(int, tensors, 200, "allreduces per step");
ABSL_FLAG(int, tensor_elements, 1024, "float32 elements per tensor (sizes the fusion)");
ABSL_FLAG(std::string, modes, "agg+cache,agg,direct+cache,direct",
          "agg: one session per node with compacted requests (as troika-agent); direct: one "
          "session per rank; +cache: the response cache on (1024 entries), else off");
ABSL_FLAG(double, seconds, 5, "measure for this long after 2 warm-up steps (at least 3 steps)");
ABSL_FLAG(int, max_direct_ranks, 1024,
          "skip direct modes above this many ranks (one thread and stream per rank)");
ABSL_FLAG(std::string, coordinator, "",
          "troika-coordinator binary; default: ../coordinator/troika-coordinator beside this");

extern char** environ;

namespace troika::bench {
namespace {

constexpr char kToken[] = "troika-load-bench";

std::string BesideMe(const std::string& relative) {
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string(".");
  return dir.substr(0, dir.rfind('/') + 1) + relative;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// CPU seconds (user + system) and resident bytes of process `pid`.
struct Usage {
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};
Usage UsageOf(pid_t pid) {
  Usage u;
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    // Fields after ")": state is [0]; utime [11], stime [12] (proc(5) numbering 14 and 15).
    int64_t utime = 0, stime = 0;
    if (fields.size() > 12 && absl::SimpleAtoi(fields[11], &utime) &&
        absl::SimpleAtoi(fields[12], &stime)) {
      u.cpu_seconds = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
    }
  }
  for (absl::string_view line :
       absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::ConsumePrefix(&line, "VmRSS:")) {
      int64_t kb = 0;
      if (absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kb)) {
        u.rss_bytes = kb * 1024;
      }
    }
  }
  return u;
}

struct CoordinatorProcess {
  pid_t pid = -1;
  int port = 0;
};

CoordinatorProcess StartCoordinator(const std::string& binary, bool cache) {
  const std::string port_file = absl::StrCat("/tmp/troika-load-bench-", getpid(), ".port");
  unlink(port_file.c_str());
  std::vector<std::string> argv = {binary, "--listen=127.0.0.1:0", "--plaintext",
                                   "--port_file=" + port_file, "--log_level=error",
                                   absl::StrCat("--cache_capacity=", cache ? 1024 : 0),
                                   "--max_pending_tensors=1000000",
                                   // Negotiation is what is measured: the simulated endpoints
                                   // do not execute steady-state schedules (on by default).
                                   "--schedules=false"};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  CoordinatorProcess c;
  if (posix_spawn(&c.pid, binary.c_str(), nullptr, nullptr, args.data(), environ) != 0) return {};
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &c.port) && c.port > 0) {
      unlink(port_file.c_str());
      return c;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(c.pid, SIGKILL);
  waitpid(c.pid, nullptr, 0);
  return {};
}

struct Mode {
  std::string name;
  bool aggregated = false;
  bool cache = false;
};

// The measured window, shared by every endpoint.
struct Shared {
  int tensors = 0;
  int elements = 0;
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};  // endpoints past their warm-up
};

// One simulated endpoint: a node's agent (ranks.size() > 1 or aggregated) or one rank.
class Endpoint {
 public:
  Endpoint(std::shared_ptr<grpc::Channel> channel, std::string job, int size,
           std::vector<int> ranks, bool compacted, Shared& shared)
      : stub_(v1::Coordinator::NewStub(std::move(channel))),
        job_(std::move(job)),
        size_(size),
        ranks_(std::move(ranks)),
        compacted_(compacted),
        shared_(shared) {}

  std::string error;
  int measured_steps = 0;
  std::vector<double> latencies_us;  // of measured tensors

  // Ends the session now (a step some endpoints started after the window closed never
  // completes). Any thread.
  void Cancel() { context_.TryCancel(); }

  void Run() {
    if (!Attach()) return;
    grpc::ClientContext& context = context_;
    context.AddMetadata(kJobTokenHeader, kToken);
    auto stream = stub_->Session(&context);
    v1::Up hello;
    hello.mutable_hello()->set_job(job_);
    for (int r : ranks_) hello.mutable_hello()->add_ranks(r);
    hello.mutable_hello()->set_epoch(1);
    stream->Write(hello);
    std::map<std::string, int32_t> ids;  // name -> cache id
    for (int step = 0; !shared_.stop.load(); ++step) {
      if (step == 2) shared_.ready.fetch_add(1);
      const bool measured = step >= 2 && shared_.measuring.load();
      v1::Up up;
      for (int t = 0; t < shared_.tensors; ++t) {
        const std::string name = absl::StrCat("grad/", t);
        AddRequest(up.mutable_requests(), name, ids);
      }
      const absl::Time sent = absl::Now();
      if (!stream->Write(up)) {
        error = "the session ended while writing";
        break;
      }
      int answered = 0;
      v1::Down down;
      while (answered < shared_.tensors && stream->Read(&down)) {
        if (down.has_abort()) {
          error = "aborted: " + down.abort().reason();
          break;
        }
        const absl::Time now = absl::Now();
        for (const v1::Response& r : down.responses().responses()) {
          const int n = std::max(r.names_size(), r.cache_ids_size());
          for (int i = 0; i < r.names_size() && i < r.cache_ids_size(); ++i) {
            ids[r.names(i)] = r.cache_ids(i);
          }
          answered += n;
          if (measured) {
            for (int i = 0; i < n; ++i) {
              latencies_us.push_back(absl::ToDoubleMicroseconds(now - sent));
            }
          }
        }
        for (const v1::CacheMiss& miss : down.responses().misses()) {
          // Evicted before it arrived: send it in full.
          for (auto it = ids.begin(); it != ids.end(); ++it) {
            if (it->second != miss.cache_id()) continue;
            v1::Up resend;
            const std::string name = it->first;
            ids.erase(it);
            AddRequest(resend.mutable_requests(), name, ids);
            stream->Write(resend);
            break;
          }
        }
        for (int32_t id : down.responses().evicted_cache_ids()) {
          for (auto it = ids.begin(); it != ids.end();) {
            it = it->second == id ? ids.erase(it) : std::next(it);
          }
        }
      }
      if (!error.empty() || answered < shared_.tensors) {
        if (error.empty()) {
          const grpc::Status status = stream->Finish();
          error = absl::StrCat("the session ended: ", status.error_message());
          return;
        }
        break;
      }
      if (measured) ++measured_steps;
    }
    context.TryCancel();
    stream->Finish().ok();
  }

 private:
  bool Attach() {
    grpc::ClientContext create_context;
    create_context.AddMetadata(kJobTokenHeader, kToken);
    v1::CreateJobRequest create;
    create.set_job(job_);
    create.set_size(size_);
    v1::CreateJobResponse created;
    if (grpc::Status s = stub_->CreateJob(&create_context, create, &created); !s.ok()) {
      error = "CreateJob: " + s.error_message();
      return false;
    }
    grpc::ClientContext context;
    context.AddMetadata(kJobTokenHeader, kToken);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::AttachRequest attach;
    attach.set_job(job_);
    attach.set_rank(ranks_[0]);
    attach.set_host(absl::StrCat("node-", ranks_[0] / std::max<size_t>(ranks_.size(), 1)));
    attach.set_timeout_ms(120000);
    for (size_t i = 1; i < ranks_.size(); ++i) attach.add_more_ranks(ranks_[i]);
    v1::AttachResponse attached;
    if (grpc::Status s = stub_->Attach(&context, attach, &attached); !s.ok()) {
      error = "Attach: " + s.error_message();
      return false;
    }
    return true;
  }

  void AddRequest(v1::RequestBatch* batch, const std::string& name,
                  const std::map<std::string, int32_t>& ids) {
    auto fill = [&](v1::Request* r) {
      if (auto it = ids.find(name); it != ids.end()) {
        r->set_cache_id(it->second);
        return;
      }
      r->set_name(name);
      r->set_type(v1::ALLREDUCE);
      r->set_dtype(v1::FLOAT32);
      r->add_shape(shared_.elements);
    };
    if (compacted_) {
      v1::Request* r = batch->add_requests();
      fill(r);
      for (int rank : ranks_) r->add_ranks(rank);
      return;
    }
    for (int rank : ranks_) {
      v1::Request* r = batch->add_requests();
      fill(r);
      r->set_rank(rank);
    }
  }

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  grpc::ClientContext context_;  // the session's
  const std::string job_;
  const int size_;
  const std::vector<int> ranks_;
  const bool compacted_;
  Shared& shared_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

int RunOne(const std::string& binary, int ranks, const Mode& mode) {
  CoordinatorProcess c = StartCoordinator(binary, mode.cache);
  if (c.pid < 0) {
    std::fprintf(stderr, "troika-load-bench: cannot start %s\n", binary.c_str());
    return 1;
  }
  const int per_node = mode.aggregated ? absl::GetFlag(FLAGS_ranks_per_node) : 1;
  const int endpoints_count = ranks / per_node;
  Shared shared;
  shared.tensors = absl::GetFlag(FLAGS_tensors);
  shared.elements = absl::GetFlag(FLAGS_tensor_elements);
  // A few connections, as many endpoints' streams share each (as nodes behind one NAT would
  // not; the coordinator's per-stream work is the same).
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 16; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // distinct connections
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", c.port),
                                                 grpc::InsecureChannelCredentials(), args));
  }
  const std::string job = absl::StrCat("load-", ranks, "-", mode.name);
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  for (int e = 0; e < endpoints_count; ++e) {
    std::vector<int> node_ranks;
    for (int r = 0; r < per_node; ++r) node_ranks.push_back(e * per_node + r);
    endpoints.push_back(std::make_unique<Endpoint>(channels[e % channels.size()], job, ranks,
                                                   node_ranks, mode.aggregated, shared));
  }
  std::vector<std::thread> threads;
  for (auto& e : endpoints) threads.emplace_back([&e] { e->Run(); });
  // Wait for every endpoint's warm-up, then measure.
  const absl::Time give_up = absl::Now() + absl::Seconds(180);
  while (shared.ready.load() < endpoints_count && absl::Now() < give_up) {
    bool failed = false;
    for (auto& e : endpoints) failed = failed || !e->error.empty();
    if (failed) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  const Usage before = UsageOf(c.pid);
  const absl::Time start = absl::Now();
  shared.measuring.store(true);
  const absl::Duration window = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  absl::SleepFor(window);
  shared.stop.store(true);
  const absl::Duration elapsed = absl::Now() - start;
  const Usage after = UsageOf(c.pid);
  absl::SleepFor(absl::Seconds(1));  // steps in flight end; those begun after stop never do
  for (auto& e : endpoints) e->Cancel();
  for (auto& t : threads) t.join();
  kill(c.pid, SIGTERM);
  waitpid(c.pid, nullptr, 0);

  std::vector<double> latencies;
  int steps = -1;
  std::string error;
  for (auto& e : endpoints) {
    if (!e->error.empty() && error.empty()) error = e->error;
    steps = steps < 0 ? e->measured_steps : std::min(steps, e->measured_steps);
    latencies.insert(latencies.end(), e->latencies_us.begin(), e->latencies_us.end());
  }
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (!error.empty() && steps <= 0) {
    std::printf("%6d %-14s failed: %s\n", ranks, mode.name.c_str(), error.c_str());
    return 0;
  }
  const double steps_per_s = steps / seconds;
  std::printf("%6d %-14s %9d %10.1f %12.0f %10.0f %10.0f %8.2f %9.0f\n", ranks, mode.name.c_str(),
              endpoints_count, steps_per_s, steps_per_s * shared.tensors,
              Percentile(latencies, 0.5), Percentile(latencies, 0.99),
              (after.cpu_seconds - before.cpu_seconds) / seconds, after.rss_bytes / 1048576.0);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace troika::bench

int main(int argc, char** argv) {
  troika::ShowFlagsOf("bench/load_main.cc");
  absl::SetProgramUsageMessage(
      "troika-load-bench: one coordinator process under simulated nodes and ranks (fake data "
      "plane).\nUsage: troika-load-bench [--ranks 64,256,1024,4096] [--ranks_per_node 8] "
      "[--tensors 200] [--modes agg+cache,agg,direct+cache,direct] [--seconds 5]");
  troika::HandleHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);
  std::string binary = absl::GetFlag(FLAGS_coordinator);
  if (binary.empty()) binary = troika::bench::BesideMe("../coordinator/troika-coordinator");
  std::vector<troika::bench::Mode> modes;
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    troika::bench::Mode mode{std::string(m), absl::StartsWith(m, "agg"),
                             absl::EndsWith(m, "+cache")};
    if (!absl::StartsWith(m, "agg") && !absl::StartsWith(m, "direct")) {
      std::fprintf(stderr, "troika-load-bench: unknown mode '%s'\n", std::string(m).c_str());
      return 2;
    }
    modes.push_back(mode);
  }
  std::printf(
      "troika-load-bench: %d allreduces per step, %d float32 elements each, %d ranks per node "
      "(agg), %.0f s per point; coordinator: %s\n",
      absl::GetFlag(FLAGS_tensors), absl::GetFlag(FLAGS_tensor_elements),
      absl::GetFlag(FLAGS_ranks_per_node), absl::GetFlag(FLAGS_seconds), binary.c_str());
  std::printf("%6s %-14s %9s %10s %12s %10s %10s %8s %9s\n", "ranks", "mode", "sessions", "steps/s",
              "tensors/s", "p50 us", "p99 us", "cpu", "rss MiB");
  for (absl::string_view r : absl::StrSplit(absl::GetFlag(FLAGS_ranks), ',', absl::SkipEmpty())) {
    int ranks = 0;
    if (!absl::SimpleAtoi(r, &ranks) || ranks < 1) {
      std::fprintf(stderr, "troika-load-bench: bad --ranks entry '%s'\n", std::string(r).c_str());
      return 2;
    }
    for (const auto& mode : modes) {
      if (mode.aggregated && ranks % absl::GetFlag(FLAGS_ranks_per_node) != 0) continue;
      if (!mode.aggregated && ranks > absl::GetFlag(FLAGS_max_direct_ranks)) {
        std::printf("%6d %-14s skipped (--max_direct_ranks)\n", ranks, mode.name.c_str());
        continue;
      }
      if (int rc = troika::bench::RunOne(binary, ranks, mode); rc != 0) return rc;
    }
  }
  return 0;
}
