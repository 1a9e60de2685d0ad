// The batched copy kernels against the CPU data planes' arithmetic (transport/reduce.h) on fresh
// random data. Tolerance: integers exact; floating types within 1 ulp of their storage type
// (the kernels perform the same IEEE operations in the same order, so they are expected to
// match bit for bit; the ulp leaves room only for a compiler contracting differently).
// Needs a CUDA device; skips with the reason without one.

#include "libclient/cuda/copy_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/types.h"
#include "gtest/gtest.h"
#include "libclient/transport/reduce.h"
#include "tests/no_gpu.h"

namespace troika::cuda {
namespace {

using transport::BFloat16ToFloat;
using transport::FloatToBFloat16;
using transport::FloatToHalf;
using transport::HalfToFloat;

class CopyKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::NoGpu(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    for (void* p : allocations_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  void* Device(const std::vector<uint8_t>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.size(), 1)), cudaSuccess);
    allocations_.push_back(p);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
  }
  std::vector<uint8_t> Host(const void* device, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    if (bytes > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
  std::mt19937_64 rng_{20261121};
};

// Random values of `dtype` that keep scaled results in range of the interesting cases:
// negatives, fractions, large magnitudes, for integers the type's extremes.
std::vector<uint8_t> Random(DataType dtype, size_t count, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(count * DataTypeSize(dtype));
  std::uniform_real_distribution<double> real(-1000.0, 1000.0);
  std::uniform_int_distribution<int64_t> any(INT64_MIN, INT64_MAX);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* at = bytes.data() + i * DataTypeSize(dtype);
    const int64_t n = any(rng);
    const double x = real(rng);
    switch (dtype) {
      case DataType::kUint8:
        *at = static_cast<uint8_t>(n);
        break;
      case DataType::kInt8:
        *reinterpret_cast<int8_t*>(at) = static_cast<int8_t>(n);
        break;
      case DataType::kInt32: {
        int32_t v = static_cast<int32_t>(n);
        std::memcpy(at, &v, 4);
        break;
      }
      case DataType::kInt64:
        std::memcpy(at, &n, 8);
        break;
      case DataType::kFloat16: {
        uint16_t v = FloatToHalf(static_cast<float>(x));
        std::memcpy(at, &v, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t v = FloatToBFloat16(static_cast<float>(x));
        std::memcpy(at, &v, 2);
        break;
      }
      case DataType::kFloat32: {
        float v = static_cast<float>(x);
        std::memcpy(at, &v, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(at, &x, 8);
        break;
      case DataType::kInt16: {
        int16_t v = static_cast<int16_t>(n);
        std::memcpy(at, &v, 2);
        break;
      }
      case DataType::kUint16: {
        uint16_t v = static_cast<uint16_t>(n);
        std::memcpy(at, &v, 2);
        break;
      }
      case DataType::kBool:
        *at = n % 3 == 0 ? 0 : static_cast<uint8_t>(n | 1);  // true bytes other than 1 too
        break;
    }
  }
  return bytes;
}

bool Sixteen(DataType d) { return d == DataType::kInt16 || d == DataType::kUint16; }

// An int16 / uint16 item widened to int32 (sign- or zero-extended), or int32 wrapped to 16
// bits, as element values.
std::vector<uint8_t> ConvertInteger(const std::vector<uint8_t>& in, size_t count, DataType from,
                                    DataType to) {
  std::vector<uint8_t> out(count * DataTypeSize(to));
  for (size_t i = 0; i < count; ++i) {
    int32_t v;
    if (from == DataType::kInt32) {
      std::memcpy(&v, in.data() + 4 * i, 4);
    } else if (from == DataType::kInt16) {
      int16_t x;
      std::memcpy(&x, in.data() + 2 * i, 2);
      v = x;
    } else {
      uint16_t x;
      std::memcpy(&x, in.data() + 2 * i, 2);
      v = x;
    }
    if (to == DataType::kInt32) {
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const uint16_t low = static_cast<uint16_t>(v);  // modulo 2^16, for both 16-bit types
      std::memcpy(out.data() + 2 * i, &low, 2);
    }
  }
  return out;
}

// The factor the kernels scale a float16 tensor by (copy_kernels.h): rounded to float16, as
// Horovod's GPU scaling does, unless that overflows.
double KernelScale(DataType domain, double scale) {
  if (domain != DataType::kFloat16) return scale;
  const float rounded = HalfToFloat(FloatToHalf(static_cast<float>(scale)));
  return std::isinf(rounded) ? scale : rounded;
}

// The CPU reference of one item: convert (if the types differ, the arithmetic is in float32,
// or for the 16-bit integers widened to int32 in the 16-bit type), divide, scale, convert.
std::vector<uint8_t> Reference(const std::vector<uint8_t>& in, size_t count,
                               const CopyTransform& t) {
  if (Sixteen(t.src) && t.dst == DataType::kInt32) {
    std::vector<uint8_t> domain = in;
    transport::Divide(domain.data(), count, t.src, t.divisor);
    transport::Scale(domain.data(), count, t.src, t.scale);
    return ConvertInteger(domain, count, t.src, t.dst);
  }
  if (t.src == DataType::kInt32 && Sixteen(t.dst)) {
    std::vector<uint8_t> domain = ConvertInteger(in, count, t.src, t.dst);
    transport::Divide(domain.data(), count, t.dst, t.divisor);
    transport::Scale(domain.data(), count, t.dst, t.scale);
    return domain;
  }
  std::vector<uint8_t> domain = in;
  DataType domain_type = t.src;
  if (t.src != t.dst) {  // one side is float32: work in it
    domain_type = DataType::kFloat32;
    if (t.src != DataType::kFloat32) {
      domain.assign(count * 4, 0);
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, in.data() + 2 * i, 2);
        float f = t.src == DataType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
        std::memcpy(domain.data() + 4 * i, &f, 4);
      }
    }
  }
  transport::Divide(domain.data(), count, domain_type, t.divisor);
  transport::Scale(domain.data(), count, domain_type, KernelScale(domain_type, t.scale));
  if (t.dst == domain_type) return domain;
  std::vector<uint8_t> out(count * 2);
  for (size_t i = 0; i < count; ++i) {
    float f;
    std::memcpy(&f, domain.data() + 4 * i, 4);
    uint16_t h = t.dst == DataType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

double ValueAt(const std::vector<uint8_t>& bytes, DataType dtype, size_t i) {
  const uint8_t* at = bytes.data() + i * DataTypeSize(dtype);
  switch (dtype) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return HalfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return BFloat16ToFloat(h);
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, at, 8);
      return d;
    }
    default:
      return 0;
  }
}

// Floating values agree within one unit in the last place of `dtype`; integers exactly.
void ExpectMatches(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
                   DataType dtype, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const size_t n = want.size() / DataTypeSize(dtype);
  const bool integer = dtype == DataType::kUint8 || dtype == DataType::kInt8 ||
                       dtype == DataType::kInt32 || dtype == DataType::kInt64 ||
                       dtype == DataType::kInt16 || dtype == DataType::kUint16 ||
                       dtype == DataType::kBool;
  if (integer) {
    ASSERT_EQ(want, got) << what;
    return;
  }
  const int mantissa_bits = dtype == DataType::kFloat16    ? 10
                            : dtype == DataType::kBFloat16 ? 7
                            : dtype == DataType::kFloat32  ? 23
                                                           : 52;
  int mismatches = 0;
  for (size_t i = 0; i < n && mismatches < 5; ++i) {
    const double w = ValueAt(want, dtype, i), g = ValueAt(got, dtype, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(w), 1e-300)) - mantissa_bits);
    if (std::fabs(w - g) > ulp) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", CPU reference " << w;
      ++mismatches;
    }
  }
}

