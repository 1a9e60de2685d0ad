#include "libclient/transport/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

namespace troika::transport {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Signed overflow is undefined behaviour; integer sums and products wrap like the hardware
// (and like NCCL) instead, computed in the unsigned type of the same width.
template <typename T>
T WrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

template <typename T>
T WrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  // 8-bit operands promote to int, whose range holds any product of two of them.
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

struct SumOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return WrapAdd(a, b);
    } else {
      return a + b;
    }
  }
};

struct ProductOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return WrapMul(a, b);
    } else {
      return a * b;
    }
  }
};

// For floating point, min and max propagate NaN from either side (like torch and NCCL).
struct MinOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (b < a || b != b) ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
};

struct MaxOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (b > a || b != b) ? b : a;
    } else {
      return b > a ? b : a;
    }
  }
};

// The restrict qualifiers let the compiler vectorize; callers never pass overlapping ranges.
template <typename T, typename Op>
void ReduceTyped(void* inout, const void* in, size_t count) {
  T* __restrict a = static_cast<T*>(inout);
  const T* __restrict b = static_cast<const T*>(in);
  for (size_t i = 0; i < count; ++i) a[i] = Op::Apply(a[i], b[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Op>
void ReduceHalf(void* inout, const void* in, size_t count) {
  uint16_t* __restrict a = static_cast<uint16_t*>(inout);
  const uint16_t* __restrict b = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < count; ++i) a[i] = FromFloat(Op::Apply(ToFloat(a[i]), ToFloat(b[i])));
}

template <typename Op>
void ReduceWithOp(void* inout, const void* in, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return ReduceTyped<uint8_t, Op>(inout, in, count);
    case DataType::kInt8:
      return ReduceTyped<int8_t, Op>(inout, in, count);
    case DataType::kInt32:
      return ReduceTyped<int32_t, Op>(inout, in, count);
    case DataType::kInt64:
      return ReduceTyped<int64_t, Op>(inout, in, count);
    case DataType::kFloat16:
      return ReduceHalf<HalfToFloat, FloatToHalf, Op>(inout, in, count);
    case DataType::kBFloat16:
      return ReduceHalf<BFloat16ToFloat, FloatToBFloat16, Op>(inout, in, count);
    case DataType::kFloat32:
      return ReduceTyped<float, Op>(inout, in, count);
    case DataType::kFloat64:
      return ReduceTyped<double, Op>(inout, in, count);
  }
  std::abort();  // Not a DataType: memory corruption or a cast from an unchecked int.
}

// Converts toward zero, saturating at the limits of T (NaN becomes 0): a plain cast of an
// out-of-range double is undefined behaviour.
template <typename T>
T SaturatingTruncate(double v) {
  constexpr double kMax = static_cast<double>(std::numeric_limits<T>::max());
  constexpr double kMin = static_cast<double>(std::numeric_limits<T>::min());
  if (std::isnan(v)) return 0;
  if (v >= kMax) return std::numeric_limits<T>::max();
  if (v <= kMin) return std::numeric_limits<T>::min();
  return static_cast<T>(v);
}

template <typename T>
void ScaleInteger(void* data, size_t count, double factor) {
  T* d = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) {
    d[i] = SaturatingTruncate<T>(static_cast<double>(d[i]) * factor);
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalf(void* data, size_t count, double factor) {
  uint16_t* d = static_cast<uint16_t*>(data);
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < count; ++i) d[i] = FromFloat(ToFloat(d[i]) * f);
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float f) {
  // After F. Giesen's float_to_half_fast3_rtne.
  uint32_t x = FloatBits(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t out;
  if (x >= (127u + 16u) << 23) {
    // |f| >= 65536 (always rounds to Inf), Inf or NaN. NaN stays a quiet NaN.
    out = x > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (x < (113u << 23)) {
    // Result is subnormal or zero: adding 0.5 aligns the mantissa so that the FPU's own
    // round-to-nearest-even does the rounding.
    constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const float shifted = BitsFloat(x) + BitsFloat(kDenormMagic);
    out = static_cast<uint16_t>(FloatBits(shifted) - kDenormMagic);
  } else {
    const uint32_t mantissa_odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xfffu;  // Rebias the exponent and round half up...
    x += mantissa_odd;                   // ...or half to even. Overflow carries into Inf.
    out = static_cast<uint16_t>(x >> 13);
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

float BFloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // Keep NaN a (quiet) NaN.
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

void ReduceInto(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // Averaging is a sum followed by the caller's Scale().
      return ReduceWithOp<SumOp>(inout, in, count, dtype);
    case ReduceOp::kMin:
      return ReduceWithOp<MinOp>(inout, in, count, dtype);
    case ReduceOp::kMax:
      return ReduceWithOp<MaxOp>(inout, in, count, dtype);
    case ReduceOp::kProduct:
      return ReduceWithOp<ProductOp>(inout, in, count, dtype);
  }
  std::abort();  // Not a ReduceOp.
}

void Scale(void* data, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  switch (dtype) {
    case DataType::kUint8:
      return ScaleInteger<uint8_t>(data, count, factor);
    case DataType::kInt8:
      return ScaleInteger<int8_t>(data, count, factor);
    case DataType::kInt32:
      return ScaleInteger<int32_t>(data, count, factor);
    case DataType::kInt64:
      return ScaleInteger<int64_t>(data, count, factor);
    case DataType::kFloat16:
      return ScaleHalf<HalfToFloat, FloatToHalf>(data, count, factor);
    case DataType::kBFloat16:
      return ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(data, count, factor);
    case DataType::kFloat32: {
      float* d = static_cast<float*>(data);
      for (size_t i = 0; i < count; ++i) d[i] = static_cast<float>(d[i] * factor);
      return;
    }
    case DataType::kFloat64: {
      double* d = static_cast<double*>(data);
      for (size_t i = 0; i < count; ++i) d[i] *= factor;
      return;
    }
  }
  std::abort();  // Not a DataType.
}

}  // namespace troika::transport
