#pragma once
// Mlp: the example's model, a two-layer perceptron (kInputs -> kHidden tanh -> 1) trained on
// mean squared error, with hand-written forward and backward passes in plain C++.
//
// Parameters are created from a seed by a counter-based generator, so every rank that
// calls Mlp(seed) holds bit-identical weights, whatever the number of ranks.
//
// Thread contract: none (a value type).

#include <cstdint>
#include <string>
#include <vector>

namespace troika::examples {

inline constexpr int kInputs = 16;
inline constexpr int kHidden = 32;

// One parameter tensor: row-major values of `shape`.
struct Tensor {
  std::string name;  // "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"
  std::vector<int64_t> shape;
  std::vector<float> values;
};

class Mlp {
 public:
  // Weights uniform in [-scale, scale) / sqrt(fan_in); biases likewise, drawn from `seed`.
  explicit Mlp(uint64_t seed, float scale = 1.0f);

  // The parameters in a fixed order (the order of allreduces and of the weights dump).
  const std::vector<Tensor>& params() const { return params_; }

  // The prediction for one row of kInputs features.
  float Predict(const float* x) const;

  // For `rows` rows of `x` (row-major, kInputs each) and targets `y`: returns the mean of
  // (prediction - target)^2 and sets `grads` (same layout as params()) to its gradient.
  // Sums are accumulated in double, so the result depends little on the number of rows.
  double LossAndGradients(const float* x, const float* y, int rows,
                          std::vector<std::vector<float>>& grads) const;

  // params -= lr * grads.
  void Step(const std::vector<std::vector<float>>& grads, float lr);

 private:
  // Hidden activations tanh(W1 x + b1) for one row.
  void Hidden(const float* x, float* h) const;

  std::vector<Tensor> params_;  // fc1.weight [kHidden, kInputs], fc1.bias [kHidden],
                                // fc2.weight [1, kHidden], fc2.bias [1]
};

// A uniform value in [-1, 1) that is a pure function of (seed, a, b).
float HashUniform(uint64_t seed, uint64_t a, uint64_t b);

}  // namespace troika::examples