// Sizes that cross block and launch boundaries, with empty and one-element tensors.
const std::vector<size_t> kCounts = {0, 1, 3, 255, 256, 257, 2047, 4097, 65537};

// Packs items of `counts` with `t` in one BatchedCopy call and checks every item.
void CheckBatch(CopyKernelsTest& test, const std::vector<size_t>& counts, const CopyTransform& t,
                const std::string& what, std::mt19937_64& rng,
                const std::function<void*(const std::vector<uint8_t>&)>& device,
                const std::function<std::vector<uint8_t>(const void*, size_t)>& host,
                cudaStream_t stream) {
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<CopyItem> items;
  for (size_t count : counts) {
    inputs.push_back(Random(t.src, count, rng));
    void* src = device(inputs.back());
    void* dst = device(std::vector<uint8_t>(count * DataTypeSize(t.dst), 0xAB));
    items.push_back({src, dst, count});
  }
  ASSERT_EQ(BatchedCopy(items.data(), static_cast<int>(items.size()), t, stream), cudaSuccess)
      << what;
  for (size_t i = 0; i < counts.size(); ++i) {
    ExpectMatches(Reference(inputs[i], counts[i], t),
                  host(items[i].dst, counts[i] * DataTypeSize(t.dst)), t.dst,
                  what + " item " + std::to_string(i));
  }
}

