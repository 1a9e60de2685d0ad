#include "libclient/transport/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/libclient/transport/typed_buffer.h"

namespace troika::transport {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Random values whose pairwise sums and products are exact in double and stay in range.
double RandomValue(DataType dtype, std::mt19937_64& rng) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto integer = [&](int64_t lo, int64_t hi) {
    return static_cast<double>(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
  };
  switch (dtype) {
    case DataType::kUint8:
      return integer(0, 15);
    case DataType::kInt8:
      return integer(-11, 11);
    case DataType::kInt32:
      return integer(-40000, 40000);
    case DataType::kInt64:
      return integer(-(int64_t{1} << 26), int64_t{1} << 26);
    case DataType::kInt16:
      return integer(-180, 180);
    case DataType::kUint16:
      return integer(0, 255);
    case DataType::kBool:
      return integer(0, 1);
    default:
      return uniform(-100, 100);
  }
}

class ReduceIntoTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ReduceIntoTest, EveryOpMatchesDoubleReferenceOnRandomData) {
  const DataType dtype = GetParam();
  std::mt19937_64 rng(1234 + static_cast<int>(dtype));
  for (ReduceOp op : kAllReduceOps) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{1001}}) {
      TypedBuffer a(dtype, count), b(dtype, count), expected(dtype, count);
      for (size_t i = 0; i < count; ++i) {
        a.Set(i, RandomValue(dtype, rng));
        b.Set(i, RandomValue(dtype, rng));
        // For the half types this rounds through float exactly like the kernel does.
        expected.Set(i, ReferenceOp(op, a.Get(i), b.Get(i)));
      }
      ReduceInto(a.data(), b.data(), count, dtype, op);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(a.Get(i), expected.Get(i))
            << TypeOpName(dtype, op) << " count " << count << " element " << i;
      }
    }
  }
}

TEST_P(ReduceIntoTest, AverageReducesLikeSum) {
  const DataType dtype = GetParam();
  TypedBuffer a(dtype, 3), b(dtype, 3);
  for (size_t i = 0; i < 3; ++i) {
    a.Set(i, static_cast<double>(i + 1));
    b.Set(i, 2);
  }
  ReduceInto(a.data(), b.data(), 3, dtype, ReduceOp::kAverage);
  // bool's sum is a logical or (requests never average bools; the kernel still reduces).
  EXPECT_EQ(a.Get(0), dtype == DataType::kBool ? 1 : 3);
  EXPECT_EQ(a.Get(2), dtype == DataType::kBool ? 1 : 5);
}

INSTANTIATE_TEST_SUITE_P(AllDataTypes, ReduceIntoTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(ReduceIntoTest, IntegerSumAndProductWrapAround) {
  int8_t a[2] = {127, 100};
  const int8_t b[2] = {1, 3};
  ReduceInto(a, b, 1, DataType::kInt8, ReduceOp::kSum);
  ReduceInto(a + 1, b + 1, 1, DataType::kInt8, ReduceOp::kProduct);
  EXPECT_EQ(a[0], -128);
  EXPECT_EQ(a[1], 44);  // 300 mod 256
  int32_t c = std::numeric_limits<int32_t>::max();
  const int32_t d = 1;
  ReduceInto(&c, &d, 1, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(c, std::numeric_limits<int32_t>::min());
}

TEST(ReduceIntoTest, SixteenBitIntegersWrapAround) {
  int16_t a[3] = {32767, 300, -5};
  const int16_t b[3] = {1, 300, 7};
  ReduceInto(a, b, 1, DataType::kInt16, ReduceOp::kSum);
  ReduceInto(a + 1, b + 1, 1, DataType::kInt16, ReduceOp::kProduct);
  ReduceInto(a + 2, b + 2, 1, DataType::kInt16, ReduceOp::kMin);
  EXPECT_EQ(a[0], -32768);
  EXPECT_EQ(a[1], static_cast<int16_t>(90000 - 65536));
  EXPECT_EQ(a[2], -5);
  // uint16 operands must not promote to a signed int whose product overflows.
  uint16_t u[2] = {65535, 65535};
  const uint16_t v[2] = {65535, 1};
  ReduceInto(u, v, 1, DataType::kUint16, ReduceOp::kProduct);
  ReduceInto(u + 1, v + 1, 1, DataType::kUint16, ReduceOp::kSum);
  EXPECT_EQ(u[0], 1);  // (2^16 - 1)^2 mod 2^16
  EXPECT_EQ(u[1], 0);
}

// troika/types.h: on bool, sum and max are a logical or, product and min a logical and; any
// nonzero byte is true and the results are 0 or 1.
TEST(ReduceIntoTest, BoolOpsAreLogical) {
  const uint8_t a0[4] = {0, 0, 1, 1};
  const uint8_t b[4] = {0, 1, 0, 1};
  const struct {
    ReduceOp op;
    uint8_t expected[4];
  } cases[] = {{ReduceOp::kSum, {0, 1, 1, 1}},
               {ReduceOp::kMax, {0, 1, 1, 1}},
               {ReduceOp::kProduct, {0, 0, 0, 1}},
               {ReduceOp::kMin, {0, 0, 0, 1}}};
  for (const auto& c : cases) {
    uint8_t a[4];
    std::memcpy(a, a0, 4);
    ReduceInto(a, b, 4, DataType::kBool, c.op);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(a[i], c.expected[i]) << ReduceOpName(c.op) << " " << i;
  }
  // Non-canonical true bytes; 40 elements so that the blocked loop runs too.
  std::vector<uint8_t> x(40), y(40);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<uint8_t>(i % 3 == 0 ? 0 : 0x80 + i);
    y[i] = static_cast<uint8_t>(i % 2 == 0 ? 0 : 2);
  }
  std::vector<uint8_t> sum = x, product = x;
  ReduceInto(sum.data(), y.data(), x.size(), DataType::kBool, ReduceOp::kSum);
  ReduceInto(product.data(), y.data(), x.size(), DataType::kBool, ReduceOp::kProduct);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(sum[i], (x[i] != 0 || y[i] != 0) ? 1 : 0) << i;
    EXPECT_EQ(product[i], (x[i] != 0 && y[i] != 0) ? 1 : 0) << i;
  }
}

