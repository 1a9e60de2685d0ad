// Allgather, alltoall and reducescatter into a caller's buffer (Context::AllgatherInto,
// AlltoallInto, ReducescatterInto): the same results as the handle-owned forms, written where
// the caller asked; a buffer too small fails that rank's operation only, and the job goes on.

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

constexpr int kRanks = 3;
constexpr float kPoison = -12345.0f;

// Rank r's allgather input: r + 1 rows of 2.
std::vector<float> GatherInput(int rank) {
  std::vector<float> v(2 * (rank + 1));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 100.0f * rank + i;
  return v;
}
constexpr size_t kGatherBytes = 2 * (1 + 2 + 3) * sizeof(float);

// Rank r sends (r + j) % 2 + 1 rows of 2 to rank j.
int64_t Split(int r, int j) { return (r + j) % 2 + 1; }
std::vector<int64_t> Splits(int rank) {
  std::vector<int64_t> s;
  for (int j = 0; j < kRanks; ++j) s.push_back(Split(rank, j));
  return s;
}
std::vector<float> AlltoallInput(int rank) {
  int64_t rows = 0;
  for (int j = 0; j < kRanks; ++j) rows += Split(rank, j);
  std::vector<float> v(2 * rows);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1000.0f * rank + i;
  return v;
}
size_t AlltoallBytes(int rank) {
  size_t rows = 0;
  for (int r = 0; r < kRanks; ++r) rows += Split(r, rank);
  return rows * 2 * sizeof(float);
}

// Reducescatter of 7 rows of 2 over 3 ranks: 3, 2, 2 rows.
constexpr int64_t kScatterRows = 7;
std::vector<float> ScatterInput(int rank) {
  std::vector<float> v(2 * kScatterRows);
  for (size_t i = 0; i < v.size(); ++i) v[i] = rank + 0.5f * i;
  return v;
}
size_t ScatterBytes(int rank) { return (rank == 0 ? 3 : 2) * 2 * sizeof(float); }

// "" if the caller's buffer `buffer` (`used` bytes of result, then poison) holds what the
// handle-owned `reference` holds and `h` points at it.
std::string SameResult(const Handle& h, const Handle& reference, const std::vector<float>& buffer,
                       size_t used) {
  if (h.output() != buffer.data()) return "output() is not the caller's buffer";
  if (h.output_bytes() != used || reference.output_bytes() != used) {
    return absl::StrCat("output_bytes ", h.output_bytes(), ", handle-owned ",
                        reference.output_bytes(), ", expected ", used);
  }
  if (h.output_shape() != reference.output_shape()) return "output shapes differ";
  if (h.received_splits() != reference.received_splits()) return "received splits differ";
  if (used > 0 && std::memcmp(buffer.data(), reference.output(), used) != 0) {
    return "the results differ";
  }
  for (size_t i = used / sizeof(float); i < buffer.size(); ++i) {
    if (buffer[i] != kPoison) return absl::StrCat("wrote past the result, at float ", i);
  }
  return "";
}

class OutputBufferTest : public ::testing::Test {
 protected:
  void SetUp() override { contexts_ = cluster_.Join("into", kRanks); }

  // Runs body(rank, context) on every rank; body returns "" or a failure description.
  void Check(const std::string& what, const std::function<std::string(int, Context&)>& body) {
    std::vector<std::string> failures(kRanks);
    OnEveryRank(kRanks, [&](int rank) { failures[rank] = body(rank, *contexts_[rank]); });
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << what << " on rank " << r;
  }

  TestCluster cluster_;
  std::vector<std::unique_ptr<Context>> contexts_;
};