// (scale, divisor) pairs; the last scale is inexact in float16 (the factor of Horovod's
// prescale test).
const std::vector<std::pair<double, int64_t>> kScalesAndDivisors = {
    {1.0, 1}, {0.5, 1}, {-3.25, 1}, {1.0, 3}, {0.125, 7}, {1e10, 1}, {0.1915194503788923, 1}};

TEST_F(CopyKernelsTest, EveryDtypeWithScalingAndDivisionMatchesTheCpu) {
  auto device = [&](const std::vector<uint8_t>& h) { return Device(h); };
  auto host = [&](const void* d, size_t b) { return Host(d, b); };
  for (int d = 0; d < kNumDataTypes; ++d) {
    const DataType dtype = static_cast<DataType>(d);
    for (auto [scale, divisor] : kScalesAndDivisors) {
      CheckBatch(*this, kCounts, {dtype, dtype, scale, divisor},
                 std::string(DataTypeName(dtype)) + " scale " + std::to_string(scale) +
                     " divisor " + std::to_string(divisor),
                 rng_, device, host, stream_);
    }
  }
}

TEST_F(CopyKernelsTest, HalfCastsForCompressionMatchTheCpu) {
  auto device = [&](const std::vector<uint8_t>& h) { return Device(h); };
  auto host = [&](const void* d, size_t b) { return Host(d, b); };
  for (DataType half : {DataType::kFloat16, DataType::kBFloat16}) {
    const std::string name = DataTypeName(half);
    // Pack: float32 -> 16 bits with the prescale; unpack: back with averaging and postscale.
    CheckBatch(*this, kCounts, {DataType::kFloat32, half, 0.5, 1}, "pack to " + name, rng_, device,
               host, stream_);
    CheckBatch(*this, kCounts, {half, DataType::kFloat32, 2.0, 4}, "unpack from " + name, rng_,
               device, host, stream_);
  }
}

// NCCL has no 16-bit integers: int16 and uint16 travel as int32 (copy_kernels.h). The pack
// scales in 16 bits and widens; the unpack wraps to 16 bits, then divides and scales.
TEST_F(CopyKernelsTest, SixteenBitIntegersWidenToInt32AndWrapBack) {
  auto device = [&](const std::vector<uint8_t>& h) { return Device(h); };
  auto host = [&](const void* d, size_t b) { return Host(d, b); };
  for (DataType narrow : {DataType::kInt16, DataType::kUint16}) {
    const std::string name = DataTypeName(narrow);
    CheckBatch(*this, kCounts, {narrow, DataType::kInt32, 1.0, 1}, "pack " + name, rng_, device,
               host, stream_);
    CheckBatch(*this, kCounts, {narrow, DataType::kInt32, -0.75, 1}, "scaled pack " + name, rng_,
               device, host, stream_);
    CheckBatch(*this, kCounts, {DataType::kInt32, narrow, 1.0, 1}, "unpack " + name, rng_, device,
               host, stream_);
    CheckBatch(*this, kCounts, {DataType::kInt32, narrow, 0.5, 3}, "averaged unpack " + name, rng_,
               device, host, stream_);
  }
}

TEST_F(CopyKernelsTest, ManyTensorsInOneCallAndZerosForMissingInputs) {
  // 300 items: three launches of at most kMaxCopyItems; every third has no input (zeros).
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<CopyItem> items;
  for (int i = 0; i < 300; ++i) {
    const size_t count = 1 + static_cast<size_t>(i) * 7;
    inputs.push_back(Random(DataType::kFloat32, count, rng_));
    void* src = i % 3 == 0 ? nullptr : Device(inputs.back());
    void* dst = Device(std::vector<uint8_t>(count * 4, 0xAB));
    items.push_back({src, dst, count});
  }
  ASSERT_EQ(
      BatchedCopy(items.data(), 300, {DataType::kFloat32, DataType::kFloat32, 1.0, 1}, stream_),
      cudaSuccess);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> got = Host(items[i].dst, items[i].count * 4);
    if (i % 3 == 0) {
      EXPECT_EQ(got, std::vector<uint8_t>(got.size(), 0)) << "item " << i;
    } else {
      EXPECT_EQ(got, inputs[i]) << "item " << i;
    }
  }
}

