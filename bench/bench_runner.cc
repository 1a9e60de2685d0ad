#include "bench/bench_runner.h"

#include <algorithm>
#include <barrier>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/transport.h"

namespace troika::bench {
namespace {

Measurement Row(Kind kind, size_t bytes, int tensors = 1) {
  Measurement m;
  m.kind = kind;
  m.bytes = bytes;
  m.tensors = tensors;
  return m;
}

}  // namespace

std::vector<std::vector<Measurement>> MeasurementSchedule(const BenchOptions& options) {
  std::vector<std::vector<Measurement>> schedule;
  for (Kind kind : options.kinds) {
    std::vector<Measurement> rows;
    if (kind == Kind::kManySmall) {
      rows.push_back(Row(kind, EffectiveBytes(kind, options.small_tensor_bytes, options.ranks),
                         options.small_tensors));
    } else if (kind == Kind::kLatency) {
      rows.push_back(Row(kind, 4));
    } else {
      for (size_t requested : options.sizes) {
        const size_t bytes = EffectiveBytes(kind, requested, options.ranks);
        if (rows.empty() || rows.back().bytes != bytes) rows.push_back(Row(kind, bytes));
      }
    }
    schedule.push_back(std::move(rows));
  }
  return schedule;
}

namespace {

// What the rank threads share: the first error, every rank's endpoints (to tear them all
// down on an error, so that no rank hangs), and a barrier after each kind. Thread-safe.
class RankGroup {
 public:
  explicit RankGroup(int ranks) : barrier_(ranks), raw_(ranks), troika_(ranks) {}

  void Register(int rank, transport::Communicator* raw, Context* troika) {
    std::lock_guard<std::mutex> lock(mu_);
    raw_[rank] = raw;
    troika_[rank] = troika;
    if (!error_.ok()) TearDownLocked();
  }
  // Before the rank destroys its endpoints.
  void Unregister(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    raw_[rank] = nullptr;
    troika_[rank] = nullptr;
  }
  void Fail(int rank, const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) {
      error_ = absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
    }
    TearDownLocked();
  }
  absl::Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  std::barrier<>& barrier() { return barrier_; }

 private:
  void TearDownLocked() {
    for (transport::Communicator* raw : raw_) {
      if (raw != nullptr) raw->Abort();
    }
    for (Context* troika : troika_) {
      if (troika != nullptr) troika->Shutdown().IgnoreError();
    }
  }

  std::barrier<> barrier_;
  std::mutex mu_;
  absl::Status error_;                         // guarded by mu_
  std::vector<transport::Communicator*> raw_;  // guarded by mu_
  std::vector<Context*> troika_;               // guarded by mu_
};

// seconds[rank][kind][row][2 * repeat + (0 raw, 1 troika)]
using Seconds = std::vector<std::vector<std::vector<std::vector<double>>>>;

class RankRunner {
 public:
  RankRunner(int rank, const BenchOptions& options, std::vector<std::vector<Measurement>>& schedule,
             Seconds& seconds, RankGroup& group, transport::Store& store,
             const KindDone& on_kind_done)
      : rank_(rank),
        options_(options),
        schedule_(schedule),
        seconds_(seconds),
        group_(group),
        store_(store),
        on_kind_done_(on_kind_done) {}

  void Run() {
    absl::Status status = Connect();
    if (status.ok()) {
      group_.Register(rank_, raw_.get(), troika_.get());
      status = MeasureAll();
    }
    if (!status.ok()) {
      group_.Fail(rank_, status);
      group_.barrier().arrive_and_drop();
    }
    group_.Unregister(rank_);
    if (troika_ != nullptr) troika_->Shutdown().IgnoreError();
  }

 private:
  absl::Status Connect() {
    ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport,
                     transport::CreateTransport(options_.transport));
    transport::CommunicatorSpec spec;
    spec.rank = rank_;
    spec.size = options_.ranks;
    spec.store_prefix = "bench/raw/";
    spec.timeout = absl::Seconds(60);
    ASSIGN_OR_RETURN(raw_, transport->Connect(spec, store_));
    Options troika_options;
    troika_options.coordinator = options_.coordinator;
    troika_options.plaintext = true;  // the embedded coordinator, on loopback
    troika_options.job_token = "troika-bench";
    troika_options.job = options_.job;
    troika_options.rank = rank_;
    troika_options.size = options_.ranks;
    troika_options.host = "localhost";
    troika_options.transport = options_.transport;
    troika_options.attach_timeout = absl::Seconds(30);
    troika_options.data_timeout = absl::Seconds(60);
    ASSIGN_OR_RETURN(troika_, Context::Init(troika_options));
    return absl::OkStatus();
  }