TEST_F(OutputBufferTest, EveryOpIntoACallersBufferMatchesTheHandleOwnedResult) {
  // Exactly the result's size, and larger (the rest stays untouched).
  for (size_t extra : {size_t{0}, size_t{5}}) {
    Check(absl::StrCat("allgather, extra ", extra), [&](int rank, Context& c) -> std::string {
      std::vector<float> in = GatherInput(rank);
      Handle owned =
          c.Allgather(absl::StrCat("ag", extra), in.data(), DataType::kFloat32, {rank + 1, 2});
      std::vector<float> out(kGatherBytes / sizeof(float) + extra, kPoison);
      Handle into = c.AllgatherInto(absl::StrCat("agi", extra), in.data(), out.data(),
                                    out.size() * sizeof(float), DataType::kFloat32, {rank + 1, 2});
      if (absl::Status s = owned.Wait(); !s.ok()) return s.ToString();
      if (absl::Status s = into.Wait(); !s.ok()) return s.ToString();
      if (out[2 * 1 + 1] != 100.0f * 1 + 1) return "wrong data from rank 1";
      return SameResult(into, owned, out, kGatherBytes);
    });
    Check(absl::StrCat("alltoall, extra ", extra), [&](int rank, Context& c) -> std::string {
      std::vector<float> in = AlltoallInput(rank);
      const int64_t rows = static_cast<int64_t>(in.size() / 2);
      Handle owned = c.Alltoall(absl::StrCat("a2a", extra), in.data(), DataType::kFloat32,
                                {rows, 2}, Splits(rank));
      std::vector<float> out(AlltoallBytes(rank) / sizeof(float) + extra, kPoison);
      Handle into =
          c.AlltoallInto(absl::StrCat("a2ai", extra), in.data(), out.data(),
                         out.size() * sizeof(float), DataType::kFloat32, {rows, 2}, Splits(rank));
      if (absl::Status s = owned.Wait(); !s.ok()) return s.ToString();
      if (absl::Status s = into.Wait(); !s.ok()) return s.ToString();
      return SameResult(into, owned, out, AlltoallBytes(rank));
    });
    Check(absl::StrCat("reducescatter, extra ", extra), [&](int rank, Context& c) -> std::string {
      std::vector<float> in = ScatterInput(rank);
      Handle owned = c.Reducescatter(absl::StrCat("rs", extra), in.data(), DataType::kFloat32,
                                     {kScatterRows, 2}, {.op = ReduceOp::kAverage});
      std::vector<float> out(ScatterBytes(rank) / sizeof(float) + extra, kPoison);
      Handle into = c.ReducescatterInto(absl::StrCat("rsi", extra), in.data(), out.data(),
                                        out.size() * sizeof(float), DataType::kFloat32,
                                        {kScatterRows, 2}, {.op = ReduceOp::kAverage});
      if (absl::Status s = owned.Wait(); !s.ok()) return s.ToString();
      if (absl::Status s = into.Wait(); !s.ok()) return s.ToString();
      if (out[0] != 1.0f + 0.5f * (rank == 0 ? 0 : rank == 1 ? 6 : 10)) return "wrong average";
      return SameResult(into, owned, out, ScatterBytes(rank));
    });
  }
}

TEST_F(OutputBufferTest, InAProcessSet) {
  absl::StatusOr<int> set;
  OnEveryRank(kRanks, [&](int rank) {
    auto id = contexts_[rank]->AddProcessSet({0, 2});
    EXPECT_TRUE(id.ok()) << id.status();
    if (rank == 0) set = id;
  });
  ASSERT_TRUE(set.ok());
  Check("allgather in {0, 2}", [&](int rank, Context& c) -> std::string {
    if (rank == 1) return "";
    std::vector<float> in(2, 10.0f * rank);
    std::vector<float> out(4, kPoison);
    Handle h = c.AllgatherInto("set", in.data(), out.data(), out.size() * sizeof(float),
                               DataType::kFloat32, {1, 2}, {.process_set = *set});
    if (absl::Status s = h.Wait(); !s.ok()) return s.ToString();
    if (h.output() != out.data() || h.output_bytes() != 4 * sizeof(float)) return "output";
    return out == std::vector<float>{0, 0, 20, 20} ? "" : "wrong result";
  });
}

