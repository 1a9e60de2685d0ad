// troika-bench: collective bandwidth and latency of Troika against the raw data plane it runs
// on (Gloo or shm), in the spirit of nccl-tests. Ranks are threads of this process with an
// embedded coordinator serving the Troika side (bench_runner.h), or, with --job_rank, this
// process is one rank of a troikarun job (job_rank.h). Parses flags and wires.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_runner.h"
#include "bench/byte_size.h"
#include "bench/device_bench.h"
#include "bench/job_rank.h"
#include "bench/report.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(int, np, 4, "number of ranks (threads); with --job_rank, troikarun's -np");
ABSL_FLAG(std::string, transport, "",
          "the data plane of both the raw communicator and Troika: gloo (TCP over loopback), "
          "shm (shared memory), auto or hierarchical (docs/shm.md); default: the product's "
          "(troika::Options, auto: shared memory for ranks on one host; with --job_rank, "
          "TROIKA_TRANSPORT if set, as the ranks' library reads it)");
ABSL_FLAG(bool, job_rank, false,
          "run as one rank of the troikarun job that started this process, so that ranks are "
          "processes as users run them: troikarun -np 4 -- troika-bench --job_rank. Troika's "
          "side is the job's own context (troikarun's coordinator, --schedules, --cycle-time-ms "
          "and TROIKA_TRANSPORT); --np, --schedules and --cycle_time are ignored; rank 0 prints");
ABSL_FLAG(std::string, store_dir, "",
          "--job_rank: the directory the raw communicator bootstraps through (every rank of the "
          "job must name the same one; removed at the end); default /tmp/troika-bench-$TROIKA_JOB");
ABSL_FLAG(std::string, ops,
          "allreduce,allgather,broadcast,alltoall,reducescatter,many_small,latency",
          "comma-separated workloads to run, in this order");
ABSL_FLAG(std::string, min_bytes, "4",
          "smallest collective size (bytes; K/KiB, M/MiB, G/GiB suffixes)");
ABSL_FLAG(std::string, max_bytes, "64MiB",
          "largest collective size; --max_bytes=256MiB for the full sweep (about 4x longer)");
ABSL_FLAG(int, step_factor, 4, "each size is this many times the previous one");
ABSL_FLAG(absl::Duration, time_per_size, absl::Milliseconds(300),
          "aim for a timed loop this long per size and implementation (after a warm-up)");
ABSL_FLAG(int, repeat, 1, "measure everything this many times and report the medians");
ABSL_FLAG(int, small_tensors, 256, "many_small: allreduces per step");
ABSL_FLAG(std::string, small_tensor_bytes, "16KiB", "many_small: bytes per tensor (float32)");
ABSL_FLAG(std::string, csv, "", "if set, also write every row as CSV to this file");
ABSL_FLAG(std::string, log_level, "warning", "debug, info, warning or error");
ABSL_FLAG(absl::Duration, cycle_time, absl::Milliseconds(1),
          "the coordinator's cycle time (troika-coordinator --cycle_time): how long ranks hold "
          "requests to send them together, and ready allreduces wait to fuse; 0: neither");
ABSL_FLAG(bool, schedules, true,
          "steady-state schedules (troika-coordinator --schedules, on by default as in the "
          "product): repeated steps run without a coordinator round trip; false: every "
          "collective negotiated");
ABSL_FLAG(bool, wait, true,
          "allreduce and latency: Troika's allreduce is synchronous (AllreduceOptions::wait: "
          "a scheduled one runs on the calling thread); false: Allreduce(...).Wait(), which "
          "hands it to Troika's executor thread");
ABSL_FLAG(std::string, device, "cpu",
          "cpu: the collectives above over Gloo; cuda: the GPU data plane (pack+unpack bandwidth "
          "vs the device's own copy bandwidth, small-allreduce cost vs raw NCCL) instead");

