// Every collective x every dtype x sizes {0, 1, odd, >= 1 MiB}, on 1..8 ranks through a real
// coordinator and Gloo over loopback, checked element by element against a reference.

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/integration/typed_values.h"

namespace troika::testing {
namespace {

const DataType kAllTypes[] = {DataType::kUint8,   DataType::kInt8,    DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64, DataType::kInt16,
                              DataType::kUint16,  DataType::kBool};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

// Element counts: empty, one, odd, and at least 1 MiB whatever the dtype.
std::vector<size_t> Counts(DataType dtype) {
  return {0, 1, 1001, (size_t{1} << 20) / DataTypeSize(dtype) + 3};
}

// Small values every dtype holds exactly; products stay tiny. Bools are mostly true for
// product and min (a logical and), mostly false for sum and max (a logical or).
double Value(ReduceOp op, DataType dtype, int rank, size_t i) {
  if (dtype == DataType::kBool) {
    const bool rare = (rank * 7 + i * 3) % 11 == 0;
    return rare != (op == ReduceOp::kProduct || op == ReduceOp::kMin) ? 1 : 0;
  }
  if (op == ReduceOp::kProduct) return (rank + i) % 4 == 0 ? 2 : 1;
  double v = static_cast<double>((rank * 7 + i * 3) % 11);
  return dtype == DataType::kUint8 || dtype == DataType::kUint16 ? v : v - 5;
}

double Reduce(ReduceOp op, DataType dtype, int size, size_t i) {
  double acc = Value(op, dtype, 0, i);
  for (int r = 1; r < size; ++r) {
    double v = Value(op, dtype, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc = IsFloat(dtype) ? acc / size : std::trunc(acc / size);
  // On 0/1 values a sum or max is nonzero iff some value is (or), a product or min iff all are.
  if (dtype == DataType::kBool) return acc != 0 ? 1 : 0;
  return acc;
}

// troika/types.h: average on bool is rejected when submitted, on every rank.
std::string ExpectBoolAverageRejected(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kInvalidArgument ||
      s.message().find("reduce op average is not defined for bool") == std::string::npos) {
    return absl::StrCat("want INVALID_ARGUMENT for average on bool, got ", s.ToString());
  }
  return "";
}

// "" if `got` matches expected(i) for i < count, else the first difference.
std::string Compare(DataType dtype, const void* got, size_t count,
                    const std::function<double(size_t)>& expected) {
  for (size_t i = 0; i < count; ++i) {
    double want = expected(i), have = Get(dtype, got, i);
    if (std::abs(want - have) > Tolerance(dtype) * std::max(1.0, std::abs(want))) {
      return absl::StrCat("element ", i, ": want ", want, ", got ", have);
    }
  }
  return "";
}

class CollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { contexts_ = cluster_.Join("sweep", size()); }
  int size() const { return GetParam(); }

  // Runs body(rank, context) on every rank; body returns "" or a failure description.
  void Check(const std::string& what, const std::function<std::string(int, Context&)>& body) {
    std::vector<std::string> failures(size());
    OnEveryRank(size(), [&](int rank) { failures[rank] = body(rank, *contexts_[rank]); });
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(failures[r], "") << what << " on rank " << r << " of " << size();
    }
  }

  TestCluster cluster_;
  std::vector<std::unique_ptr<Context>> contexts_;
  int seq_ = 0;
  std::string Name(const std::string& what) { return absl::StrCat(what, "#", seq_++); }
};

TEST_P(CollectivesTest, AllreduceEveryOpDtypeAndSize) {
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (size_t count : Counts(dtype)) {
        for (bool in_place : {true, false}) {
          std::string name = Name("allreduce");
          Check(absl::StrCat(name, " ", DataTypeName(dtype), " ", ReduceOpName(op), " x", count,
                             in_place ? " in place" : ""),
                [&](int rank, Context& c) -> std::string {
                  auto in =
                      MakeTensor(dtype, count, [&](size_t i) { return Value(op, dtype, rank, i); });
                  std::vector<uint8_t> separate(in.size());
                  void* out = in_place ? in.data() : separate.data();
                  absl::Status s = c.Allreduce(name, in.data(), out, dtype,
                                               {static_cast<int64_t>(count)}, {.op = op})
                                       .Wait();
                  if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
                    return ExpectBoolAverageRejected(s);
                  }
                  if (!s.ok()) return s.ToString();
                  return Compare(dtype, out, count,
                                 [&](size_t i) { return Reduce(op, dtype, size(), i); });
                });
        }
      }
    }
  }
}