TEST(ReduceIntoTest, FloatMinAndMaxPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[2] = {1.0f, nan};
  const float b[2] = {nan, 1.0f};
  ReduceInto(a, b, 2, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_TRUE(std::isnan(a[0]));
  EXPECT_TRUE(std::isnan(a[1]));
}

// The vector conversion paths (F16C, blocked bfloat16 loops) must agree with the scalar ones
// on every value, including Inf, NaN, subnormals and signed zero.
TEST(HalfTest, ReductionKernelsPreserveEveryHalfAndBFloat16Value) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<uint16_t> all(0x10000 + 5), copy;
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    copy = all;
    ReduceInto(all.data(), copy.data(), all.size(), dtype, ReduceOp::kMax);
    auto to_float = dtype == DataType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
    for (size_t i = 0; i < all.size(); ++i) {
      if (std::isnan(to_float(copy[i]))) {
        EXPECT_TRUE(std::isnan(to_float(all[i]))) << DataTypeName(dtype) << std::hex << i;
      } else {
        EXPECT_EQ(all[i], copy[i]) << DataTypeName(dtype) << std::hex << " 0x" << i;
      }
    }
    std::vector<uint16_t> scaled = copy;
    Scale(scaled.data(), scaled.size(), dtype, 0.5);
    auto from_float = dtype == DataType::kFloat16 ? FloatToHalf : FloatToBFloat16;
    for (size_t i = 0; i < scaled.size(); ++i) {
      const float expected = to_float(from_float(to_float(copy[i]) * 0.5f));
      if (std::isnan(expected)) continue;
      EXPECT_EQ(scaled[i], from_float(expected)) << DataTypeName(dtype) << std::hex << " 0x" << i;
    }
  }
}

TEST(HalfTest, KnownConversionsFromFloat) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // Largest finite half.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);  // Below the midpoint to 65536.
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // Tie rounds to even: Inf.
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);         // Smallest normal.
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);         // Smallest subnormal.
  EXPECT_EQ(FloatToHalf(1023 * 0x1p-24f), 0x03ff);  // Largest subnormal.
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);         // Tie between 0 and 2^-24: even.
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);     // Tie between 1 and 2 ulps: even.
  EXPECT_EQ(FloatToHalf(0x1p-26f), 0x0000);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);             // Tie: down to even.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);         // Tie: up to even.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // Above the tie.
}

TEST(HalfTest, KnownConversionsToFloat) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x0400), 0x1p-14f);
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversions are an independent reference.
TEST(HalfTest, MatchesCompilerFloat16OnSampledFloats) {
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 997) {
    const float f = FromBits(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    const _Float16 reference = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &reference, sizeof(expected));
    ASSERT_EQ(FloatToHalf(f), expected) << std::hexfloat << f;
  }
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    _Float16 half;
    const uint16_t h16 = static_cast<uint16_t>(h);
    std::memcpy(&half, &h16, sizeof(half));
    const float expected = static_cast<float>(half);
    if (std::isnan(expected)) continue;
    ASSERT_EQ(Bits(HalfToFloat(h16)), Bits(expected)) << std::hex << h;
  }
}
#endif