TEST_F(OutputBufferTest, ATooSmallBufferFailsOnlyThatRanksOpAndTheJobGoesOn) {
  // Rank 1's buffers are a float short; the others' fit. Each op fails on rank 1 only, which
  // still took part: the others get their results, nothing hangs, the next op works.
  constexpr int kShort = 1;
  Check("one rank short", [&](int rank, Context& c) -> std::string {
    const size_t less = rank == kShort ? sizeof(float) : 0;
    std::vector<Handle> handles;
    std::vector<std::vector<float>> outs;
    std::vector<size_t> needed = {kGatherBytes, AlltoallBytes(rank), ScatterBytes(rank)};
    for (size_t n : needed) outs.emplace_back(n / sizeof(float), kPoison);
    std::vector<float> gin = GatherInput(rank), ain = AlltoallInput(rank), sin = ScatterInput(rank);
    handles.push_back(c.AllgatherInto("s-ag", gin.data(), outs[0].data(), needed[0] - less,
                                      DataType::kFloat32, {rank + 1, 2}));
    handles.push_back(c.AlltoallInto("s-a2a", ain.data(), outs[1].data(), needed[1] - less,
                                     DataType::kFloat32, {static_cast<int64_t>(ain.size() / 2), 2},
                                     Splits(rank)));
    handles.push_back(c.ReducescatterInto("s-rs", sin.data(), outs[2].data(), needed[2] - less,
                                          DataType::kFloat32, {kScatterRows, 2}));
    const char* ops[] = {"allgather 's-ag'", "alltoall 's-a2a'", "reducescatter 's-rs'"};
    for (size_t i = 0; i < handles.size(); ++i) {
      absl::Status s = handles[i].Wait();
      if (rank != kShort) {
        if (!s.ok()) return absl::StrCat(ops[i], ": ", s.ToString());
        if (handles[i].output() != outs[i].data()) return "output is not the caller's buffer";
        if (outs[i].back() == kPoison) return absl::StrCat(ops[i], ": not written");
        continue;
      }
      if (s.code() != absl::StatusCode::kOutOfRange) {
        return absl::StrCat(ops[i], ": want OUT_OF_RANGE, got ", s.ToString());
      }
      // Failed in the run, after its submission was accepted: not a refusal, though the
      // handle may well have finished by the time the submitting call returned.
      if (handles[i].Refusal().has_value()) return absl::StrCat(ops[i], ": called a refusal");
      const std::string want =
          absl::StrCat(ops[i], " on rank 1: the result needs ", needed[i], " bytes");
      const std::string given = absl::StrCat("holds ", needed[i] - sizeof(float));
      if (s.message().find(want) == std::string::npos ||
          s.message().find(given) == std::string::npos) {
        return absl::StrCat("message: ", s.message());
      }
      if (handles[i].output() != nullptr || handles[i].output_bytes() != 0) {
        return "a failed op has an output";
      }
      for (float f : outs[i]) {
        if (f != kPoison) return absl::StrCat(ops[i], ": wrote into a buffer too small");
      }
    }
    // Every rank short: every rank fails alike.
    std::vector<float> tiny(1, kPoison);
    Handle h = c.AllgatherInto("all-short", gin.data(), tiny.data(), sizeof(float),
                               DataType::kFloat32, {rank + 1, 2});
    if (h.Wait().code() != absl::StatusCode::kOutOfRange) return "all short: not OUT_OF_RANGE";
    if (h.output_shape() != std::vector<int64_t>{6, 2}) return "all short: no result shape";
    // The job goes on.
    std::vector<float> x(4, 1.0f + rank);
    if (absl::Status s = c.Allreduce("after", x.data(), x.data(), DataType::kFloat32, {4}).Wait();
        !s.ok()) {
      return s.ToString();
    }
    return x[3] == 6.0f ? "" : "wrong allreduce after";
  });
}