namespace {

using troika::bench::BenchOptions;
using troika::bench::Kind;
using troika::bench::Measurement;

constexpr char kUsage[] =
    "Troika collective benchmark: Troika (negotiated by a coordinator, executed by libtroika)\n"
    "against the raw communicator it runs on (Gloo or shm), ranks as threads of one process\n"
    "(or, with --job_rank, as the processes of a troikarun job).\n"
    "Usage: troika-bench [--np 4] [--ops allreduce,...] [--min_bytes 4] [--max_bytes 64MiB]\n"
    "                    [--step_factor 4] [--repeat 1] [--csv FILE] [--transport shm]\n"
    "       troikarun -np 4 -- troika-bench --job_rank [--ops ...]   (ranks as processes)\n"
    "       troika-bench --device=cuda [--repeat 3]   (the GPU data plane; docs/gpu.md)\n"
    "Workloads (--ops): allreduce (float32 sum), allgather, broadcast, alltoall, reducescatter\n"
    "(float32 sum) over the size sweep; many_small (--small_tensors allreduces of\n"
    "--small_tensor_bytes per step: Troika submits all then waits, the raw side runs them one\n"
    "by one); latency (a 4-byte allreduce, Troika and the raw side alternating in 10 ms blocks:\n"
    "the median block). Times are the slowest rank's mean per iteration;\n"
    "busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather, reducescatter and alltoall,\n"
    "1 for broadcast. Sizes up to 256MiB are supported (--max_bytes=256MiB).";

absl::StatusOr<BenchOptions> ReadFlags() {
  BenchOptions options;
  options.ranks = absl::GetFlag(FLAGS_np);
  options.repeat = absl::GetFlag(FLAGS_repeat);
  options.small_tensors = absl::GetFlag(FLAGS_small_tensors);
  options.timing.target = absl::GetFlag(FLAGS_time_per_size);
  options.wait = absl::GetFlag(FLAGS_wait);
  options.transport = absl::GetFlag(FLAGS_transport);
  if (options.transport.empty()) {
    const char* job_transport = std::getenv("TROIKA_TRANSPORT");
    options.transport = absl::GetFlag(FLAGS_job_rank) && job_transport != nullptr
                            ? job_transport
                            : troika::Options().transport;
  }
  if (options.ranks < 1 || options.repeat < 1 || options.small_tensors < 1) {
    return absl::InvalidArgumentError("--np, --repeat and --small_tensors must be >= 1");
  }
  const std::vector<std::string> names =
      absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty());
  for (const std::string& name : names) {
    std::optional<Kind> kind = troika::bench::KindFromName(name);
    if (!kind.has_value())
      return absl::InvalidArgumentError(absl::StrCat("unknown op '", name, "' in --ops"));
    options.kinds.push_back(*kind);
  }
  auto min = troika::bench::ParseByteSize(absl::GetFlag(FLAGS_min_bytes));
  auto max = troika::bench::ParseByteSize(absl::GetFlag(FLAGS_max_bytes));
  auto small = troika::bench::ParseByteSize(absl::GetFlag(FLAGS_small_tensor_bytes));
  const int factor = absl::GetFlag(FLAGS_step_factor);
  if (!min || !max || !small || *min < 1 || *max < *min || *small < 4 || factor < 2) {
    return absl::InvalidArgumentError(
        "need 1 <= --min_bytes <= --max_bytes, --small_tensor_bytes >= 4, --step_factor >= 2");
  }
  options.small_tensor_bytes = *small;
  for (size_t bytes = *min; bytes <= *max; bytes *= factor) options.sizes.push_back(bytes);
  return options;
}

void PrintHeadline(const std::vector<Measurement>& rows, int ranks) {
  const Measurement& m = rows.back();
  const double factor = troika::bench::BusFactor(m.kind, ranks);
  const double raw = m.bytes / troika::bench::Median(m.raw_seconds) / 1e9 * factor;
  const double troika = m.bytes / troika::bench::Median(m.troika_seconds) / 1e9 * factor;
  std::printf(
      "headline: allreduce %s float32, %d ranks: raw busbw %.3f GB/s, troika busbw "
      "%.3f GB/s (troika/raw %.2f)\n",
      troika::bench::FormatByteSize(m.bytes).c_str(), ranks, raw, troika, troika / raw);
}