  absl::Status MeasureAll() {
    for (size_t k = 0; k < schedule_.size(); ++k) {
      for (int rep = 0; rep < options_.repeat; ++rep) {
        for (size_t row = 0; row < schedule_[k].size(); ++row) {
          RETURN_IF_ERROR(MeasureRow(k, row, rep));
        }
      }
      group_.barrier().arrive_and_wait();  // every rank's seconds for kind k are written
      if (rank_ == 0 && group_.error().ok()) ReportKind(k);
    }
    return absl::OkStatus();
  }

  absl::Status MeasureRow(size_t k, size_t row, int rep) {
    const Measurement& m = schedule_[k][row];
    std::unique_ptr<Workload> workload =
        MakeWorkload(m.kind, m.bytes, m.tensors, options_.ranks, options_.wait);
    auto run_raw = [&] { return workload->RunRaw(*raw_); };
    auto run_troika = [&] { return workload->RunTroika(*troika_); };
    double raw = 0, troika = 0;
    if (m.kind == Kind::kLatency) {
      // Microseconds apart, so alternate short blocks: the machine's drift hits both alike.
      ASSIGN_OR_RETURN(std::tie(raw, troika),
                       TimeInterleaved(*raw_, run_raw, run_troika, options_.timing));
    } else {
      ASSIGN_OR_RETURN(raw, TimeIterations(*raw_, run_raw, options_.timing));
      ASSIGN_OR_RETURN(troika, TimeIterations(*raw_, run_troika, options_.timing));
    }
    std::vector<double>& slot = seconds_[rank_][k][row];
    slot[2 * rep] = raw;
    slot[2 * rep + 1] = troika;
    return absl::OkStatus();
  }

  // Rank 0, after the barrier: the maximum over ranks of each row's per-rank means.
  void ReportKind(size_t k) {
    std::vector<Measurement>& rows = schedule_[k];
    for (size_t row = 0; row < rows.size(); ++row) {
      rows[row].raw_seconds.assign(options_.repeat, 0.0);
      rows[row].troika_seconds.assign(options_.repeat, 0.0);
      for (int r = 0; r < options_.ranks; ++r) {
        const std::vector<double>& slot = seconds_[r][k][row];
        for (int rep = 0; rep < options_.repeat; ++rep) {
          rows[row].raw_seconds[rep] = std::max(rows[row].raw_seconds[rep], slot[2 * rep]);
          rows[row].troika_seconds[rep] =
              std::max(rows[row].troika_seconds[rep], slot[2 * rep + 1]);
        }
      }
    }
    on_kind_done_(options_.kinds[k], rows);
  }

  const int rank_;
  const BenchOptions& options_;
  std::vector<std::vector<Measurement>>& schedule_;
  Seconds& seconds_;
  RankGroup& group_;
  transport::Store& store_;
  const KindDone& on_kind_done_;
  std::unique_ptr<transport::Communicator> raw_;
  std::unique_ptr<Context> troika_;
};

}  // namespace

absl::Status RunBenchmark(const BenchOptions& options, const KindDone& on_kind_done) {
  std::vector<std::vector<Measurement>> schedule = MeasurementSchedule(options);
  Seconds seconds(options.ranks);
  for (auto& per_rank : seconds) {
    for (const auto& rows : schedule) {
      per_rank.emplace_back(rows.size(), std::vector<double>(2 * options.repeat, 0.0));
    }
  }
  transport::InMemoryStore store;
  RankGroup group(options.ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < options.ranks; ++rank) {
    threads.emplace_back([&, rank] {
      RankRunner(rank, options, schedule, seconds, group, store, on_kind_done).Run();
    });
  }
  for (std::thread& t : threads) t.join();
  return group.error();
}

}  // namespace troika::bench
