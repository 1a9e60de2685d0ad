#include "common/metrics_server.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/text_serializer.h"

namespace troika {
namespace {

void Reply(mg_connection* conn, int status, const char* reason, const char* content_type,
           const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            status, reason, content_type, body.size());
  mg_write(conn, body.data(), body.size());
}

// Where to connect to reach a server listening on `listen_address` ("host:port"): a wildcard
// host is reached on loopback.
std::string LocalHost(const std::string& listen_address) {
  std::string host = listen_address.substr(0, listen_address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

// Stops `server`. civetweb's listener thread notices the stop only when its poll() returns,
// which without traffic takes up to 2 s; connecting to the port (and hanging up at once) wakes
// it, so shutting down a process is not held up.
void StopPromptly(CivetServer& server, const std::string& host, int port) {
  std::atomic<bool> stopped = false;
  std::thread waker([&stopped, &host, port] {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return;
    while (!stopped.load()) {
      const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        (void)connect(fd, found->ai_addr, found->ai_addrlen);
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    freeaddrinfo(found);
  });
  server.close();  // waits for handlers in progress
  stopped = true;
  waker.join();
}

class FunctionHandler : public CivetHandler {
 public:
  explicit FunctionHandler(std::function<void(mg_connection*)> fn) : fn_(std::move(fn)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    fn_(conn);
    return true;
  }

 private:
  std::function<void(mg_connection*)> fn_;
};

}  // namespace

class MetricsServer::Impl {
 public:
  explicit Impl(Readiness readiness)
      : readiness_(std::move(readiness)),
        metrics_([this](mg_connection* c) { ServeMetrics(c); }),
        healthz_([](mg_connection* c) { Reply(c, 200, "OK", "text/plain", "ok\n"); }),
        readyz_([this](mg_connection* c) { ServeReadiness(c); }) {}

  absl::Status Start(const std::string& listen_address) {
    const size_t colon = listen_address.rfind(':');
    int port = -1;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(listen_address).substr(colon + 1), &port) || port < 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics address '", listen_address, "' is not host:port"));
    }
    // civetweb's "0" port means any; "error_log_file" unset keeps it quiet.
    const std::vector<std::string> options = {"listening_ports", listen_address, "num_threads",
                                              "4"};
    try {
      server_ = std::make_unique<CivetServer>(options);
    } catch (const CivetException& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", listen_address, ": ", e.what()));
    }
    server_->addHandler("/metrics$", metrics_);
    server_->addHandler("/healthz$", healthz_);
    server_->addHandler("/readyz$", readyz_);
    const std::vector<int> ports = server_->getListeningPorts();
    port_ = ports.empty() ? 0 : ports.front();
    local_host_ = LocalHost(listen_address);
    return absl::OkStatus();
  }

  ~Impl() {
    if (server_) StopPromptly(*server_, local_host_, port_);
  }

  int port() const { return port_; }

  void Register(std::weak_ptr<prometheus::Collectable> collectable) {
    std::lock_guard<std::mutex> lock(mu_);
    collectables_.push_back(std::move(collectable));
  }

 private:
  void ServeMetrics(mg_connection* conn) {
    std::vector<std::weak_ptr<prometheus::Collectable>> collectables;
    {
      std::lock_guard<std::mutex> lock(mu_);
      collectables = collectables_;
    }
    std::vector<prometheus::MetricFamily> families;
    for (const auto& weak : collectables) {
      if (auto collectable = weak.lock()) {
        for (auto& family : collectable->Collect()) families.push_back(std::move(family));
      }
    }
    Reply(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
          prometheus::TextSerializer().Serialize(families));
  }

  void ServeReadiness(mg_connection* conn) {
    const absl::Status ready = readiness_ ? readiness_() : absl::OkStatus();
    if (ready.ok()) {
      Reply(conn, 200, "OK", "text/plain", "ok\n");
    } else {
      Reply(conn, 503, "Service Unavailable", "text/plain", absl::StrCat(ready.message(), "\n"));
    }
  }

  const Readiness readiness_;
  FunctionHandler metrics_, healthz_, readyz_;
  std::unique_ptr<CivetServer> server_;
  int port_ = 0;
  std::string local_host_;  // where port_ is reached from this host
  std::mutex mu_;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;  // guarded by mu_
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen_address, Readiness readiness) {
  auto impl = std::make_unique<Impl>(std::move(readiness));
  if (absl::Status s = impl->Start(listen_address); !s.ok()) return s;
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsServer::~MetricsServer() = default;
int MetricsServer::port() const { return impl_->port(); }
void MetricsServer::Register(std::weak_ptr<prometheus::Collectable> collectable) {
  impl_->Register(std::move(collectable));
}

// ---- process metrics ---------------------------------------------------------------------

namespace {

class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    const long ticks = sysconf(_SC_CLK_TCK);
    const long page = sysconf(_SC_PAGESIZE);
    std::ifstream stat_file("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), {});
    // Fields after the command name, which is in parentheses and may hold spaces.
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && ticks > 0) {
      std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
      // f[0] is field 3 (state): utime is field 14, stime 15, starttime 22, vsize 23, rss 24.
      if (f.size() > 22) {
        const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
        Add(out, "process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
            prometheus::MetricType::Counter, cpu);
        Add(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
            prometheus::MetricType::Gauge, std::stod(f[20]));
        Add(out, "process_resident_memory_bytes", "Resident memory size in bytes.",
            prometheus::MetricType::Gauge, std::stod(f[21]) * page);
        if (const double boot = BootTime(); boot > 0) {
          Add(out, "process_start_time_seconds",
              "Start time of the process since the Unix epoch, in seconds.",
              prometheus::MetricType::Gauge, boot + std::stod(f[19]) / ticks);
        }
      }
    }
    Add(out, "process_open_fds", "Open file descriptors.", prometheus::MetricType::Gauge,
        OpenFds());
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      Add(out, "process_max_fds", "Maximum number of open file descriptors.",
          prometheus::MetricType::Gauge, static_cast<double>(limit.rlim_cur));
    }
    return out;
  }

