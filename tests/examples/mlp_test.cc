#include "examples/mlp.h"

#include <cmath>
#include <vector>

#include "examples/synthetic_data.h"
#include "gtest/gtest.h"

namespace troika::examples {
namespace {

TEST(MlpTest, SameSeedGivesIdenticalWeightsDifferentSeedDoesNot) {
  Mlp a(7), b(7), c(8);
  for (size_t p = 0; p < a.params().size(); ++p) {
    EXPECT_EQ(a.params()[p].values, b.params()[p].values);
    EXPECT_NE(a.params()[p].values, c.params()[p].values);
  }
  EXPECT_EQ(a.params()[0].values.size(), size_t{kHidden * kInputs});
}

TEST(SyntheticDatasetTest, RowsDependOnlyOnTheirGlobalIndex) {
  SyntheticDataset data(3);
  std::vector<float> x_all, y_all, x_part, y_part;
  data.Rows(100, 8, x_all, y_all);
  data.Rows(104, 4, x_part, y_part);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(y_part[r], y_all[4 + r]);
    for (int i = 0; i < kInputs; ++i)
      EXPECT_EQ(x_part[r * kInputs + i], x_all[(4 + r) * kInputs + i]);
  }
}

// Central finite differences in double precision agree with the analytic gradient.
TEST(MlpTest, GradientsMatchFiniteDifferences) {
  SyntheticDataset data(11);
  std::vector<float> x, y;
  data.Rows(0, 5, x, y);
  Mlp model(2);
  std::vector<std::vector<float>> grads;
  model.LossAndGradients(x.data(), y.data(), 5, grads);
  const float eps = 1e-2f;
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (size_t k = 0; k < model.params()[p].values.size(); k += 7) {
      std::vector<std::vector<float>> bump(model.params().size());
      for (size_t q = 0; q < bump.size(); ++q) bump[q].assign(model.params()[q].values.size(), 0);
      bump[p][k] = 1;
      Mlp plus = model, minus = model;
      plus.Step(bump, -eps);
      minus.Step(bump, eps);
      std::vector<std::vector<float>> unused;
      const double numeric = (plus.LossAndGradients(x.data(), y.data(), 5, unused) -
                              minus.LossAndGradients(x.data(), y.data(), 5, unused)) /
                             (2 * eps);
      EXPECT_NEAR(grads[p][k], numeric, 2e-3 + 1e-2 * std::fabs(numeric))
          << model.params()[p].name << "[" << k << "]";
    }
  }
}

TEST(MlpTest, SgdOnTheTeacherDataReducesTheLoss) {
  SyntheticDataset data(5);
  Mlp model(9);
  std::vector<float> x, y;
  std::vector<std::vector<float>> grads;
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    data.Rows(step * 256, 256, x, y);
    last = model.LossAndGradients(x.data(), y.data(), 256, grads);
    if (step == 0) first = last;
    model.Step(grads, 0.1f);
  }
  EXPECT_LT(last, 0.5 * first);
}

}  // namespace
}  // namespace troika::examples
