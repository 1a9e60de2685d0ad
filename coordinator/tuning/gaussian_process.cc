#include "coordinator/tuning/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "common/logging.h"

namespace troika::coordinator {
namespace {

// The hyper-parameter grid Fit() searches: l from 0.05 to 2 (12 log-spaced values), sn2 from
// 1e-6 to 0.1 (one per decade). Inputs live in [0,1]^d, so l = 2 is "nearly linear" and
// l = 0.05 "a few grid cells".
constexpr int kLengthScales = 12;
constexpr double kMinLengthScale = 0.05;
constexpr double kMaxLengthScale = 2.0;
constexpr double kNoiseVariances[] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1};

double SquaredDistance(const std::vector<double>& a, const std::vector<double>& b) {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  return d2;
}

double Kernel(const std::vector<double>& a, const std::vector<double>& b, double length_scale) {
  return std::exp(-SquaredDistance(a, b) / (2 * length_scale * length_scale));
}

// In-place Cholesky of the row-major n x n matrix `a` into its lower triangle (the upper
// triangle is zeroed). False if `a` is not numerically positive definite.
bool Cholesky(std::vector<double>& a, int n) {
  for (int j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    const double ljj = std::sqrt(d);
    a[j * n + j] = ljj;
    for (int i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / ljj;
    }
    for (int i = 0; i < j; ++i) a[i * n + j] = 0;
  }
  return true;
}

// Solves L y = b in place (forward substitution).
void SolveLower(const std::vector<double>& l, int n, std::vector<double>& b) {
  for (int i = 0; i < n; ++i) {
    double s = b[i];
    for (int k = 0; k < i; ++k) s -= l[i * n + k] * b[k];
    b[i] = s / l[i * n + i];
  }
}

// Solves L^T x = b in place (back substitution).
void SolveUpperTransposed(const std::vector<double>& l, int n, std::vector<double>& b) {
  for (int i = n - 1; i >= 0; --i) {
    double s = b[i];
    for (int k = i + 1; k < n; ++k) s -= l[k * n + i] * b[k];
    b[i] = s / l[i * n + i];
  }
}

double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

}  // namespace

void GaussianProcess::SetData(std::vector<std::vector<double>> xs, std::vector<double> ys) {
  TROIKA_CHECK(xs.size() == ys.size()) << xs.size() << " inputs but " << ys.size() << " outputs";
  for (const auto& x : xs) {
    TROIKA_CHECK(x.size() == xs.front().size()) << "inputs of different dimensions";
  }
  const double n = static_cast<double>(ys.size());
  y_mean_ = 0;
  y_scale_ = 1;
  if (!ys.empty()) {
    for (double y : ys) y_mean_ += y / n;
    double var = 0;
    for (double y : ys) var += (y - y_mean_) * (y - y_mean_) / n;
    // A constant output has no scale of its own; keep 1 so the prior variance stays sane.
    if (var > 0 && std::sqrt(var) > 1e-12 * std::max(1.0, std::abs(y_mean_))) {
      y_scale_ = std::sqrt(var);
    }
  }
  for (double& y : ys) y = (y - y_mean_) / y_scale_;
  xs_ = std::move(xs);
  ys_ = std::move(ys);
}

void GaussianProcess::Fit(std::vector<std::vector<double>> xs, std::vector<double> ys) {
  SetData(std::move(xs), std::move(ys));
  GpHyperParams best;
  double best_lml = -INFINITY;
  for (int i = 0; i < kLengthScales; ++i) {
    const double t = static_cast<double>(i) / (kLengthScales - 1);
    const double l = kMinLengthScale * std::pow(kMaxLengthScale / kMinLengthScale, t);
    for (double sn2 : kNoiseVariances) {
      const GpHyperParams params{l, sn2};
      const double lml = Factorise(params);
      if (lml > best_lml) {  // strict: ties keep the earlier (shorter, less noisy) choice
        best_lml = lml;
        best = params;
      }
    }
  }
  log_marginal_likelihood_ = Factorise(best);
  params_ = best;
}

void GaussianProcess::FitWithHyperParams(std::vector<std::vector<double>> xs,
                                         std::vector<double> ys, GpHyperParams params) {
  TROIKA_CHECK(params.length_scale > 0 && params.noise_variance >= 0)
      << "length_scale " << params.length_scale << " noise_variance " << params.noise_variance;
  SetData(std::move(xs), std::move(ys));
  log_marginal_likelihood_ = Factorise(params);
  params_ = params;
}

double GaussianProcess::Factorise(const GpHyperParams& params) {
  const int n = size();
  std::vector<double> k(static_cast<size_t>(n) * n);
  // Duplicate inputs with tiny noise make K singular; escalate a diagonal jitter until the
  // factorisation holds (1e-10 relative to sf2 = 1 changes no prediction that matters).
  for (double jitter = 0;; jitter = jitter == 0 ? 1e-10 : jitter * 10) {
    TROIKA_CHECK(jitter <= 1) << "kernel matrix not positive definite even with jitter";
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) k[i * n + j] = Kernel(xs_[i], xs_[j], params.length_scale);
      k[i * n + i] += params.noise_variance + jitter;
    }
    if (Cholesky(k, n)) break;
  }
  chol_ = std::move(k);
  alpha_ = ys_;
  SolveLower(chol_, n, alpha_);
  // log p(y) = -y^T K^-1 y / 2 - sum log L_ii - n log(2 pi) / 2, and y^T K^-1 y = |L^-1 y|^2.
  double lml = -0.5 * n * std::log(2 * std::numbers::pi);
  for (int i = 0; i < n; ++i) lml -= 0.5 * alpha_[i] * alpha_[i] + std::log(chol_[i * n + i]);
  SolveUpperTransposed(chol_, n, alpha_);
  return lml;
}

GpPrediction GaussianProcess::Predict(const std::vector<double>& x) const {
  const int n = size();
  std::vector<double> ks(n);
  double mean = 0;
  for (int i = 0; i < n; ++i) {
    ks[i] = Kernel(xs_[i], x, params_.length_scale);
    mean += ks[i] * alpha_[i];
  }
  SolveLower(chol_, n, ks);  // v = L^-1 k*, variance = k(x,x) - v^T v
  double variance = 1;
  for (double v : ks) variance -= v * v;
  return GpPrediction{y_mean_ + y_scale_ * mean, y_scale_ * y_scale_ * std::max(variance, 0.0)};
}

double ExpectedImprovement(double mean, double stddev, double best, double xi) {
  const double improvement = mean - best - xi;
  if (!(stddev > 0)) return std::max(improvement, 0.0);
  const double z = improvement / stddev;
  return improvement * NormalCdf(z) + stddev * NormalPdf(z);
}

}  // namespace troika::coordinator
