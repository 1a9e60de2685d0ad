#pragma once
// RunJobRank: this process as one rank of the troikarun job that started it, so that the
// ranks are processes, as users run them (RunBenchmark's ranks are threads of one process):
//
//   troikarun -np 4 -- troika-bench --job_rank [--transport shm] [--ops ...]
//
// Troika's side is the job's own Context (Options::FromEnvironment: troikarun's coordinator
// and its settings — schedules, cycle time, fusion — and TROIKA_TRANSPORT for its data
// plane). The raw communicator (options.transport) bootstraps through a FileStore in
// `store_dir`, which every rank of the job names alike; rank 0 removes it at the end.
// Every rank measures RunBenchmark's schedule in the same way (timing agreed over the raw
// communicator); rank 0 calls `on_kind_done` with the slowest rank's times.
//
// Thread contract: blocks; `on_kind_done` runs on the calling thread of rank 0 only.

#include <string>

#include "absl/status/status.h"
#include "bench/bench_runner.h"

namespace troika::bench {

// `options.ranks`, `coordinator` and `job` are ignored (the job's own); the others as for
// RunBenchmark. A failure on any rank fails every rank (troikarun ends the job, or the raw
// communicator's timeout does).
absl::Status RunJobRank(const BenchOptions& options, const std::string& store_dir,
                        const KindDone& on_kind_done);

}  // namespace troika::bench