TEST(BFloat16Test, KnownConversions) {
  EXPECT_EQ(FloatToBFloat16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3f80);      // Tie: down to even.
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3f82);  // Tie: up to even.
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);  // Rounds to Inf.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(
      std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lies only in the low bits must not round to Inf.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0x7f800001u)))));
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0x0001), FromBits(0x00010000u));  // Subnormal.
}

TEST(BFloat16Test, EveryBFloat16RoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(f)))) << std::hex << b;
    } else {
      EXPECT_EQ(FloatToBFloat16(f), b) << std::hex << b;
    }
  }
}

TEST(ScaleTest, IntegersRoundTowardZero) {
  int32_t ints[] = {7, -7, 5, -5, 1, 0};
  Scale(ints, 6, DataType::kInt32, 0.5);
  EXPECT_EQ(ints[0], 3);
  EXPECT_EQ(ints[1], -3);
  EXPECT_EQ(ints[2], 2);
  EXPECT_EQ(ints[3], -2);
  EXPECT_EQ(ints[4], 0);
  EXPECT_EQ(ints[5], 0);
  int64_t big = int64_t{1} << 40;
  Scale(&big, 1, DataType::kInt64, 1.0 / 3.0);
  EXPECT_EQ(big, 366503875925);  // floor(2^40 / 3)
  uint8_t bytes[] = {9, 255};
  Scale(bytes, 2, DataType::kUint8, 0.25);
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(bytes[1], 63);
}

TEST(ScaleTest, IntegersSaturateInsteadOfOverflowing) {
  int8_t small[] = {100, -100};
  Scale(small, 2, DataType::kInt8, 2.0);
  EXPECT_EQ(small[0], 127);
  EXPECT_EQ(small[1], -128);
  uint8_t u = 200;
  Scale(&u, 1, DataType::kUint8, -1.0);
  EXPECT_EQ(u, 0);
}

TEST(ScaleTest, SixteenBitIntegersSaturate) {
  int16_t s[] = {7, -7, 20000, -20000};
  Scale(s, 2, DataType::kInt16, 0.5);
  Scale(s + 2, 2, DataType::kInt16, 2.0);
  EXPECT_EQ(s[0], 3);
  EXPECT_EQ(s[1], -3);
  EXPECT_EQ(s[2], 32767);
  EXPECT_EQ(s[3], -32768);
  uint16_t u[] = {40000, 9};
  Scale(u, 2, DataType::kUint16, 2.0);
  EXPECT_EQ(u[0], 65535);
  EXPECT_EQ(u[1], 18);
}

// Requests never scale bools (CheckRequest); the kernel computes bool(x * factor).
TEST(ScaleTest, BoolIsTheTruthOfTheProduct) {
  uint8_t b[] = {0, 1, 5};
  Scale(b, 3, DataType::kBool, 0.25);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 1);
  Scale(b, 3, DataType::kBool, 0.0);
  EXPECT_EQ(b[1], 0);
  EXPECT_EQ(b[2], 0);
}

TEST(ScaleTest, FloatingPointTypes) {
  for (DataType dtype :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    TypedBuffer buffer(dtype, 3);
    buffer.Set(0, 3.0);
    buffer.Set(1, -1.0);
    buffer.Set(2, 0.0);
    Scale(buffer.data(), 3, dtype, 0.25);
    EXPECT_EQ(buffer.Get(0), 0.75) << DataTypeName(dtype);
    EXPECT_EQ(buffer.Get(1), -0.25) << DataTypeName(dtype);
    EXPECT_EQ(buffer.Get(2), 0.0) << DataTypeName(dtype);
  }
  float f = 1.0f / 3.0f;
  Scale(&f, 1, DataType::kFloat32, 3.0);
  EXPECT_EQ(f, static_cast<float>(static_cast<double>(1.0f / 3.0f) * 3.0));  // Computed in double.
}

