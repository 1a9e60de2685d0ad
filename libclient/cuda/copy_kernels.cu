#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "libclient/cuda/copy_kernels.h"

namespace troika::cuda {
namespace {

// The items of one launch, passed by value as the kernel's parameter (3 KiB, under the
// classic 4 KiB parameter limit).
struct CopyBatch {
  CopyItem items[kMaxCopyItems];
};

// Storage types and the type each computes in (as the CPU planes do).
// Each also gives the factor a scale is multiplied by (Factor), in its Compute type.
struct Half {
  using Storage = __half;
  using Compute = float;
  static __device__ float Load(__half v) { return __half2float(v); }
  static __device__ __half Store(float v) { return __float2half_rn(v); }
  // Rounded to float16 first, as Horovod scales float16 on the GPU (a float16 multiply; the
  // CPU scales it in float32): the float product of two float16 values is exact, so rounding
  // it gives that multiply's result. A factor beyond float16's range stays float32 rather than
  // becoming infinity.
  static __device__ float Factor(double scale) {
    const float rounded = __half2float(__double2half(scale));
    return isinf(rounded) ? static_cast<float>(scale) : rounded;
  }
};
struct BFloat16 {
  using Storage = __nv_bfloat16;
  using Compute = float;
  static __device__ float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __nv_bfloat16 Store(float v) { return __float2bfloat16_rn(v); }
  static __device__ float Factor(double scale) { return static_cast<float>(scale); }
};
template <typename T>
struct Floating {  // computes in T: float32 scales in float32 (reduce.cc's ScaleFloat)
  using Storage = T;
  using Compute = T;
  static __device__ T Load(T v) { return v; }
  static __device__ T Store(T v) { return v; }
  static __device__ T Factor(double scale) { return static_cast<T>(scale); }
};
template <typename T>
struct Integer {
  using Storage = T;
  using Compute = double;
  static __device__ double Factor(double scale) { return scale; }
  static __device__ double Load(T v) { return static_cast<double>(v); }
  // Toward zero, saturating; NaN becomes 0 (reduce.cc's SaturatingTruncate).
  static __device__ T Store(double v) {
    constexpr double kMax = static_cast<double>(std::numeric_limits<T>::max());
    constexpr double kMin = static_cast<double>(std::numeric_limits<T>::min());
    if (isnan(v)) return 0;
    if (v >= kMax) return std::numeric_limits<T>::max();
    if (v <= kMin) return std::numeric_limits<T>::min();
    return static_cast<T>(v);
  }
};

// Bool (troika/types.h): one byte, any nonzero byte true; scaled as bool(x * factor) and
// divided as bool(x / divisor), as reduce.cc's Scale and Divide do (requests never do either).
struct Bool {
  using Storage = uint8_t;
  using Compute = double;
  static __device__ double Factor(double scale) { return scale; }
  static __device__ double Load(uint8_t v) { return v != 0 ? 1.0 : 0.0; }
  static __device__ uint8_t Store(double v) { return v != 0.0 ? 1 : 0; }
};

template <typename Traits>
constexpr bool kIsInteger = false;
template <typename T>
constexpr bool kIsInteger<Integer<T>> = true;
template <typename Traits>
constexpr bool kIsFloating = false;
template <typename T>
constexpr bool kIsFloating<Floating<T>> = true;

// One element: the divisor and the scale in `Domain` (each rounded to Domain's storage, as the
// CPU's Divide then Scale do), converting from `In` and to `Out` around them. Domain is In or
// Out, whichever is wider (but the 16-bit type for int16 / uint16 widened to int32: the CPU
// scales and divides those in 16 bits).
template <typename In, typename Domain, typename Out>
__device__ typename Out::Storage Transform(typename In::Storage x, int64_t divisor,
                                           typename Domain::Compute inverse,
                                           typename Domain::Compute factor) {
  typename Domain::Storage v;
  if constexpr (std::is_same_v<In, Domain>) {
    v = x;
  } else if constexpr (kIsInteger<In> && kIsInteger<Domain>) {
    v = static_cast<typename Domain::Storage>(x);  // modulo 2^bits: int32 -> int16 wraps
  } else {
    v = Domain::Store(In::Load(x));
  }
  if (divisor > 1) {
    if constexpr (kIsInteger<Domain>) {
      using T = typename Domain::Storage;
      const T div = static_cast<T>(divisor);
      v = static_cast<int64_t>(div) == divisor ? static_cast<T>(v / div) : T{0};
    } else if constexpr (kIsFloating<Domain>) {  // divided in T, as reduce.cc's DivideFloat
      v = v / static_cast<typename Domain::Storage>(divisor);
    } else {
      v = Domain::Store(Domain::Load(v) * inverse);
    }
  }
  if (factor != 1) {  // a factor of 1 leaves every value as it is
    v = Domain::Store(Domain::Load(v) * factor);
  }
  if constexpr (std::is_same_v<Domain, Out>) {
    return v;
  } else {
    return Out::Store(Domain::Load(v));
  }
}

template <typename In, typename Domain, typename Out>
__global__ void BatchedCopyKernel(CopyBatch batch, int64_t divisor, double scale) {
  const CopyItem& item = batch.items[blockIdx.y];
  using InT = typename In::Storage;
  using OutT = typename Out::Storage;
  const InT* src = static_cast<const InT*>(item.src);
  OutT* dst = static_cast<OutT*>(item.dst);
  const typename Domain::Compute inverse =
      static_cast<typename Domain::Compute>(1.0 / static_cast<double>(divisor));
  const typename Domain::Compute factor = Domain::Factor(scale);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < item.count;
       i += stride) {
    if (src == nullptr) {
      dst[i] = Out::Store(0);
    } else {
      dst[i] = Transform<In, Domain, Out>(src[i], divisor, inverse, factor);
    }
  }
}

// The unsigned word of an element size.
template <size_t kBytes>
using WordOf = std::conditional_t<
    kBytes == 1, uint8_t,
    std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>>;

// A plain copy (no scaling, no cast) of elements of kBytes bytes: 16 bytes per load and store
// where both ends of an item are 16-byte aligned, element by element for the rest.
template <size_t kBytes>
__global__ void BatchedPlainCopyKernel(CopyBatch batch) {
  using Word = WordOf<kBytes>;
  static_assert(sizeof(Word) == kBytes);
  const CopyItem& item = batch.items[blockIdx.y];
  const Word* src = static_cast<const Word*>(item.src);
  Word* dst = static_cast<Word*>(item.dst);
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  constexpr uint64_t kPerVector = sizeof(uint4) / kBytes;
  uint64_t vectors = 0;
  if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % sizeof(uint4) == 0) {
    vectors = item.count / kPerVector;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint64_t i = first; i < vectors; i += stride) d[i] = src != nullptr ? s[i] : uint4{};
  }
  for (uint64_t i = vectors * kPerVector + first; i < item.count; i += stride) {
    dst[i] = src != nullptr ? src[i] : Word{0};
  }
}

