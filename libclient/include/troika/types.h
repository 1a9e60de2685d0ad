#pragma once
// Troika's public vocabulary: data types, reduce operations, collective kinds and a rank's
// place in its job. Shared by the C++ API, the C ABI and every internal layer, so that one
// definition serves all of them.

#include <cstdint>
#include <string>
#include <vector>

namespace troika {

enum class DataType : int {
  kUint8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,   // IEEE 754 binary16, stored as uint16_t
  kBFloat16 = 5,  // bfloat16, stored as uint16_t
  kFloat32 = 6,
  kFloat64 = 7,
  kInt16 = 8,
  kUint16 = 9,
  kBool = 10,  // one byte per element: 0 is false, any other byte true (results are 0 or 1)
};
inline constexpr int kNumDataTypes = 11;

// How allreduce and reducescatter combine the ranks' tensors, elementwise. What to expect
// beyond plain arithmetic:
//   - Integer sums and products wrap around (two's complement), as in C++ unsigned math.
//   - kAverage is a sum, then a division by the number of contributing ranks: for integer
//     dtypes an exact integer division rounding toward zero (-7 / 2 == -3), as C++ `/`.
//   - prescale and postscale (AllreduceOptions) are applied in double (float for the 16-bit
//     float types) and converted back; integer results are rounded toward zero and saturate
//     at the dtype's limits (NaN becomes 0).
//   - Floating-point kMin and kMax propagate NaN.
//   - While ranks have joined (Context::Join) they contribute zeros to every op, kMin, kMax
//     and kProduct included (a max over negative values then yields 0, a product 0);
//     kAverage divides by the ranks that did not join. Use kSum or kAverage with Join.
//   - kBool follows PyTorch and Horovod, where `a + b` and `a * b` on bools are logical:
//     kSum and kMax are a logical OR (a saturating sum), kProduct and kMin a logical AND.
//     kAverage on kBool is rejected (INVALID_ARGUMENT when the op is submitted), and so are
//     prescale and postscale factors other than 1. Results are 0 or 1 in every byte.
enum class ReduceOp : int {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};

enum class CollectiveType : int {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,  // Context::Join: this rank is out of data
};

enum class DeviceClass : int {
  kCpu = 0,
  kGpu = 1,
};

// How a float32 allreduce on GPU travels on the wire: as is, or cast to 16 bits in the fusion
// buffer's pack kernel and back in unpack (half the bytes, about 3 decimal digits kept).
enum class Compression : int {
  kNone = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
};

// Where a rank sits in its job. Local: ranks on the same host; cross: one rank per host with
// the same local rank.
struct Membership {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  int64_t epoch = 0;  // changes whenever the job's membership is rebuilt
};

// An elastic job lost ranks and goes on without them (docs/elastic.md): the generation that
// ended, renumbered into the next one.
struct MembershipChange {
  int64_t epoch = 0;           // of the next generation
  int size = 0;                // its ranks
  std::vector<int> next_rank;  // by rank of the generation that ended: its rank next; -1: gone
  // next_rank[rank], or -1 for a rank it does not hold.
  int NextRank(int rank) const {
    return rank >= 0 && rank < static_cast<int>(next_rank.size()) ? next_rank[rank] : -1;
  }
  // The generation ended at a commit (Context::ElasticCommit) to admit `joined` new ranks,
  // the last of the next generation: every rank has just committed, none goes back.
  bool at_commit = false;
  int joined = 0;
  // The joining nodes that named themselves (an agent's restarted ranks): their first rank.
  struct Admitted {
    std::string join_id;
    int first_rank = 0;
  };
  std::vector<Admitted> admitted;
};

}  // namespace troika
