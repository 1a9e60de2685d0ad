#pragma once
// The benchmark's output: a table per collective (size, raw Gloo time and bandwidths, Troika
// time and bandwidths, the Troika/raw bus-bandwidth ratio), summary lines for the many-small-
// tensors workload and the 4-byte latency, and optional CSV rows. With several repeats every
// figure is computed from the median time.
//
// Not thread-safe: one thread prints.

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_runner.h"

namespace troika::bench {

double Median(std::vector<double> values);

// Writes the table (or summary lines) for one kind's rows to `out`.
// `plane` names the raw side's data plane ("gloo", "shm").
void PrintKind(std::FILE* out, Kind kind, const std::vector<Measurement>& rows, int ranks,
               const std::string& plane = "gloo");

// The CSV header line, and one line per row. Columns: op, bytes (per step for many_small),
// tensors, ranks, then for raw and troika: time_us, algbw_gbps, busbw_gbps; then
// troika_over_raw (busbw ratio; for many_small also the steps/s ratio).
void PrintCsvHeader(std::FILE* out);
void PrintCsvRows(std::FILE* out, const std::vector<Measurement>& rows, int ranks);

}  // namespace troika::bench