// --job_rank: this process is one rank of a troikarun job; rank 0 reports.
int RunAsJobRank(const BenchOptions& options, std::FILE* csv) {
  const char* job = std::getenv("TROIKA_JOB");
  std::string store_dir = absl::GetFlag(FLAGS_store_dir);
  if (store_dir.empty()) store_dir = absl::StrCat("/tmp/troika-bench-", job ? job : "job");
  const char* rank = std::getenv("TROIKA_RANK");
  const bool reporter = rank != nullptr && std::string(rank) == "0";
  const char* size = std::getenv("TROIKA_SIZE");
  const int ranks = size != nullptr ? std::atoi(size) : options.ranks;
  if (reporter) {
    std::printf(
        "troika-bench: %s ranks (processes of troikarun job %s), data plane %s, sizes %s..%s "
        "x%d, ~%s per size, repeat %d\n",
        size != nullptr ? size : "?", job ? job : "?", options.transport.c_str(),
        absl::GetFlag(FLAGS_min_bytes).c_str(), absl::GetFlag(FLAGS_max_bytes).c_str(),
        absl::GetFlag(FLAGS_step_factor), absl::FormatDuration(options.timing.target).c_str(),
        options.repeat);
    std::fflush(stdout);
  }
  absl::Status status = troika::bench::RunJobRank(
      options, store_dir, [&, ranks](Kind kind, const std::vector<Measurement>& rows) {
        troika::bench::PrintKind(stdout, kind, rows, ranks, options.transport);
        if (kind == Kind::kAllreduce && !rows.empty()) PrintHeadline(rows, ranks);
        if (csv != nullptr) troika::bench::PrintCsvRows(csv, rows, ranks);
      });
  if (csv != nullptr && std::fclose(csv) != 0)
    status.Update(absl::UnavailableError("writing --csv failed"));
  if (!status.ok()) {
    std::fprintf(stderr, "troika-bench (rank %s): %s\n", rank ? rank : "?",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  troika::ShowFlagsOf("bench/bench_main.cc");
  absl::SetProgramUsageMessage(kUsage);
  troika::HandleHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);
  troika::LogSeverity severity;
  if (!troika::ParseLogSeverity(absl::GetFlag(FLAGS_log_level), &severity)) {
    std::fprintf(stderr, "troika-bench: unknown --log_level\n");
    return 2;
  }
  troika::SetMinLogSeverity(severity);
  absl::StatusOr<BenchOptions> options = ReadFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "troika-bench: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  std::FILE* csv = nullptr;
  const char* job_rank = std::getenv("TROIKA_RANK");
  const bool writes_csv =
      !absl::GetFlag(FLAGS_job_rank) || (job_rank != nullptr && std::string(job_rank) == "0");
  if (const std::string path = absl::GetFlag(FLAGS_csv); !path.empty() && writes_csv) {
    csv = std::fopen(path.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "troika-bench: cannot open --csv %s\n", path.c_str());
      return 1;
    }
    troika::bench::PrintCsvHeader(csv);
  }

  if (absl::GetFlag(FLAGS_job_rank)) return RunAsJobRank(*options, csv);

  troika::coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.listen_address = "127.0.0.1:0";
  coordinator_options.tls.plaintext = true;  // loopback only
  coordinator_options.registry.job.negotiator.cycle_time = absl::GetFlag(FLAGS_cycle_time);
  coordinator_options.registry.job.schedules = absl::GetFlag(FLAGS_schedules);
  auto coordinator = troika::coordinator::Coordinator::Start(coordinator_options);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "troika-bench: cannot start the coordinator: %s\n",
                 coordinator.status().ToString().c_str());
    return 1;
  }
  options->coordinator = absl::StrCat("127.0.0.1:", (*coordinator)->port());
  options->job = absl::StrCat("troika-bench-", getpid());
  if (const std::string device = absl::GetFlag(FLAGS_device); device != "cpu") {
    absl::Status status = device == "cuda"
                              ? troika::bench::RunDeviceBenchmark(
                                    {options->coordinator, options->job, options->repeat}, stdout)
                              : absl::InvalidArgumentError("--device is cpu or cuda");
    (*coordinator)->Shutdown(absl::Seconds(1));
    if (!status.ok()) {
      std::fprintf(stderr, "troika-bench: %s\n", status.ToString().c_str());
      return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    return 0;
  }
  std::printf(
      "troika-bench: %d ranks (threads), data plane %s, sizes %s..%s x%d, ~%s per size, "
      "repeat %d\n",
      options->ranks,
      options->transport == "gloo" ? "gloo over loopback" : options->transport.c_str(),
      absl::GetFlag(FLAGS_min_bytes).c_str(), absl::GetFlag(FLAGS_max_bytes).c_str(),
      absl::GetFlag(FLAGS_step_factor), absl::FormatDuration(options->timing.target).c_str(),
      options->repeat);
  std::fflush(stdout);

  absl::Status status =
      troika::bench::RunBenchmark(*options, [&](Kind kind, const std::vector<Measurement>& rows) {
        troika::bench::PrintKind(stdout, kind, rows, options->ranks, options->transport);
        if (kind == Kind::kAllreduce && !rows.empty()) PrintHeadline(rows, options->ranks);
        if (csv != nullptr) troika::bench::PrintCsvRows(csv, rows, options->ranks);
      });
  (*coordinator)->Shutdown(absl::Seconds(1));
  if (csv != nullptr && std::fclose(csv) != 0)
    status.Update(absl::UnavailableError("writing --csv failed"));
  if (!status.ok()) {
    std::fprintf(stderr, "troika-bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
