#include "libclient/transport/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

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
// Types narrower than unsigned int are widened to unsigned int first: they would otherwise
// promote to (signed) int, where a product of two uint16 values can overflow.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T WrapAdd(T a, T b) {
  using U = WrapType<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

template <typename T>
T WrapMul(T a, T b) {
  using U = WrapType<T>;
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

// Loops run in blocks of kBlock elements: GCC's -O2 cost model vectorizes a loop whose trip
// count is a known multiple of the vector width, but not one that needs a remainder loop.
constexpr size_t kBlock = 16;

// Callers never pass overlapping ranges; __restrict lets the compiler vectorize.
template <typename T, typename Op>
void ReduceTyped(T* __restrict a, const T* __restrict b, size_t count) {
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) a[i + j] = Op::Apply(a[i + j], b[i + j]);
  }
  for (; i < count; ++i) a[i] = Op::Apply(a[i], b[i]);
}

template <typename T, typename Op>
void ReduceTyped(void* inout, const void* in, size_t count) {
  ReduceTyped<T, Op>(static_cast<T*>(inout), static_cast<const T*>(in), count);
}

// Bool (troika/types.h): kSum and kMax are a logical or, kProduct and kMin a logical and.
// Any nonzero byte is true; results are 0 or 1.
struct OrOp {
  static uint8_t Apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) | (b != 0)); }
};
struct AndOp {
  static uint8_t Apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

template <typename Op>
void ReduceBool(void* inout, const void* in, size_t count) {
  if constexpr (std::is_same_v<Op, ProductOp> || std::is_same_v<Op, MinOp>) {
    ReduceTyped<uint8_t, AndOp>(inout, in, count);
  } else {
    ReduceTyped<uint8_t, OrOp>(inout, in, count);
  }
}

// Element-wise conversions of whole arrays; F16C instructions where the CPU has them.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) void HalvesToFloatsF16C(const uint16_t* in, float* out,
                                                            size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void FloatsToHalvesF16C(const float* in, uint16_t* out,
                                                            size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < count; ++i) out[i] = FloatToHalf(in[i]);
}

bool HasF16C() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#else
bool HasF16C() { return false; }
void HalvesToFloatsF16C(const uint16_t*, float*, size_t) { std::abort(); }
void FloatsToHalvesF16C(const float*, uint16_t*, size_t) { std::abort(); }
#endif

void HalvesToFloats(const uint16_t* __restrict in, float* __restrict out, size_t count) {
  if (HasF16C()) return HalvesToFloatsF16C(in, out, count);
  for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatsToHalves(const float* __restrict in, uint16_t* __restrict out, size_t count) {
  if (HasF16C()) return FloatsToHalvesF16C(in, out, count);
  for (size_t i = 0; i < count; ++i) out[i] = FloatToHalf(in[i]);
}

void BFloat16sToFloats(const uint16_t* __restrict in, float* __restrict out, size_t count) {
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) out[i + j] = BFloat16ToFloat(in[i + j]);
  }
  for (; i < count; ++i) out[i] = BFloat16ToFloat(in[i]);
}

void FloatsToBFloat16s(const float* __restrict in, uint16_t* __restrict out, size_t count) {
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) out[i + j] = FloatToBFloat16(in[i + j]);
  }
  for (; i < count; ++i) out[i] = FloatToBFloat16(in[i]);
}

// Half types are widened to float a chunk at a time, reduced with the float kernel, and
// narrowed back, so that conversion and arithmetic both vectorize.
constexpr size_t kHalfChunk = 1024;

template <void (*Widen)(const uint16_t*, float*, size_t),
          void (*Narrow)(const float*, uint16_t*, size_t), typename Op>
void ReduceHalf(void* inout, const void* in, size_t count) {
  uint16_t* a = static_cast<uint16_t*>(inout);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  float fa[kHalfChunk], fb[kHalfChunk];
  for (size_t i = 0; i < count; i += kHalfChunk) {
    const size_t n = std::min(kHalfChunk, count - i);
    Widen(a + i, fa, n);
    Widen(b + i, fb, n);
    ReduceTyped<float, Op>(fa, fb, n);
    Narrow(fa, a + i, n);
  }
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
      return ReduceHalf<HalvesToFloats, FloatsToHalves, Op>(inout, in, count);
    case DataType::kBFloat16:
      return ReduceHalf<BFloat16sToFloats, FloatsToBFloat16s, Op>(inout, in, count);
    case DataType::kFloat32:
      return ReduceTyped<float, Op>(inout, in, count);
    case DataType::kFloat64:
      return ReduceTyped<double, Op>(inout, in, count);
    case DataType::kInt16:
      return ReduceTyped<int16_t, Op>(inout, in, count);
    case DataType::kUint16:
      return ReduceTyped<uint16_t, Op>(inout, in, count);
    case DataType::kBool:
      return ReduceBool<Op>(inout, in, count);
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

template <typename T>
void DivideInteger(void* data, size_t count, int64_t divisor) {
  T* d = static_cast<T*>(data);
  const T div = static_cast<T>(divisor);
  // A divisor beyond T's range (e.g. 300 ranks of int8) truncates every value to 0.
  if (static_cast<int64_t>(div) != divisor) {
    std::fill(d, d + count, T{0});
    return;
  }
  for (size_t i = 0; i < count; ++i) d[i] = static_cast<T>(d[i] / div);
}

// data[i] / divisor in T, correctly rounded (an average is the division a user would write,
// not a product with a rounded reciprocal).
template <typename T>
void DivideFloat(void* data, size_t count, int64_t divisor) {
  T* d = static_cast<T*>(data);
  const T div = static_cast<T>(divisor);
  for (size_t i = 0; i < count; ++i) d[i] /= div;
}

// bool(x * factor), as a float product converted back to bool: false stays false (but for a
// NaN factor), true stays true unless the factor is 0. Requests never scale bools
// (CheckRequest); this only keeps the kernel total, and equal to the GPU's.
void ScaleBool(void* data, size_t count, double factor) {
  uint8_t* d = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < count; ++i) {
    d[i] = static_cast<uint8_t>((d[i] != 0 ? 1.0 : 0.0) * factor != 0.0);
  }
}