 private:
  static void Add(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
                  prometheus::MetricType type, double value) {
    prometheus::ClientMetric m;
    if (type == prometheus::MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    out.push_back({name, help, type, {m}});
  }

  static double BootTime() {
    std::ifstream in("/proc/stat");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
    }
    return 0;
  }

  static double OpenFds() {
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return 0;
    int n = 0;
    while (readdir(dir) != nullptr) ++n;
    closedir(dir);
    return n - 3;  // ".", ".." and the directory's own descriptor
  }
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeProcessCollector() {
  return std::make_shared<ProcessCollector>();
}

// ---- RPC metrics -------------------------------------------------------------------------

class RpcMetrics::Impl {
 public:
  explicit Impl(prometheus::Registry& registry)
      : durations_(prometheus::BuildHistogram()
                       .Name("troika_rpc_duration_seconds")
                       .Help("Unary RPC latency, call start to status sent.")
                       .Register(registry)),
        calls_(prometheus::BuildCounter()
                   .Name("troika_rpcs_total")
                   .Help("Finished RPCs by method and status code.")
                   .Register(registry)),
        streams_(prometheus::BuildGauge()
                     .Name("troika_streams_connected")
                     .Help("Open streaming RPCs by method.")
                     .Register(registry)) {}

  prometheus::Histogram& Duration(const std::string& method) {
    static const prometheus::Histogram::BucketBoundaries kBuckets = {
        .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1,
        .25,   .5,     1,     2.5,  5,     10,   30,  60,   300};
    return durations_.Add({{"method", method}}, kBuckets);
  }
  prometheus::Counter& Calls(const std::string& method, const std::string& code) {
    return calls_.Add({{"method", method}, {"code", code}});
  }
  prometheus::Gauge& Streams(const std::string& method) {
    return streams_.Add({{"method", method}});
  }

 private:
  prometheus::Family<prometheus::Histogram>& durations_;
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Gauge>& streams_;
};

namespace {

// One per call: created when the call starts, destroyed when it ends (also when cancelled).
class RpcInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(RpcMetrics::Impl& metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        start_(std::chrono::steady_clock::now()),
        streaming_(info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) {
    const std::string full = info->method();
    method_ = full.substr(full.rfind('/') + 1);
    if (streaming_) metrics_.Streams(method_).Increment();
  }

  ~RpcInterceptor() override {
    if (streaming_) metrics_.Streams(method_).Decrement();
    metrics_.Calls(method_, code_).Increment();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      code_ = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
      if (!streaming_) {
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
        metrics_.Duration(method_).Observe(elapsed.count());
      }
    }
    methods->Proceed();
  }

 private:
  RpcMetrics::Impl& metrics_;
  const std::chrono::steady_clock::time_point start_;
  const bool streaming_;
  std::string method_;
  std::string code_ = "CANCELLED";  // until a status is sent
};

class RpcInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(RpcMetrics::Impl& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info);
  }

 private:
  RpcMetrics::Impl& metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry& registry) : impl_(std::make_unique<Impl>(registry)) {}
RpcMetrics::~RpcMetrics() = default;

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::MakeInterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(*impl_);
}

ServiceMetrics::ServiceMetrics(std::shared_ptr<prometheus::Collectable> service)
    : service_(std::move(service)),
      process_(MakeProcessCollector()),
      rpc_registry_(std::make_shared<prometheus::Registry>()),
      rpc_(*rpc_registry_) {}

ServiceMetrics::~ServiceMetrics() { StopServing(); }

absl::Status ServiceMetrics::Serve(const std::string& listen_address,
                                   MetricsServer::Readiness readiness) {
  auto server = MetricsServer::Start(listen_address, std::move(readiness));
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  server_->Register(service_);
  server_->Register(rpc_registry_);
  server_->Register(process_);
  TROIKA_LOG(INFO) << "metrics on " << listen_address << " (port " << server_->port() << ")";
  return absl::OkStatus();
}

}  // namespace troika