// Fused (7 elements) and alone (>= 1 MiB, the runner's one-tensor path), in and out of place.
TEST_P(CollectivesTest, AllreduceAppliesPrescaleAndPostscale) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
    for (size_t count : {size_t{7}, (size_t{1} << 20) / DataTypeSize(dtype) + 3}) {
      for (bool in_place : {true, false}) {
        std::string name = Name("scaled");
        Check(absl::StrCat(name, " x", count, in_place ? " in place" : ""),
              [&](int rank, Context& c) -> std::string {
                auto in = MakeTensor(
                    dtype, count, [&](size_t i) { return Value(ReduceOp::kSum, dtype, rank, i); });
                const auto original = in;
                std::vector<uint8_t> separate(in.size());
                void* out = in_place ? in.data() : separate.data();
                absl::Status s =
                    c.Allreduce(name, in.data(), out, dtype, {static_cast<int64_t>(count)},
                                {.op = ReduceOp::kAverage, .prescale = 4, .postscale = 0.5})
                        .Wait();
                if (!s.ok()) return s.ToString();
                if (!in_place && in != original) return "the input changed";
                return Compare(dtype, out, count, [&](size_t i) {
                  return 2 * Reduce(ReduceOp::kAverage, dtype, size(), i);
                });
              });
      }
    }
  }
}

// float16 and bfloat16 are added in float32, averaged and post-scaled there, and rounded once
// (Horovod's test_mxnet1.py checks this bit for bit on 3 ranks): the values are in [1, 2) with
// every mantissa bit in use, so any intermediate rounding to the half type shows.
TEST_P(CollectivesTest, HalfTypesAreReducedInFloat32AndRoundedOnce) {
  constexpr double kPostscale = 0.3;
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    const int steps = dtype == DataType::kFloat16 ? 1024 : 128;  // mantissa values in [1, 2)
    auto value = [&](int rank, size_t i) {
      return 1.0 + static_cast<double>((i * 37 + rank * 11) % steps) / steps;
    };
    auto expected = [&](ReduceOp op, size_t i) {
      float acc = 0;  // exact: at most 8 values of 11 significant bits
      for (int r = 0; r < size(); ++r) acc += static_cast<float>(value(r, i));
      if (op == ReduceOp::kAverage) acc *= static_cast<float>(1.0 / size());
      acc *= static_cast<float>(kPostscale);
      std::vector<uint8_t> rounded(DataTypeSize(dtype));
      Put(dtype, rounded.data(), 0, acc);
      return Get(dtype, rounded.data(), 0);
    };
    auto exact = [&](const void* got, size_t count, size_t first, ReduceOp op) -> std::string {
      for (size_t i = 0; i < count; ++i) {
        if (Get(dtype, got, i) != expected(op, first + i)) {
          return absl::StrCat("element ", first + i, ": want ", expected(op, first + i), ", got ",
                              Get(dtype, got, i));
        }
      }
      return "";
    };
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (size_t count : {size_t{1001}, (size_t{1} << 20) / DataTypeSize(dtype) + 3}) {
        std::string name = Name("half");
        Check(absl::StrCat(name, " ", DataTypeName(dtype), " ", ReduceOpName(op), " x", count),
              [&](int rank, Context& c) -> std::string {
                auto in = MakeTensor(dtype, count, [&](size_t i) { return value(rank, i); });
                absl::Status s =
                    c.Allreduce(name, in.data(), in.data(), dtype, {static_cast<int64_t>(count)},
                                {.op = op, .postscale = kPostscale})
                        .Wait();
                if (!s.ok()) return s.ToString();
                return exact(in.data(), count, 0, op);
              });
      }
      const int64_t rows = 3 * size() + 1;
      std::string name = Name("half_reducescatter");
      Check(absl::StrCat(name, " ", DataTypeName(dtype), " ", ReduceOpName(op)),
            [&](int rank, Context& c) -> std::string {
              auto in = MakeTensor(dtype, rows * 5, [&](size_t i) { return value(rank, i); });
              Handle h = c.Reducescatter(name, in.data(), dtype, {rows, 5},
                                         {.op = op, .postscale = kPostscale});
              if (absl::Status s = h.Wait(); !s.ok()) return s.ToString();
              int64_t first = 0;
              for (int r = 0; r < rank; ++r) first += rows / size() + (r < rows % size());
              const int64_t mine = rows / size() + (rank < rows % size());
              return exact(h.output(), mine * 5, first * 5, op);
            });
    }
  }
}