// In T itself, the factor rounded to T first (float32 scales in float32, as Horovod's do).
template <typename T>
void ScaleFloat(void* data, size_t count, double factor) {
  T* d = static_cast<T*>(data);
  const T f = static_cast<T>(factor);
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] *= f;
  }
  for (; i < count; ++i) d[i] *= f;
}

template <void (*Widen)(const uint16_t*, float*, size_t),
          void (*Narrow)(const float*, uint16_t*, size_t)>
void ScaleHalf(void* data, size_t count, double factor) {
  uint16_t* d = static_cast<uint16_t*>(data);
  const float f = static_cast<float>(factor);
  float chunk[kHalfChunk];
  for (size_t i = 0; i < count; i += kHalfChunk) {
    const size_t n = std::min(kHalfChunk, count - i);
    Widen(d + i, chunk, n);
    for (size_t j = 0; j < n; ++j) chunk[j] *= f;
    Narrow(chunk, d + i, n);
  }
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
      return ScaleHalf<HalvesToFloats, FloatsToHalves>(data, count, factor);
    case DataType::kBFloat16:
      return ScaleHalf<BFloat16sToFloats, FloatsToBFloat16s>(data, count, factor);
    case DataType::kFloat32:
      return ScaleFloat<float>(data, count, factor);
    case DataType::kFloat64:
      return ScaleFloat<double>(data, count, factor);
    case DataType::kInt16:
      return ScaleInteger<int16_t>(data, count, factor);
    case DataType::kUint16:
      return ScaleInteger<uint16_t>(data, count, factor);
    case DataType::kBool:
      return ScaleBool(data, count, factor);
  }
  std::abort();  // Not a DataType.
}

DataType AccumulationType(DataType dtype, ReduceOp op) {
  const bool half = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  const bool exact = op == ReduceOp::kMin || op == ReduceOp::kMax;
  return half && !exact ? DataType::kFloat32 : dtype;
}

namespace {

template <void (*Widen)(const uint16_t*, float*, size_t),
          void (*Narrow)(const float*, uint16_t*, size_t)>
void WidenScaled(const void* in, float* out, size_t count, double prescale) {
  const uint16_t* h = static_cast<const uint16_t*>(in);
  Widen(h, out, count);
  if (prescale == 1.0) return;
  // Scaled in float32 and rounded to the half type (ScaleHalf), then widened again.
  const float f = static_cast<float>(prescale);
  uint16_t rounded[kHalfChunk];
  for (size_t i = 0; i < count; i += kHalfChunk) {
    const size_t n = std::min(kHalfChunk, count - i);
    for (size_t j = 0; j < n; ++j) out[i + j] *= f;
    Narrow(out + i, rounded, n);
    Widen(rounded, out + i, n);
  }
}

}  // namespace

void ConvertScaled(const void* in, DataType from, void* out, DataType to, size_t count,
                   double prescale) {
  if (count == 0) return;
  if (from == to) {
    if (in != out) std::memcpy(out, in, count * DataTypeSize(from));
    return Scale(out, count, from, prescale);
  }
  if (to == DataType::kFloat32 && from == DataType::kFloat16) {
    return WidenScaled<HalvesToFloats, FloatsToHalves>(in, static_cast<float*>(out), count,
                                                       prescale);
  }
  if (to == DataType::kFloat32 && from == DataType::kBFloat16) {
    return WidenScaled<BFloat16sToFloats, FloatsToBFloat16s>(in, static_cast<float*>(out), count,
                                                             prescale);
  }
  if (from == DataType::kFloat32 && prescale == 1.0) {
    if (to == DataType::kFloat16) {
      return FloatsToHalves(static_cast<const float*>(in), static_cast<uint16_t*>(out), count);
    }
    if (to == DataType::kBFloat16) {
      return FloatsToBFloat16s(static_cast<const float*>(in), static_cast<uint16_t*>(out), count);
    }
  }
  std::abort();  // Not a conversion this kernel offers (a caller's bug).
}

void Divide(void* data, size_t count, DataType dtype, int64_t divisor) {
  if (divisor == 1 || count == 0) return;
  switch (dtype) {
    case DataType::kUint8:
      return DivideInteger<uint8_t>(data, count, divisor);
    case DataType::kInt8:
      return DivideInteger<int8_t>(data, count, divisor);
    case DataType::kInt32:
      return DivideInteger<int32_t>(data, count, divisor);
    case DataType::kInt64:
      return DivideInteger<int64_t>(data, count, divisor);
    case DataType::kInt16:
      return DivideInteger<int16_t>(data, count, divisor);
    case DataType::kUint16:
      return DivideInteger<uint16_t>(data, count, divisor);
    case DataType::kFloat32:
      return DivideFloat<float>(data, count, divisor);
    case DataType::kFloat64:
      return DivideFloat<double>(data, count, divisor);
    default:  // half types in float32, bool, as Scale by 1/divisor (true stays true)
      return Scale(data, count, dtype, 1.0 / static_cast<double>(divisor));
  }
}

}  // namespace troika::transport
