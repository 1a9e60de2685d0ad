#include "examples/synthetic_data.h"

namespace troika::examples {

// A larger weight scale than the student's default makes the teacher's function clearly
// non-linear (its tanh units leave the linear region).
SyntheticDataset::SyntheticDataset(uint64_t seed) : seed_(seed), teacher_(seed + 1, 2.0f) {}

void SyntheticDataset::Rows(int64_t first, int rows, std::vector<float>& x,
                            std::vector<float>& y) const {
  x.resize(static_cast<size_t>(rows) * kInputs);
  y.resize(rows);
  for (int r = 0; r < rows; ++r) {
    float* xr = x.data() + static_cast<size_t>(r) * kInputs;
    for (int i = 0; i < kInputs; ++i) xr[i] = HashUniform(seed_, first + r, i);
    y[r] = teacher_.Predict(xr);
  }
}

}  // namespace troika::examples