TEST_P(CollectivesTest, ManyAllreducesInFlightAreFusedAndCorrect) {
  constexpr int kTensors = 40;
  std::string base = Name("fused");
  Check(base, [&](int rank, Context& c) -> std::string {
    std::vector<std::vector<uint8_t>> tensors;
    std::vector<Handle> handles;
    for (int t = 0; t < kTensors; ++t) {
      tensors.push_back(MakeTensor(DataType::kFloat32, 100 + t, [&](size_t i) {
        return Value(ReduceOp::kSum, DataType::kFloat32, rank + t, i);
      }));
    }
    for (int t = 0; t < kTensors; ++t) {
      handles.push_back(c.Allreduce(absl::StrCat(base, "/", t), tensors[t].data(),
                                    tensors[t].data(), DataType::kFloat32, {100 + t}));
    }
    for (int t = 0; t < kTensors; ++t) {
      if (absl::Status s = handles[t].Wait(); !s.ok()) return s.ToString();
      std::string diff = Compare(DataType::kFloat32, tensors[t].data(), 100 + t, [&](size_t i) {
        double sum = 0;
        for (int r = 0; r < size(); ++r) sum += Value(ReduceOp::kSum, DataType::kFloat32, r + t, i);
        return sum;
      });
      if (!diff.empty()) return absl::StrCat("tensor ", t, ": ", diff);
    }
    return "";
  });
}

TEST_P(CollectivesTest, AllgatherWithDifferentFirstDimensions) {
  for (DataType dtype : kAllTypes) {
    for (size_t count : Counts(dtype)) {
      std::string name = Name("allgather");
      // Rank r contributes count + r rows of 2 columns.
      auto rows = [&](int r) { return static_cast<int64_t>(count / 2 + r); };
      Check(absl::StrCat(name, " ", DataTypeName(dtype), " x", count),
            [&](int rank, Context& c) -> std::string {
              auto in = MakeTensor(dtype, rows(rank) * 2,
                                   [&](size_t i) { return Value(ReduceOp::kMax, dtype, rank, i); });
              Handle h = c.Allgather(name, in.data(), dtype, {rows(rank), 2});
              if (absl::Status s = h.Wait(); !s.ok()) return s.ToString();
              int64_t total = 0;
              for (int r = 0; r < size(); ++r) total += rows(r);
              if (h.output_shape() != std::vector<int64_t>{total, 2}) return "wrong output shape";
              size_t offset = 0;
              for (int r = 0; r < size(); ++r) {
                const uint8_t* part =
                    static_cast<const uint8_t*>(h.output()) + offset * DataTypeSize(dtype);
                std::string diff = Compare(dtype, part, rows(r) * 2, [&](size_t i) {
                  return Value(ReduceOp::kMax, dtype, r, i);
                });
                if (!diff.empty()) return absl::StrCat("from rank ", r, ": ", diff);
                offset += rows(r) * 2;
              }
              return "";
            });
    }
  }
}

TEST_P(CollectivesTest, BroadcastFromEveryRoot) {
  for (DataType dtype : kAllTypes) {
    for (size_t count : Counts(dtype)) {
      int root = static_cast<int>(count % size());
      for (bool in_place : {true, false}) {
        std::string name = Name("broadcast");
        Check(absl::StrCat(name, " ", DataTypeName(dtype), " x", count, " root ", root),
              [&](int rank, Context& c) -> std::string {
                auto in = MakeTensor(
                    dtype, count, [&](size_t i) { return Value(ReduceOp::kMax, dtype, rank, i); });
                std::vector<uint8_t> separate(in.size());
                void* out = in_place ? in.data() : separate.data();
                absl::Status s =
                    c.Broadcast(name, in.data(), out, dtype, {static_cast<int64_t>(count)}, root)
                        .Wait();
                if (!s.ok()) return s.ToString();
                return Compare(dtype, out, count,
                               [&](size_t i) { return Value(ReduceOp::kMax, dtype, root, i); });
              });
      }
    }
  }
}

