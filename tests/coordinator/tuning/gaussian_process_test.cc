#include "coordinator/tuning/gaussian_process.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

// Two points, x = 0 and x = 1, outputs 10 and 30, fixed l = 1, sn2 = 0.1.
// Standardised outputs: mean 20, scale 10 -> y = [-1, 1].
// K = [[1.1, e], [e, 1.1]] with e = exp(-1/2) = 0.6065307. K's eigenvectors are [1,1] and
// [1,-1] with eigenvalues 1.1 + e = 1.7065307 and 1.1 - e = 0.4934693; y lies on [1,-1], so
// alpha = K^-1 y = y / 0.4934693.
class TwoPointGpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gp_.FitWithHyperParams({{0.0}, {1.0}}, {10.0, 30.0}, GpHyperParams{1.0, 0.1});
  }
  GaussianProcess gp_;
};

TEST_F(TwoPointGpTest, PosteriorAtTheMidpointMatchesHandComputation) {
  // k* = [c, c], c = exp(-0.25/2) = 0.8824969, on the [1,1] eigenvector: k*^T alpha = 0, so
  // the mean is the output mean 20. k*^T K^-1 k* = 2 c^2 / 1.7065307 = 0.9127299, so the
  // standardised variance is 1 - 0.9127299 = 0.0872701, times 10^2 = 8.727010.
  const GpPrediction p = gp_.Predict({0.5});
  EXPECT_NEAR(p.mean, 20.0, 1e-9);
  EXPECT_NEAR(p.variance, 8.727010, 1e-5);
}

TEST_F(TwoPointGpTest, PosteriorAtATrainingPointMatchesHandComputation) {
  // k* = [1, e]. k*^T alpha = (e - 1) / 0.4934693 = -0.7973532, mean = 20 - 7.973532.
  // k* = a [1,1] + b [1,-1], a = (1 + e)/2, b = (1 - e)/2:
  // k*^T K^-1 k* = 2a^2/1.7065307 + 2b^2/0.4934693 = 0.9130623, variance 10^2 * 0.0869377.
  const GpPrediction p = gp_.Predict({0.0});
  EXPECT_NEAR(p.mean, 12.026468, 1e-5);
  EXPECT_NEAR(p.variance, 8.693774, 1e-5);
}

TEST_F(TwoPointGpTest, LogMarginalLikelihoodMatchesHandComputation) {
  // y^T K^-1 y = |y|^2 / 0.4934693 = 4.0529367; log det K = log(1.7065307 * 0.4934693);
  // log p = -4.0529367/2 - log(0.8421206)/2 - log(2 pi) = -3.7784294.
  EXPECT_NEAR(gp_.log_marginal_likelihood(), -3.7784294, 1e-6);
  EXPECT_DOUBLE_EQ(gp_.length_scale(), 1.0);
  EXPECT_DOUBLE_EQ(gp_.noise_variance(), 0.1);
}

TEST(GaussianProcessTest, FarFromDataTheMeanRevertsToTheOutputMean) {
  GaussianProcess gp;
  gp.FitWithHyperParams({{0.0, 0.0}, {0.1, 0.0}}, {10.0, 30.0}, GpHyperParams{0.05, 1e-6});
  const GpPrediction p = gp.Predict({1.0, 1.0});
  EXPECT_NEAR(p.mean, 20.0, 1e-6);
  EXPECT_NEAR(p.variance, 100.0, 1e-6);  // the prior: sf2 = 1 times the output scale squared
}

TEST(GaussianProcessTest, ConstantOutputsPredictTheConstant) {
  GaussianProcess gp;
  gp.Fit({{0.2, 0.3}, {0.7, 0.9}, {0.5, 0.5}}, {7.0, 7.0, 7.0});
  EXPECT_NEAR(gp.Predict({0.1, 0.8}).mean, 7.0, 1e-9);
  EXPECT_TRUE(std::isfinite(gp.log_marginal_likelihood()));
}

TEST(GaussianProcessTest, WithoutDataPredictsThePrior) {
  GaussianProcess gp;
  gp.Fit({}, {});
  const GpPrediction p = gp.Predict({0.5, 0.5});
  EXPECT_EQ(p.mean, 0.0);
  EXPECT_EQ(p.variance, 1.0);
}

std::vector<std::vector<double>> Grid1d(int n) {
  std::vector<std::vector<double>> xs;
  for (int i = 0; i < n; ++i) xs.push_back({static_cast<double>(i) / (n - 1)});
  return xs;
}

