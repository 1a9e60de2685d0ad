#pragma once
// GaussianProcess: Gaussian-process regression over small inputs (points in [0,1]^d, d ~ 2,
// n <= ~100 observations), the surrogate model of the Autotuner.
//
// Kernel: k(x, x') = sf2 * exp(-|x - x'|^2 / (2 l^2)), plus noise variance sn2 on the diagonal.
// Outputs are standardised before fitting (mean 0, population standard deviation 1; a constant
// output keeps scale 1), so sf2 = 1 and sn2 are on the standardised scale; predictions come back
// in the original units. Fit() picks l and sn2 maximising the log marginal likelihood over a
// fixed log-spaced grid; FitWithHyperParams() takes them as given.
//
// Cost: Fit is O(grid * n^3), Predict O(n^2). Plain data in and out: no threads, no I/O.
// Thread contract: not thread-safe; const methods may run concurrently with each other.

#include <vector>

namespace troika::coordinator {

struct GpHyperParams {
  double length_scale = 0.3;     // l, in input units
  double noise_variance = 1e-4;  // sn2, on the standardised output scale
};

struct GpPrediction {
  double mean = 0;      // posterior mean, original output units
  double variance = 0;  // posterior variance of the latent function (no noise), original units^2
};

class GaussianProcess {
 public:
  // Fits `ys` at `xs` (one output per input; every input has the same dimension) choosing the
  // hyper-parameters by maximum marginal likelihood. Replaces any earlier fit. Crashes if the
  // sizes disagree. With no points, Predict() returns the prior (mean 0, variance 1).
  void Fit(std::vector<std::vector<double>> xs, std::vector<double> ys);
  // As Fit, with fixed hyper-parameters (length_scale > 0, noise_variance >= 0).
  void FitWithHyperParams(std::vector<std::vector<double>> xs, std::vector<double> ys,
                          GpHyperParams params);

  // Posterior at `x` (same dimension as the training inputs).
  GpPrediction Predict(const std::vector<double>& x) const;

  double length_scale() const { return params_.length_scale; }
  double noise_variance() const { return params_.noise_variance; }
  // Log marginal likelihood of the standardised outputs under the fitted hyper-parameters.
  double log_marginal_likelihood() const { return log_marginal_likelihood_; }
  int size() const { return static_cast<int>(xs_.size()); }

 private:
  // Factorises K for `params` into chol_, solves alpha_; returns the log marginal likelihood.
  double Factorise(const GpHyperParams& params);
  void SetData(std::vector<std::vector<double>> xs, std::vector<double> ys);

  GpHyperParams params_;
  std::vector<std::vector<double>> xs_;
  std::vector<double> ys_;  // standardised
  double y_mean_ = 0;
  double y_scale_ = 1;
  std::vector<double> chol_;   // lower-triangular L, row-major n x n, K + sn2 I = L L^T
  std::vector<double> alpha_;  // (K + sn2 I)^-1 ys_
  double log_marginal_likelihood_ = 0;
};

// Expected improvement over `best` of a Gaussian with `mean` and `stddev`, for maximisation:
// with z = (mean - best - xi) / stddev, EI = (mean - best - xi) Phi(z) + stddev phi(z).
// When stddev <= 0: max(0, mean - best - xi). `xi` >= 0 trades exploitation for exploration.
double ExpectedImprovement(double mean, double stddev, double best, double xi);

}  // namespace troika::coordinator