// Plain copies (no scaling, no cast) move 16 bytes at a time where both ends are 16-byte
// aligned: items at every alignment of each element size copy every byte and nothing past.
TEST_F(CopyKernelsTest, PlainCopiesAtAnyAlignmentCopyExactlyTheirBytes) {
  constexpr size_t kGuard = 64;  // bytes around each item that must stay untouched
  for (int d = 0; d < kNumDataTypes; ++d) {
    const DataType dtype = static_cast<DataType>(d);
    const size_t size = DataTypeSize(dtype);
    for (auto [src_offset, dst_offset] :
         std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 0}, {0, 3}, {5, 2}, {16, 16}}) {
      std::vector<std::vector<uint8_t>> inputs;
      std::vector<CopyItem> items;
      std::vector<uint8_t*> bases;
      for (size_t i = 0; i < kCounts.size(); ++i) {
        const size_t count = kCounts[i];
        inputs.push_back(Random(dtype, count, rng_));
        std::vector<uint8_t> src_bytes(src_offset * size, 0x5A);
        src_bytes.insert(src_bytes.end(), inputs.back().begin(), inputs.back().end());
        auto* src = static_cast<uint8_t*>(Device(src_bytes)) + src_offset * size;
        auto* base = static_cast<uint8_t*>(
            Device(std::vector<uint8_t>(2 * kGuard + dst_offset * size + count * size, 0xAB)));
        bases.push_back(base);
        // Every fourth item has no input: zeros.
        items.push_back({i % 4 == 3 ? nullptr : src, base + kGuard + dst_offset * size, count});
      }
      ASSERT_EQ(BatchedCopy(items.data(), static_cast<int>(items.size()), {dtype, dtype, 1.0, 1},
                            stream_),
                cudaSuccess);
      for (size_t i = 0; i < items.size(); ++i) {
        const size_t bytes = kCounts[i] * size;
        std::vector<uint8_t> want(2 * kGuard + dst_offset * size + bytes, 0xAB);
        if (items[i].src != nullptr) {
          std::copy(inputs[i].begin(), inputs[i].end(), want.begin() + kGuard + dst_offset * size);
        } else {
          std::fill_n(want.begin() + kGuard + dst_offset * size, bytes, 0);
        }
        EXPECT_EQ(Host(bases[i], want.size()), want)
            << DataTypeName(dtype) << " offsets " << src_offset << "/" << dst_offset << " item "
            << i << " (" << kCounts[i] << " elements)";
      }
    }
  }
}

TEST_F(CopyKernelsTest, InPlaceScaling) {
  std::vector<uint8_t> in = Random(DataType::kFloat64, 10000, rng_);
  void* p = Device(in);
  CopyItem item{p, p, 10000};
  const CopyTransform t{DataType::kFloat64, DataType::kFloat64, 0.25, 2};
  ASSERT_EQ(BatchedCopy(&item, 1, t, stream_), cudaSuccess);
  ExpectMatches(Reference(in, 10000, t), Host(p, in.size()), DataType::kFloat64, "in place");
}

TEST(CopyTransformTest, OnlyCompressionCastsChangeTheType) {
  EXPECT_TRUE(SupportedTransform({DataType::kInt8, DataType::kInt8, 2.0, 3}));
  EXPECT_TRUE(SupportedTransform({DataType::kFloat32, DataType::kBFloat16, 1.0, 1}));
  EXPECT_TRUE(SupportedTransform({DataType::kFloat16, DataType::kFloat32, 1.0, 1}));
  EXPECT_FALSE(SupportedTransform({DataType::kFloat64, DataType::kFloat16, 1.0, 1}));
  EXPECT_FALSE(SupportedTransform({DataType::kInt32, DataType::kFloat32, 1.0, 1}));
  // The 16-bit integers' detour through NCCL's int32, both ways; no other integer widening.
  EXPECT_TRUE(SupportedTransform({DataType::kInt16, DataType::kInt32, 0.5, 1}));
  EXPECT_TRUE(SupportedTransform({DataType::kUint16, DataType::kInt32, 1.0, 1}));
  EXPECT_TRUE(SupportedTransform({DataType::kInt32, DataType::kInt16, 1.0, 4}));
  EXPECT_TRUE(SupportedTransform({DataType::kInt32, DataType::kUint16, 1.0, 4}));
  EXPECT_FALSE(SupportedTransform({DataType::kInt8, DataType::kInt32, 1.0, 1}));
  EXPECT_FALSE(SupportedTransform({DataType::kInt16, DataType::kUint16, 1.0, 1}));
  EXPECT_FALSE(SupportedTransform({DataType::kInt16, DataType::kFloat32, 1.0, 1}));
  EXPECT_TRUE(SupportedTransform({DataType::kBool, DataType::kBool, 1.0, 1}));
  EXPECT_FALSE(SupportedTransform({DataType::kFloat32, DataType::kFloat32, 1.0, 0}));
}

}  // namespace
}  // namespace troika::cuda
