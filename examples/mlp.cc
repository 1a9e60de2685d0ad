#include "examples/mlp.h"

#include <cmath>

namespace troika::examples {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

enum ParamIndex { kW1 = 0, kB1 = 1, kW2 = 2, kB2 = 3 };

Tensor RandomTensor(std::string name, std::vector<int64_t> shape, uint64_t seed, int index,
                    float bound) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  Tensor t{std::move(name), std::move(shape), std::vector<float>(count)};
  for (int64_t i = 0; i < count; ++i) t.values[i] = bound * HashUniform(seed, index, i);
  return t;
}

}  // namespace

float HashUniform(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t h = SplitMix64(seed ^ SplitMix64(a ^ SplitMix64(b)));
  // The top 24 bits give an exactly representable float in [0, 1).
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

Mlp::Mlp(uint64_t seed, float scale) {
  const float bound1 = scale / std::sqrt(static_cast<float>(kInputs));
  const float bound2 = scale / std::sqrt(static_cast<float>(kHidden));
  params_.push_back(RandomTensor("fc1.weight", {kHidden, kInputs}, seed, kW1, bound1));
  params_.push_back(RandomTensor("fc1.bias", {kHidden}, seed, kB1, bound1));
  params_.push_back(RandomTensor("fc2.weight", {1, kHidden}, seed, kW2, bound2));
  params_.push_back(RandomTensor("fc2.bias", {1}, seed, kB2, bound2));
}

void Mlp::Hidden(const float* x, float* h) const {
  const std::vector<float>& w1 = params_[kW1].values;
  const std::vector<float>& b1 = params_[kB1].values;
  for (int j = 0; j < kHidden; ++j) {
    float z = b1[j];
    for (int i = 0; i < kInputs; ++i) z += w1[j * kInputs + i] * x[i];
    h[j] = std::tanh(z);
  }
}

float Mlp::Predict(const float* x) const {
  float h[kHidden];
  Hidden(x, h);
  float out = params_[kB2].values[0];
  for (int j = 0; j < kHidden; ++j) out += params_[kW2].values[j] * h[j];
  return out;
}

double Mlp::LossAndGradients(const float* x, const float* y, int rows,
                             std::vector<std::vector<float>>& grads) const {
  std::vector<std::vector<double>> sums(params_.size());
  for (size_t p = 0; p < params_.size(); ++p) sums[p].assign(params_[p].values.size(), 0.0);
  const std::vector<float>& w2 = params_[kW2].values;
  double loss = 0;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * kInputs;
    float h[kHidden];
    Hidden(xr, h);
    double out = params_[kB2].values[0];
    for (int j = 0; j < kHidden; ++j) out += static_cast<double>(w2[j]) * h[j];
    const double err = out - y[r];
    loss += err * err;
    const double d_out = 2.0 * err;  // d(err^2)/d(out)
    sums[kB2][0] += d_out;
    for (int j = 0; j < kHidden; ++j) {
      sums[kW2][j] += d_out * h[j];
      const double d_z = d_out * w2[j] * (1.0 - static_cast<double>(h[j]) * h[j]);
      sums[kB1][j] += d_z;
      for (int i = 0; i < kInputs; ++i) sums[kW1][j * kInputs + i] += d_z * xr[i];
    }
  }
  grads.resize(params_.size());
  for (size_t p = 0; p < params_.size(); ++p) {
    grads[p].resize(sums[p].size());
    for (size_t k = 0; k < sums[p].size(); ++k) grads[p][k] = static_cast<float>(sums[p][k] / rows);
  }
  return loss / rows;
}

void Mlp::Step(const std::vector<std::vector<float>>& grads, float lr) {
  for (size_t p = 0; p < params_.size(); ++p) {
    std::vector<float>& values = params_[p].values;
    for (size_t k = 0; k < values.size(); ++k) values[k] -= lr * grads[p][k];
  }
}

}  // namespace troika::examples
