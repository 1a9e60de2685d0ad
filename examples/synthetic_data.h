#pragma once
// SyntheticDataset: an endless, deterministic regression data set. Row i's features are a
// pure function of (seed, i), and its target is the output of a fixed-seed "teacher" Mlp, so
// any rank can produce any rows on its own and the global data set is the same on every rank
// for any number of ranks. A student Mlp of the same shape can fit it exactly.
//
// Thread contract: const methods are thread-safe.

#include <cstdint>
#include <vector>

#include "examples/mlp.h"

namespace troika::examples {

class SyntheticDataset {
 public:
  explicit SyntheticDataset(uint64_t seed);

  // Rows [first, first + rows): features into x (rows * kInputs, row-major), targets into y.
  void Rows(int64_t first, int rows, std::vector<float>& x, std::vector<float>& y) const;

 private:
  const uint64_t seed_;
  const Mlp teacher_;
};

}  // namespace troika::examples