TEST_F(OutputBufferTest, HandleOwnedIfTooSmallSucceedsWithTheResultWhereverItFits) {
  // OpOptions::handle_owned_if_too_small: rank 1's buffers are a float short, so its results
  // are handle-owned (its buffers untouched); the others' are received into their buffers.
  constexpr int kShort = 1;
  const OpOptions fallback{.handle_owned_if_too_small = true};
  Check("one rank short, handle-owned fallback", [&](int rank, Context& c) -> std::string {
    const size_t less = rank == kShort ? sizeof(float) : 0;
    std::vector<float> gin = GatherInput(rank), ain = AlltoallInput(rank);
    const int64_t arows = static_cast<int64_t>(ain.size() / 2);
    Handle owned[2] = {
        c.Allgather("o-ag", gin.data(), DataType::kFloat32, {rank + 1, 2}),
        c.Alltoall("o-a2a", ain.data(), DataType::kFloat32, {arows, 2}, Splits(rank))};
    const size_t needed[2] = {kGatherBytes, AlltoallBytes(rank)};
    std::vector<float> outs[2] = {std::vector<float>(needed[0] / sizeof(float), kPoison),
                                  std::vector<float>(needed[1] / sizeof(float), kPoison)};
    Handle into[2] = {c.AllgatherInto("f-ag", gin.data(), outs[0].data(), needed[0] - less,
                                      DataType::kFloat32, {rank + 1, 2}, fallback),
                      c.AlltoallInto("f-a2a", ain.data(), outs[1].data(), needed[1] - less,
                                     DataType::kFloat32, {arows, 2}, Splits(rank), fallback)};
    for (int i = 0; i < 2; ++i) {
      const std::string op = i == 0 ? "allgather: " : "alltoall: ";
      if (absl::Status s = owned[i].Wait(); !s.ok()) return op + s.ToString();
      if (absl::Status s = into[i].Wait(); !s.ok()) return op + s.ToString();
      if (rank != kShort) {
        std::string same = SameResult(into[i], owned[i], outs[i], needed[i]);
        if (!same.empty()) return op + same;
        continue;
      }
      if (into[i].output() == nullptr || into[i].output() == outs[i].data()) {
        return op + "the result is not handle-owned";
      }
      if (into[i].output_bytes() != needed[i] ||
          std::memcmp(into[i].output(), owned[i].output(), needed[i]) != 0) {
        return op + "the handle-owned result differs";
      }
      if (into[i].output_shape() != owned[i].output_shape() ||
          into[i].received_splits() != owned[i].received_splits()) {
        return op + "shape or splits differ";
      }
      for (float f : outs[i]) {
        if (f != kPoison) return op + "wrote into a buffer too small";
      }
    }
    return "";
  });
}

TEST_F(OutputBufferTest, NullBuffers) {
  Check("null", [&](int rank, Context& c) -> std::string {
    // A null buffer with a size: refused at once, on every rank alike.
    std::vector<float> in = GatherInput(rank);
    Handle refused =
        c.AllgatherInto("n1", in.data(), nullptr, 8, DataType::kFloat32, {rank + 1, 2});
    absl::Status s = refused.Wait();
    if (refused.Refusal() != s) return "a null buffer's failure is not a refusal";
    if (s.code() != absl::StatusCode::kInvalidArgument ||
        s.message().find("allgather 'n1'") == std::string::npos ||
        s.message().find("output buffer is null") == std::string::npos) {
      return s.ToString();
    }
    // A null buffer of 0 bytes holds an empty result: 2 rows over 3 ranks give rank 2 none
    // (and ranks 0 and 1 a row each, which does not fit).
    std::vector<float> sin(2 * 2, 1.0f);
    Handle h = c.ReducescatterInto("n2", sin.data(), nullptr, 0, DataType::kFloat32, {2, 2});
    s = h.Wait();
    if (h.Refusal().has_value()) return "a buffer of 0 bytes is refused";
    if (rank < 2) {
      if (s.code() != absl::StatusCode::kOutOfRange) return "rank < 2: " + s.ToString();
    } else if (!s.ok() || h.output() != nullptr || h.output_bytes() != 0) {
      return "rank 2: " + s.ToString();
    }
    return "";
  });
}

}  // namespace
}  // namespace troika::testing
