#include "bench/job_rank.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/file_store.h"
#include "common/status_macros.h"
#include "libclient/transport/transport.h"

namespace troika::bench {
namespace {

absl::StatusOr<std::unique_ptr<transport::Communicator>> ConnectRaw(const BenchOptions& options,
                                                                    const Context& troika,
                                                                    FileStore& store) {
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport,
                   transport::CreateTransport(options.transport));
  transport::CommunicatorSpec spec;
  spec.rank = troika.rank();
  spec.size = troika.size();
  spec.store_prefix = "bench/raw/";
  spec.timeout = absl::Seconds(60);
  return transport->Connect(spec, store);
}

// One row's mean seconds per iteration on this rank: {raw, troika}.
absl::StatusOr<std::pair<double, double>> MeasureRow(const BenchOptions& options,
                                                     const Measurement& m, int ranks,
                                                     transport::Communicator& raw,
                                                     Context& troika) {
  std::unique_ptr<Workload> workload =
      MakeWorkload(m.kind, m.bytes, m.tensors, ranks, options.wait);
  auto run_raw = [&] { return workload->RunRaw(raw); };
  auto run_troika = [&] { return workload->RunTroika(troika); };
  if (m.kind == Kind::kLatency) return TimeInterleaved(raw, run_raw, run_troika, options.timing);
  ASSIGN_OR_RETURN(double raw_seconds, TimeIterations(raw, run_raw, options.timing));
  ASSIGN_OR_RETURN(double troika_seconds, TimeIterations(raw, run_troika, options.timing));
  return std::make_pair(raw_seconds, troika_seconds);
}

// Measures every row of `rows` `repeat` times; then the slowest rank's times (an allreduce
// of the maxima over the raw communicator) land in `rows` on every rank.
absl::Status MeasureKind(const BenchOptions& options, int ranks, std::vector<Measurement>& rows,
                         transport::Communicator& raw, Context& troika) {
  const int repeat = options.repeat;
  std::vector<double> seconds(rows.size() * 2 * repeat, 0.0);
  for (int rep = 0; rep < repeat; ++rep) {
    for (size_t row = 0; row < rows.size(); ++row) {
      ASSIGN_OR_RETURN(auto pair, MeasureRow(options, rows[row], ranks, raw, troika));
      seconds[(row * repeat + rep) * 2] = pair.first;
      seconds[(row * repeat + rep) * 2 + 1] = pair.second;
    }
  }
  RETURN_IF_ERROR(
      raw.Allreduce(seconds.data(), seconds.size(), DataType::kFloat64, ReduceOp::kMax));
  for (size_t row = 0; row < rows.size(); ++row) {
    rows[row].raw_seconds.assign(repeat, 0.0);
    rows[row].troika_seconds.assign(repeat, 0.0);
    for (int rep = 0; rep < repeat; ++rep) {
      rows[row].raw_seconds[rep] = seconds[(row * repeat + rep) * 2];
      rows[row].troika_seconds[rep] = seconds[(row * repeat + rep) * 2 + 1];
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunJobRank(const BenchOptions& requested, const std::string& store_dir,
                        const KindDone& on_kind_done) {
  ASSIGN_OR_RETURN(Options troika_options, Options::FromEnvironment());
  ASSIGN_OR_RETURN(std::unique_ptr<Context> troika, Context::Init(troika_options));
  BenchOptions options = requested;
  options.ranks = troika->size();
  std::error_code error;
  std::filesystem::create_directories(store_dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create --store_dir ", store_dir, ": ", error.message()));
  }
  FileStore store(store_dir);
  absl::StatusOr<std::unique_ptr<transport::Communicator>> raw =
      ConnectRaw(options, *troika, store);
  absl::Status status = raw.status();
  std::vector<std::vector<Measurement>> schedule = MeasurementSchedule(options);
  for (size_t k = 0; status.ok() && k < schedule.size(); ++k) {
    status = MeasureKind(options, options.ranks, schedule[k], **raw, *troika);
    if (status.ok() && troika->rank() == 0) on_kind_done(options.kinds[k], schedule[k]);
  }
  if (status.ok()) status = (*raw)->Barrier();  // no rank still reads the store
  if (status.ok() && troika->rank() == 0) status = store.RemoveAll();
  status.Update(troika->Shutdown());
  return status;
}

}  // namespace troika::bench
