#pragma once
// Scenarios a user can write against the public API, each checked against values every rank
// computes itself: run in-process on a TestCluster (ranks wired straight to a coordinator)
// and as real processes behind agents (troika-test-scenario-rank under troikarun). Defects
// that live only behind an agent show up in the second. Header-only.
//
// Every scenario needs every rank of the job to run it; RunScenario returns the first
// difference or error, naming the rank.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "troika/troika.h"

namespace troika::testing::scenarios {

inline absl::Status Mismatch(int rank, const std::string& what, int64_t got, int64_t want) {
  return absl::InternalError(
      absl::StrCat("rank ", rank, ": ", what, " is ", got, ", expected ", want));
}

// Rank 0 submits three allreduces and joins before waiting for them; the other ranks submit
// only the first, wait for it, then join. The two others run with rank 0's data (the joined
// ranks contribute zeros), and the job goes on.
inline absl::Status JoinBeforeWaiting(Context& c) {
  const int rank = c.rank(), size = c.size();
  std::vector<std::vector<int32_t>> data(3);
  for (int k = 0; k < 3; ++k) data[k].assign(4, (rank + 1) * (k + 1));
  std::vector<Handle> ops;
  for (int k = 0; k < (rank == 0 ? 3 : 1); ++k) {
    ops.push_back(c.Allreduce(absl::StrCat("join-before-wait/s", k), data[k].data(), data[k].data(),
                              DataType::kInt32, {4}));
  }
  if (rank != 0) {
    if (absl::Status s = ops[0].Wait(); !s.ok()) return s;
    absl::SleepFor(absl::Milliseconds(200));  // rank 0's join arrives first
  }
  Handle join = c.Join();
  for (Handle& h : ops) {
    if (absl::Status s = h.Wait(); !s.ok()) return s;
  }
  if (absl::Status s = join.Wait(); !s.ok()) return s;
  const int32_t sum0 = size * (size + 1) / 2;
  if (data[0][0] != sum0) return Mismatch(rank, "s0", data[0][0], sum0);
  if (rank == 0) {
    if (data[1][3] != 2) return Mismatch(rank, "s1", data[1][3], 2);
    if (data[2][3] != 3) return Mismatch(rank, "s2", data[2][3], 3);
  }
  if (absl::Status s = c.Barrier().Wait(); !s.ok()) return s;
  int32_t one = 1;
  if (absl::Status s =
          c.Allreduce("join-before-wait/after", &one, &one, DataType::kInt32, {}).Wait();
      !s.ok()) {
    return s;
  }
  return one == size ? absl::OkStatus() : Mismatch(rank, "the allreduce after", one, size);
}

// Alltoall in the set {0, 2} of a 3-rank job, with explicit and with even splits.
inline absl::Status AlltoallInASmallerSet(Context& c) {
  const int rank = c.rank();
  absl::StatusOr<int> set = c.AddProcessSet({0, 2});
  if (!set.ok()) return set.status();
  if (rank != 1) {
    const int position = rank == 0 ? 0 : 1;
    for (const std::vector<int64_t>& splits :
         {std::vector<int64_t>{1, 2}, std::vector<int64_t>{}}) {
      const int64_t rows = 3 + (splits.empty() ? 1 : 0);  // even: 4 rows, 2 each
      std::vector<int64_t> in(rows);
      for (int64_t i = 0; i < rows; ++i) in[i] = position * 100 + i;
      Handle h = c.Alltoall(absl::StrCat("set-alltoall/", splits.size()), in.data(),
                            DataType::kInt64, {rows}, splits, {.process_set = *set});
      if (absl::Status s = h.Wait(); !s.ok()) return s;
      const std::vector<int64_t> split = splits.empty() ? std::vector<int64_t>{2, 2} : splits;
      const int64_t offset = position == 0 ? 0 : split[0];
      const int64_t* out = static_cast<const int64_t*>(h.output());
      int64_t at = 0;
      for (int from = 0; from < 2; ++from) {
        for (int64_t i = 0; i < split[position]; ++i, ++at) {
          if (out[at] != from * 100 + offset + i) {
            return Mismatch(rank, absl::StrCat("alltoall row ", at), out[at],
                            from * 100 + offset + i);
          }
        }
      }
    }
  }
  if (absl::Status s = c.RemoveProcessSet(*set); !s.ok()) return s;
  return c.Barrier().Wait();
}

// Sets {0, 1} and {1, 2} of a 3-rank job: rank 1 has the same allreduce name, and barriers
// of the same number, in flight in both at once, many times over.
inline absl::Status SameNamesInTwoSets(Context& c) {
  const int rank = c.rank();
  absl::StatusOr<int> a = c.AddProcessSet({0, 1});
  if (!a.ok()) return a.status();
  absl::StatusOr<int> b = c.AddProcessSet({1, 2});
  if (!b.ok()) return b.status();
  std::vector<int> mine;
  if (rank <= 1) mine.push_back(*a);
  if (rank >= 1) mine.push_back(*b);
  for (int step = 0; step < 30; ++step) {
    std::vector<std::vector<int32_t>> data(mine.size(), std::vector<int32_t>(8, rank + step));
    std::vector<Handle> ops;
    for (size_t i = 0; i < mine.size(); ++i) {
      ops.push_back(c.Allreduce("same", data[i].data(), data[i].data(), DataType::kInt32, {8},
                                {.process_set = mine[i]}));
      ops.push_back(c.Barrier({.process_set = mine[i]}));
    }
    for (Handle& h : ops) {
      if (absl::Status s = h.Wait(); !s.ok()) return s;
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      const int32_t want = mine[i] == *a ? (0 + 1 + 2 * step) : (1 + 2 + 2 * step);
      if (data[i][7] != want)
        return Mismatch(rank, absl::StrCat("'same' in set ", mine[i]), data[i][7], want);
    }
  }
  if (absl::Status s = c.RemoveProcessSet(*b); !s.ok()) return s;
  if (absl::Status s = c.RemoveProcessSet(*a); !s.ok()) return s;
  return c.Barrier().Wait();
}

// Runs the named scenario ("join-before-wait", "set-alltoall", "set-same-name").
inline absl::Status RunScenario(const std::string& name, Context& c) {
  absl::Status s;
  if (name == "join-before-wait") {
    s = JoinBeforeWaiting(c);
  } else if (name == "set-alltoall") {
    s = AlltoallInASmallerSet(c);
  } else if (name == "set-same-name") {
    s = SameNamesInTwoSets(c);
  } else {
    return absl::InvalidArgumentError("unknown scenario " + name);
  }
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name, ": ", s.message()));
  return s;
}

}  // namespace troika::testing::scenarios