TEST_P(CollectivesTest, AlltoallWithUnevenSplits) {
  for (DataType dtype : kAllTypes) {
    for (size_t count : Counts(dtype)) {
      // Rank r sends base + (r + j) % 2 rows to rank j; row i of the block for j holds a
      // value identifying (r, j, i).
      const int64_t base = static_cast<int64_t>(count / (2 * size()));
      auto split = [&](int r, int j) { return base + (r + j) % 2; };
      auto value = [&](int r, int j, size_t i) {
        return static_cast<double>((r * 5 + j * 3 + i) % (dtype == DataType::kBool ? 2 : 11));
      };
      std::string name = Name("alltoall");
      Check(absl::StrCat(name, " ", DataTypeName(dtype), " x", count),
            [&](int rank, Context& c) -> std::string {
              std::vector<int64_t> splits;
              int64_t rows = 0;
              for (int j = 0; j < size(); ++j)
                rows += split(rank, j), splits.push_back(split(rank, j));
              std::vector<uint8_t> in(rows * DataTypeSize(dtype) + 1);
              size_t at = 0;
              for (int j = 0; j < size(); ++j) {
                for (int64_t i = 0; i < split(rank, j); ++i)
                  Put(dtype, in.data(), at++, value(rank, j, i));
              }
              Handle h = c.Alltoall(name, in.data(), dtype, {rows}, splits);
              if (absl::Status s = h.Wait(); !s.ok()) return s.ToString();
              size_t offset = 0;
              for (int r = 0; r < size(); ++r) {
                if (h.received_splits()[r] != split(r, rank)) return "wrong received splits";
                for (int64_t i = 0; i < split(r, rank); ++i) {
                  double got = Get(dtype, h.output(), offset++);
                  if (got != value(r, rank, i)) {
                    return absl::StrCat("row ", i, " from rank ", r, ": got ", got);
                  }
                }
              }
              return offset * DataTypeSize(dtype) == h.output_bytes() ? "" : "wrong output size";
            });
    }
  }
}

TEST_P(CollectivesTest, ReducescatterSumAndAverage) {
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (size_t count : Counts(dtype)) {
        const int64_t rows = static_cast<int64_t>(count / 3) + size() - 1;  // uneven blocks
        std::string name = Name("reducescatter");
        Check(absl::StrCat(name, " ", DataTypeName(dtype), " ", ReduceOpName(op), " rows ", rows),
              [&](int rank, Context& c) -> std::string {
                auto in = MakeTensor(dtype, rows * 3,
                                     [&](size_t i) { return Value(op, dtype, rank, i); });
                Handle h = c.Reducescatter(name, in.data(), dtype, {rows, 3}, {.op = op});
                if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
                  return ExpectBoolAverageRejected(h.Wait());
                }
                if (absl::Status s = h.Wait(); !s.ok()) return s.ToString();
                int64_t first = 0;
                for (int r = 0; r < rank; ++r) first += rows / size() + (r < rows % size());
                int64_t mine = rows / size() + (rank < rows % size());
                if (h.output_shape() != std::vector<int64_t>{mine, 3}) return "wrong output shape";
                return Compare(dtype, h.output(), mine * 3,
                               [&](size_t i) { return Reduce(op, dtype, size(), first * 3 + i); });
              });
      }
    }
  }
}

TEST_P(CollectivesTest, BarrierCompletesOnEveryRank) {
  Check("barrier", [&](int rank, Context& c) -> std::string {
    for (int i = 0; i < 3; ++i) {
      if (absl::Status s = c.Barrier().Wait(); !s.ok()) return s.ToString();
    }
    return "";
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest, ::testing::Range(1, 9),
                         [](const auto& info) { return absl::StrCat(info.param, "Ranks"); });

}  // namespace
}  // namespace troika::testing
