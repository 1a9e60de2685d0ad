#pragma once
// Plain mirrors of the session messages of proto/troika/v1/troika.proto. Core classes (the
// negotiator, the client's controller and executor) work on these; only the gRPC adapters see
// generated code (common/wire.h converts).

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace troika {

// One collective submitted by one rank.
struct TensorRequest {
  int rank = 0;
  std::string name;
  CollectiveType type = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  DeviceClass device = DeviceClass::kCpu;
  std::vector<int64_t> splits;  // alltoall only; empty: even split of dim 0

  // Bytes of the tensor this request describes.
  int64_t ByteSize() const;
};

// One unit of work, executed by every rank in the same order.
struct Response {
  CollectiveType type = CollectiveType::kAllreduce;
  std::vector<std::string> names;  // > 1: a fused allreduce, in fusion-buffer order
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  DeviceClass device = DeviceClass::kCpu;
  // allgather: dim 0 of every rank for every tensor, row-major [names.size()][size];
  // reducescatter: dim 0 each rank receives, [size].
  std::vector<int64_t> sizes;
  // alltoall: rows rank i sends to rank j at [i * size + j].
  std::vector<int64_t> splits;
  // Non-empty: every named tensor failed on every rank with this message.
  std::string error;

  bool is_error() const { return !error.empty(); }
};

// A rank's process ended without leaving its job cleanly (reported by its agent).
struct RankExit {
  int rank = 0;
  std::string host;
  int exit_code = 0;  // -1: its session ended without goodbye while its process lived on
  int signal = 0;     // non-zero: killed by this signal

  // What a shell reports for it: the exit code, or 128 + the signal.
  int ShellCode() const { return signal != 0 ? 128 + signal : exit_code; }
};

// A rank's application threads are blocked waiting for these ops (sorted, distinct names);
// empty: no longer blocked.
struct WaitState {
  int rank = 0;
  std::vector<std::string> waiting_for;
};

// "rank 2 on host-a exited with code 1", "rank 2 on host-a was killed by signal 9 (Killed)",
// "rank 2 on host-a lost its session without leaving the job" (exit_code -1).
std::string DescribeRankExit(const RankExit& exit);

// "rank 3", "ranks 0-2", "ranks 0, 2, 5-7". `ranks` sorted ascending.
std::string FormatRanks(const std::vector<int>& ranks);

}  // namespace troika