constexpr int kThreads = 256;
// Enough blocks per item to fill the device's SMs when a batch has few large tensors, few
// enough that a batch of many small ones does not launch mostly idle blocks.
constexpr uint64_t kElementsPerThread = 8;
constexpr unsigned kMaxBlocksPerItem = 1024;

template <typename In, typename Domain, typename Out>
cudaError_t Launch(const CopyItem* items, int n, const CopyTransform& t, cudaStream_t stream) {
  for (int first = 0; first < n; first += kMaxCopyItems) {
    const int count = std::min(kMaxCopyItems, n - first);
    CopyBatch batch;
    uint64_t largest = 0;
    for (int i = 0; i < count; ++i) {
      batch.items[i] = items[first + i];
      largest = std::max(largest, items[first + i].count);
    }
    if (largest == 0) continue;
    const uint64_t per_block = kThreads * kElementsPerThread;
    const unsigned blocks = static_cast<unsigned>(
        std::min<uint64_t>(kMaxBlocksPerItem, (largest + per_block - 1) / per_block));
    using InT = typename In::Storage;
    if constexpr (std::is_same_v<InT, typename Out::Storage>) {
      if (t.divisor <= 1 && t.scale == 1.0) {  // Transform is the identity
        BatchedPlainCopyKernel<sizeof(InT)><<<dim3(blocks, count), kThreads, 0, stream>>>(batch);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
        continue;
      }
    }
    BatchedCopyKernel<In, Domain, Out>
        <<<dim3(blocks, count), kThreads, 0, stream>>>(batch, t.divisor, t.scale);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// int16 and uint16 travel through NCCL (which has no 16-bit integers) as int32: sign- or
// zero-extended in the pack, reduced as int32 (whose sums and products agree with the 16-bit
// ones modulo 2^16, and whose min and max are exact), and wrapped back to 16 bits in the unpack.
bool Widened16(const CopyTransform& t) {
  const auto narrow = [](DataType d) { return d == DataType::kInt16 || d == DataType::kUint16; };
  return (narrow(t.src) && t.dst == DataType::kInt32) ||
         (t.src == DataType::kInt32 && narrow(t.dst));
}

template <typename Same>
cudaError_t LaunchSame(const CopyItem* items, int n, const CopyTransform& t, cudaStream_t stream) {
  return Launch<Same, Same, Same>(items, n, t, stream);
}

}  // namespace

bool SupportedTransform(const CopyTransform& t) {
  if (t.divisor < 1) return false;
  if (t.src == t.dst) return true;
  if (Widened16(t)) return true;
  const bool half = [](DataType d) {
    return d == DataType::kFloat16 || d == DataType::kBFloat16;
  }(t.src == DataType::kFloat32 ? t.dst : t.src);
  return half && (t.src == DataType::kFloat32 || t.dst == DataType::kFloat32);
}

cudaError_t BatchedCopy(const CopyItem* items, int n, const CopyTransform& t, cudaStream_t stream) {
  if (!SupportedTransform(t) || n < 0) return cudaErrorInvalidValue;
  using F32 = Floating<float>;
  if (t.src == DataType::kFloat32 && t.dst == DataType::kFloat16) {
    return Launch<F32, F32, Half>(items, n, t, stream);
  }
  if (t.src == DataType::kFloat32 && t.dst == DataType::kBFloat16) {
    return Launch<F32, F32, BFloat16>(items, n, t, stream);
  }
  if (t.src == DataType::kFloat16 && t.dst == DataType::kFloat32) {
    return Launch<Half, F32, F32>(items, n, t, stream);
  }
  if (t.src == DataType::kBFloat16 && t.dst == DataType::kFloat32) {
    return Launch<BFloat16, F32, F32>(items, n, t, stream);
  }
  using I32 = Integer<int32_t>;
  if (t.src == DataType::kInt16 && t.dst == DataType::kInt32) {
    return Launch<Integer<int16_t>, Integer<int16_t>, I32>(items, n, t, stream);
  }
  if (t.src == DataType::kUint16 && t.dst == DataType::kInt32) {
    return Launch<Integer<uint16_t>, Integer<uint16_t>, I32>(items, n, t, stream);
  }
  if (t.src == DataType::kInt32 && t.dst == DataType::kInt16) {
    return Launch<I32, Integer<int16_t>, Integer<int16_t>>(items, n, t, stream);
  }
  if (t.src == DataType::kInt32 && t.dst == DataType::kUint16) {
    return Launch<I32, Integer<uint16_t>, Integer<uint16_t>>(items, n, t, stream);
  }
  switch (t.src) {
    case DataType::kUint8:
      return LaunchSame<Integer<uint8_t>>(items, n, t, stream);
    case DataType::kInt8:
      return LaunchSame<Integer<int8_t>>(items, n, t, stream);
    case DataType::kInt32:
      return LaunchSame<Integer<int32_t>>(items, n, t, stream);
    case DataType::kInt64:
      return LaunchSame<Integer<int64_t>>(items, n, t, stream);
    case DataType::kFloat16:
      return LaunchSame<Half>(items, n, t, stream);
    case DataType::kBFloat16:
      return LaunchSame<BFloat16>(items, n, t, stream);
    case DataType::kFloat32:
      return LaunchSame<F32>(items, n, t, stream);
    case DataType::kFloat64:
      return LaunchSame<Floating<double>>(items, n, t, stream);
    case DataType::kInt16:
      return LaunchSame<Integer<int16_t>>(items, n, t, stream);
    case DataType::kUint16:
      return LaunchSame<Integer<uint16_t>>(items, n, t, stream);
    case DataType::kBool:
      return LaunchSame<Bool>(items, n, t, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace troika::cuda