std::vector<double> SinOf(const std::vector<std::vector<double>>& xs) {
  std::vector<double> ys;
  for (const auto& x : xs) ys.push_back(std::sin(6 * x[0]) * 5 + 100);
  return ys;
}

TEST(GaussianProcessTest, TinyNoisePosteriorInterpolatesTrainingPoints) {
  const auto xs = Grid1d(6);
  const auto ys = SinOf(xs);
  GaussianProcess gp;
  gp.FitWithHyperParams(xs, ys, GpHyperParams{0.3, 1e-8});
  for (size_t i = 0; i < xs.size(); ++i) {
    const GpPrediction p = gp.Predict(xs[i]);
    EXPECT_NEAR(p.mean, ys[i], 1e-4) << "at x = " << xs[i][0];
    EXPECT_NEAR(p.variance, 0.0, 1e-4) << "at x = " << xs[i][0];
  }
  // Between training points the variance is positive again.
  EXPECT_GT(gp.Predict({0.1}).variance, 1e-4);
}

TEST(GaussianProcessTest, DuplicateInputsWithoutNoiseStillFactorise) {
  GaussianProcess gp;
  gp.FitWithHyperParams({{0.5}, {0.5}, {0.2}}, {1.0, 1.0, 2.0}, GpHyperParams{0.3, 0.0});
  EXPECT_NEAR(gp.Predict({0.5}).mean, 1.0, 1e-3);
  EXPECT_TRUE(std::isfinite(gp.log_marginal_likelihood()));
}

TEST(GaussianProcessTest, FittedHyperParamsBeatABadFixedChoice) {
  const auto xs = Grid1d(12);
  const auto ys = SinOf(xs);
  GaussianProcess fitted;
  fitted.Fit(xs, ys);
  GaussianProcess bad;
  bad.FitWithHyperParams(xs, ys, GpHyperParams{0.05, 0.1});
  EXPECT_GT(fitted.log_marginal_likelihood(), bad.log_marginal_likelihood() + 1);
  // A smooth, noiseless function: a length scale well above the spacing, little noise.
  EXPECT_GT(fitted.length_scale(), 0.1);
  EXPECT_LT(fitted.noise_variance(), 0.01);
  // And it predicts between the training points.
  EXPECT_NEAR(fitted.Predict({0.5}).mean, std::sin(3.0) * 5 + 100, 0.05);
}

TEST(ExpectedImprovementTest, MatchesHandComputedValues) {
  // z = 1: Phi(1) + phi(1) = 0.8413447 + 0.2419707.
  EXPECT_NEAR(ExpectedImprovement(1, 1, 0, 0), 1.0833155, 1e-6);
  // z = 0: sigma phi(0) = 0.3989423.
  EXPECT_NEAR(ExpectedImprovement(0, 1, 0, 0), 0.3989423, 1e-6);
  // mu = -1, sigma = 2: z = -0.5, -Phi(-0.5) + 2 phi(-0.5) = -0.3085375 + 2 * 0.3520653.
  EXPECT_NEAR(ExpectedImprovement(-1, 2, 0, 0), 0.3955931, 1e-6);
  // xi shifts the improvement: mu - best - xi = 0.4, sigma = 0.5, z = 0.8:
  // 0.4 Phi(0.8) + 0.5 phi(0.8) = 0.4 * 0.7881446 + 0.5 * 0.2896916.
  EXPECT_NEAR(ExpectedImprovement(1.5, 0.5, 1, 0.1), 0.4601036, 1e-6);
}

TEST(ExpectedImprovementTest, WithoutUncertaintyIsThePlainImprovement) {
  EXPECT_DOUBLE_EQ(ExpectedImprovement(3, 0, 1, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(ExpectedImprovement(1, 0, 3, 0), 0.0);
}

TEST(ExpectedImprovementTest, GrowsWithMeanAndUncertainty) {
  EXPECT_GT(ExpectedImprovement(1, 1, 0, 0), ExpectedImprovement(0.5, 1, 0, 0));
  EXPECT_GT(ExpectedImprovement(0, 2, 0, 0), ExpectedImprovement(0, 1, 0, 0));
  EXPECT_GT(ExpectedImprovement(-5, 1, 0, 0), 0.0);
}

}  // namespace
}  // namespace troika::coordinator
