#include "bench/report.h"

#include <algorithm>

#include "bench/byte_size.h"

namespace troika::bench {
namespace {

// Figures for one implementation from one row's median time.
struct Figures {
  double seconds = 0;
  double algbw = 0;  // GB/s
  double busbw = 0;  // GB/s
};

Figures Compute(const std::vector<double>& seconds, size_t bytes, Kind kind, int ranks) {
  Figures f;
  f.seconds = Median(seconds);
  if (f.seconds > 0) f.algbw = static_cast<double>(bytes) / f.seconds / 1e9;
  f.busbw = f.algbw * BusFactor(kind, ranks);
  return f;
}

size_t TotalBytes(const Measurement& m) { return m.bytes * static_cast<size_t>(m.tensors); }

double Ratio(const Figures& raw, const Figures& troika) {
  return troika.seconds > 0 ? raw.seconds / troika.seconds : 0;
}

const char* What(Kind kind) {
  for (const KindInfo& info : AllKinds()) {
    if (info.kind == kind) return info.what;
  }
  return "?";
}

void PrintTable(std::FILE* out, Kind kind, const std::vector<Measurement>& rows, int ranks) {
  std::fprintf(out, "\n# %s, %d ranks; busbw = algbw x %.3f; GB/s = 1e9 bytes/s\n", What(kind),
               ranks, BusFactor(kind, ranks));
  std::fprintf(out, "%10s %12s %9s %9s  %12s %9s %9s  %8s\n", "size", "raw us", "algbw", "busbw",
               "troika us", "algbw", "busbw", "tr/raw");
  for (const Measurement& m : rows) {
    const Figures raw = Compute(m.raw_seconds, m.bytes, kind, ranks);
    const Figures troika = Compute(m.troika_seconds, m.bytes, kind, ranks);
    std::fprintf(out, "%10s %12.1f %9.3f %9.3f  %12.1f %9.3f %9.3f  %8.2f\n",
                 FormatByteSize(m.bytes).c_str(), raw.seconds * 1e6, raw.algbw, raw.busbw,
                 troika.seconds * 1e6, troika.algbw, troika.busbw, Ratio(raw, troika));
  }
  std::fflush(out);
}

void PrintManySmall(std::FILE* out, const Measurement& m, int ranks, const std::string& plane) {
  const Figures raw = Compute(m.raw_seconds, TotalBytes(m), Kind::kManySmall, ranks);
  const Figures troika = Compute(m.troika_seconds, TotalBytes(m), Kind::kManySmall, ranks);
  std::fprintf(out,
               "\n# many small tensors: %d float32 allreduces of %s bytes per step, %d ranks\n",
               m.tensors, FormatByteSize(m.bytes).c_str(), ranks);
  std::fprintf(
      out, "raw %s (%d sequential allreduces): %9.2f steps/s  (%10.1f us/step, busbw %.3f GB/s)\n",
      plane.c_str(), m.tensors, 1 / raw.seconds, raw.seconds * 1e6, raw.busbw);
  std::fprintf(
      out,
      "troika (%d submitted, then waited):  %9.2f steps/s  (%10.1f us/step, busbw %.3f GB/s)\n",
      m.tensors, 1 / troika.seconds, troika.seconds * 1e6, troika.busbw);
  std::fprintf(out, "troika/raw steps/s: %.2fx\n", Ratio(raw, troika));
  std::fflush(out);
}

void PrintLatency(std::FILE* out, const Measurement& m, const std::string& plane) {
  const double raw = Median(m.raw_seconds) * 1e6;
  const double troika = Median(m.troika_seconds) * 1e6;
  std::fprintf(out,
               "\n# allreduce latency, %zu bytes float32: raw %s %.2f us, troika %.2f us "
               "(troika/raw time %.2fx)\n",
               m.bytes, plane.c_str(), raw, troika, raw > 0 ? troika / raw : 0);
  std::fflush(out);
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void PrintKind(std::FILE* out, Kind kind, const std::vector<Measurement>& rows, int ranks,
               const std::string& plane) {
  if (kind == Kind::kManySmall) {
    for (const Measurement& m : rows) PrintManySmall(out, m, ranks, plane);
  } else if (kind == Kind::kLatency) {
    for (const Measurement& m : rows) PrintLatency(out, m, plane);
  } else {
    PrintTable(out, kind, rows, ranks);
  }
}

void PrintCsvHeader(std::FILE* out) {
  std::fprintf(out,
               "op,bytes,tensors,ranks,raw_time_us,raw_algbw_gbps,raw_busbw_gbps,"
               "troika_time_us,troika_algbw_gbps,troika_busbw_gbps,troika_over_raw\n");
}

void PrintCsvRows(std::FILE* out, const std::vector<Measurement>& rows, int ranks) {
  for (const Measurement& m : rows) {
    const Figures raw = Compute(m.raw_seconds, TotalBytes(m), m.kind, ranks);
    const Figures troika = Compute(m.troika_seconds, TotalBytes(m), m.kind, ranks);
    std::fprintf(out, "%s,%zu,%d,%d,%.3f,%.6f,%.6f,%.3f,%.6f,%.6f,%.4f\n", KindName(m.kind),
                 TotalBytes(m), m.tensors, ranks, raw.seconds * 1e6, raw.algbw, raw.busbw,
                 troika.seconds * 1e6, troika.algbw, troika.busbw, Ratio(raw, troika));
  }
  std::fflush(out);
}

}  // namespace troika::bench
