// troika-mpi-bench: Open MPI's (or any MPI's) own collectives on troika-bench's workloads, for
// the side-by-side runs of bench/shm_compare.py. Built only where CMake finds MPI.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader
//       build/bench/troika-mpi-bench [--ops allreduce,latency,many_small,allgather,broadcast]
//       [--bytes 64MiB] [--repeat 1] [--time_per_size_ms 300]
//
// Times as troika-bench's: one cold iteration, ~50 ms of warm-up, then a loop of back-to-back
// iterations aimed at --time_per_size_ms (counts agreed as the slowest rank's), each rank's
// mean per iteration, the slowest rank's reported, the median of --repeat; the 4-byte latency
// is the median of 10 ms blocks. Buffers start zeroed, as troika-bench's. Sizes as
// troika-bench counts them (the allreduce and broadcast buffer, the allgather output).
// Output lines follow troika-bench's, with "mpi" for its "raw" side.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Flags {
  std::vector<std::string> ops = {"allreduce", "latency", "many_small", "allgather", "broadcast"};
  size_t bytes = 64 << 20;
  int repeat = 1;
  double target_seconds = 0.3;
  int small_tensors = 256;
  size_t small_tensor_bytes = 16 << 10;
};

size_t ParseBytes(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  const std::string suffix(end);
  if (suffix == "K" || suffix == "KiB") value *= 1 << 10;
  if (suffix == "M" || suffix == "MiB") value *= 1 << 20;
  if (suffix == "G" || suffix == "GiB") value *= 1 << 30;
  return static_cast<size_t>(value);
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

bool ParseFlags(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq), value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    if (name == "--ops") {
      flags.ops = Split(value);
    } else if (name == "--bytes") {
      flags.bytes = ParseBytes(value);
    } else if (name == "--repeat") {
      flags.repeat = std::max(1, std::atoi(value.c_str()));
    } else if (name == "--time_per_size_ms") {
      flags.target_seconds = std::atof(value.c_str()) / 1000;
    } else if (name == "--small_tensors") {
      flags.small_tensors = std::max(1, std::atoi(value.c_str()));
    } else if (name == "--small_tensor_bytes") {
      flags.small_tensor_bytes = ParseBytes(value);
    } else {
      return false;
    }
  }
  return true;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Slowest(double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

double MeanSeconds(const std::function<void()>& iteration, int count) {
  const double start = MPI_Wtime();
  for (int i = 0; i < count; ++i) iteration();
  return (MPI_Wtime() - start) / count;
}

int Count(double wanted, double per_iteration, int max) {
  const double count = std::ceil(wanted / std::max(per_iteration, 1e-9));
  return static_cast<int>(std::clamp(count, 1.0, static_cast<double>(max)));
}

// The slowest rank's warm mean seconds per iteration (troika-bench's WarmUp).
double WarmUp(const std::function<void()>& iteration) {
  const double cold = Slowest(MeanSeconds(iteration, 1));
  return Slowest(MeanSeconds(iteration, Count(0.05, cold, 1000)));
}

// The slowest rank's mean seconds per timed iteration.
double TimeIterations(const std::function<void()>& iteration, double target) {
  const int iterations = Count(target, WarmUp(iteration), 100000);
  MPI_Barrier(MPI_COMM_WORLD);
  return Slowest(MeanSeconds(iteration, iterations));
}

// The slowest rank's median over 10 ms blocks (troika-bench's latency op, one side).
double TimeBlocks(const std::function<void()>& iteration, double target) {
  const double warm = WarmUp(iteration);
  const int count = Count(0.01, warm, 100000);
  const int blocks = std::max(5, Count(target, count * warm, 1000));
  std::vector<double> means;
  for (int i = 0; i < blocks; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    means.push_back(MeanSeconds(iteration, count));
  }
  return Slowest(Median(means));
}

std::string FormatBytes(size_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

void PrintRow(const char* what, double factor, size_t bytes, double seconds, int ranks) {
  const double algbw = bytes / seconds / 1e9;
  std::printf("\n# %s, %d ranks; busbw = algbw x %.3f; GB/s = 1e9 bytes/s\n", what, ranks, factor);
  std::printf("%10s %12s %9s %9s\n", "size", "mpi us", "algbw", "busbw");
  std::printf("%10s %12.1f %9.3f %9.3f\n", FormatBytes(bytes).c_str(), seconds * 1e6, algbw,
              algbw * factor);
}

// Runs `op` --repeat times; returns the median (on rank 0; every rank takes part).
double Repeat(const Flags& flags, const std::function<double()>& op) {
  std::vector<double> seconds;
  for (int i = 0; i < flags.repeat; ++i) seconds.push_back(op());
  return Median(seconds);
}

void RunOp(const std::string& op, const Flags& flags, int rank, int ranks) {
  const double n = ranks;
  if (op == "allreduce" || op == "latency") {
    const size_t bytes = op == "latency" ? 4 : std::max<size_t>(4, flags.bytes / 4 * 4);
    std::vector<float> data(bytes / 4);
    auto it = [&] {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), data.size(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    if (op == "latency") {
      const double s = Repeat(flags, [&] { return TimeBlocks(it, flags.target_seconds); });
      if (rank == 0)
        std::printf("\n# allreduce latency, 4 bytes float32: raw mpi %.2f us\n", s * 1e6);
      return;
    }
    const double s = Repeat(flags, [&] { return TimeIterations(it, flags.target_seconds); });
    if (rank == 0) PrintRow("allreduce (float32 sum)", 2 * (n - 1) / n, bytes, s, ranks);
  } else if (op == "many_small") {
    std::vector<std::vector<float>> tensors(flags.small_tensors,
                                            std::vector<float>(flags.small_tensor_bytes / 4));
    auto it = [&] {
      for (auto& t : tensors) {
        MPI_Allreduce(MPI_IN_PLACE, t.data(), t.size(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
    };
    const double s = Repeat(flags, [&] { return TimeIterations(it, flags.target_seconds); });
    if (rank == 0) {
      std::printf("\n# many small tensors: %d float32 allreduces of %s bytes per step, %d ranks\n",
                  flags.small_tensors, FormatBytes(flags.small_tensor_bytes).c_str(), ranks);
      std::printf("raw mpi (%d sequential allreduces): %9.2f steps/s  (%10.1f us/step)\n",
                  flags.small_tensors, 1 / s, s * 1e6);
    }
  } else if (op == "allgather") {
    const size_t bytes = std::max<size_t>(ranks, flags.bytes / ranks * ranks);
    std::vector<char> in(bytes / ranks), out(bytes);
    auto it = [&] {
      MPI_Allgather(in.data(), in.size(), MPI_BYTE, out.data(), in.size(), MPI_BYTE,
                    MPI_COMM_WORLD);
    };
    const double s = Repeat(flags, [&] { return TimeIterations(it, flags.target_seconds); });
    if (rank == 0) {
      PrintRow("allgather (bytes; size = gathered output)", (n - 1) / n, bytes, s, ranks);
    }
  } else if (op == "broadcast") {
    std::vector<char> data(std::max<size_t>(1, flags.bytes));
    auto it = [&] { MPI_Bcast(data.data(), data.size(), MPI_BYTE, 0, MPI_COMM_WORLD); };
    const double s = Repeat(flags, [&] { return TimeIterations(it, flags.target_seconds); });
    if (rank == 0) PrintRow("broadcast (bytes, root 0)", 1, data.size(), s, ranks);
  } else if (rank == 0) {
    std::fprintf(stderr, "troika-mpi-bench: unknown op '%s' skipped\n", op.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "usage: mpirun -np N troika-mpi-bench [--ops allreduce,latency,many_small,"
                   "allgather,broadcast] [--bytes 64MiB] [--repeat 1] [--time_per_size_ms 300] "
                   "[--small_tensors 256] [--small_tensor_bytes 16KiB]\n");
    }
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::printf("troika-mpi-bench: %d ranks (processes), %.*s, %s, repeat %d\n", ranks,
                static_cast<int>(std::strcspn(version, ",\n")), version,
                FormatBytes(flags.bytes).c_str(), flags.repeat);
  }
  for (const std::string& op : flags.ops) RunOp(op, flags, rank, ranks);
  MPI_Finalize();
  return 0;
}