TEST(ScaleTest, FactorOneIsANoOp) {
  const uint32_t nan_bits = 0x7fc01234u;  // A NaN payload survives untouched.
  float f = FromBits(nan_bits);
  Scale(&f, 1, DataType::kFloat32, 1.0);
  EXPECT_EQ(Bits(f), nan_bits);
  int64_t big = std::numeric_limits<int64_t>::max();  // Not representable in double.
  Scale(&big, 1, DataType::kInt64, 1.0);
  EXPECT_EQ(big, std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace troika::transport

namespace troika::transport {
namespace {

TEST(DivideTest, IntegersDivideExactlyTowardZero) {
  // Beyond 2^53 a detour through double would round; integer division must not.
  std::vector<int64_t> big = {(int64_t{1} << 60) + 7, -((int64_t{1} << 60) + 7), 9, -9};
  Divide(big.data(), big.size(), DataType::kInt64, 3);
  EXPECT_EQ(big[0], ((int64_t{1} << 60) + 7) / 3);
  EXPECT_EQ(big[1], -(((int64_t{1} << 60) + 7) / 3));
  EXPECT_EQ(big[2], 3);
  EXPECT_EQ(big[3], -3);
  std::vector<int8_t> small = {49, -50, 6};
  Divide(small.data(), small.size(), DataType::kInt8, 7);
  EXPECT_EQ(small, (std::vector<int8_t>{7, -7, 0}));
  std::vector<int16_t> shorts = {-32768, 32767, 13};
  Divide(shorts.data(), shorts.size(), DataType::kInt16, 4);
  EXPECT_EQ(shorts, (std::vector<int16_t>{-8192, 8191, 3}));
  std::vector<uint16_t> ushorts = {65535, 7};
  Divide(ushorts.data(), ushorts.size(), DataType::kUint16, 2);
  EXPECT_EQ(ushorts, (std::vector<uint16_t>{32767, 3}));
  std::vector<int16_t> many = {32767};
  Divide(many.data(), many.size(), DataType::kInt16, 40000);  // more ranks than int16 holds
  EXPECT_EQ(many[0], 0);
  std::vector<uint8_t> wide = {255};
  Divide(wide.data(), wide.size(), DataType::kUint8, 300);  // more ranks than uint8 holds
  EXPECT_EQ(wide[0], 0);
}

TEST(DivideTest, FloatsAreScaled) {
  std::vector<double> d = {3.0, -1.5};
  Divide(d.data(), d.size(), DataType::kFloat64, 3);
  EXPECT_DOUBLE_EQ(d[0], 1.0);
  EXPECT_DOUBLE_EQ(d[1], -0.5);
}

}  // namespace
}  // namespace troika::transport

namespace troika::transport {
namespace {

TEST(AccumulationTypeTest, HalfTypesAddInFloat32AndCompareInTheirOwn) {
  for (DataType half : {DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kProduct}) {
      EXPECT_EQ(AccumulationType(half, op), DataType::kFloat32) << DataTypeName(half);
    }
    EXPECT_EQ(AccumulationType(half, ReduceOp::kMin), half);
    EXPECT_EQ(AccumulationType(half, ReduceOp::kMax), half);
  }
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kBool}) {
    EXPECT_EQ(AccumulationType(dtype, ReduceOp::kSum), dtype) << DataTypeName(dtype);
  }
}

TEST(ConvertTest, WideningIsExactAndNarrowingRoundsToNearestEven) {
  // Every half widens exactly and narrows back to itself (NaNs stay NaNs).
  std::vector<uint16_t> halves(1 << 16);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  for (DataType half : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<float> wide(halves.size());
    Convert(halves.data(), half, wide.data(), DataType::kFloat32, halves.size());
    std::vector<uint16_t> back(halves.size());
    Convert(wide.data(), DataType::kFloat32, back.data(), half, halves.size());
    for (size_t i = 0; i < halves.size(); ++i) {
      const float f = wide[i];
      if (std::isnan(f)) continue;
      ASSERT_EQ(back[i], halves[i]) << DataTypeName(half) << " " << i;
      ASSERT_EQ(f,
                half == DataType::kFloat16 ? HalfToFloat(halves[i]) : BFloat16ToFloat(halves[i]));
    }
  }
  // 1 + 2^-11 lies halfway between two halves: to the even one, 1.
  const float halfway[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
  uint16_t rounded[2];
  Convert(halfway, DataType::kFloat32, rounded, DataType::kFloat16, 2);
  EXPECT_EQ(rounded[0], 0x3C00);
  EXPECT_EQ(rounded[1], 0x3C02);
}

TEST(ConvertTest, APrescaleRoundsToTheInputTypeBeforeWidening) {
  // As if the caller had scaled the half tensor (Scale) and the result were widened.
  std::vector<uint16_t> in(3000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = FloatToHalf(1.0f + static_cast<float>(i) / 1024);
  std::vector<uint16_t> scaled = in;
  Scale(scaled.data(), scaled.size(), DataType::kFloat16, 0.3);
  std::vector<float> wide(in.size());
  Convert(in.data(), DataType::kFloat16, wide.data(), DataType::kFloat32, in.size(), 0.3);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(wide[i], HalfToFloat(scaled[i])) << i;
  // The same type: a copy, then Scale().
  std::vector<double> d = {1.5, -2.0}, copy(2);
  Convert(d.data(), DataType::kFloat64, copy.data(), DataType::kFloat64, 2, 2.0);
  EXPECT_EQ(copy, (std::vector<double>{3.0, -4.0}));
  EXPECT_EQ(d, (std::vector<double>{1.5, -2.0}));
}

}  // namespace
}  // namespace troika::transport
