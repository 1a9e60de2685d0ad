#pragma once
// Elementwise kernels on host memory for every DataType, shared by all CPU data planes and
// the fusion buffer. float16 and bfloat16 are computed in float32 and rounded to nearest even.

#include <cstddef>
#include <cstring>

#include "common/types.h"

namespace troika::transport {

// inout[i] = inout[i] (op) in[i], for i < count. `op` is kSum, kMin, kMax or kProduct
// (kAverage reduces like kSum; the caller scales). The ranges must not overlap. Integer sums
// and products wrap around; floating-point min and max propagate NaN. kBool: kSum and kMax
// are a logical or, kProduct and kMin a logical and (any nonzero byte is true; results are 0
// or 1).
void ReduceInto(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op);

// data[i] *= factor, computed in double for integers, in float32 for float32 and the half types,
// in double for float64 (Horovod's rules), and converted back; integer results are rounded
// toward zero (saturating at the type's limits; NaN becomes 0).
// A factor of 1 is a no-op. kBool: bool(x * factor) (requests never scale bools).
void Scale(void* data, size_t count, DataType dtype, double factor);

// data[i] /= divisor (divisor > 0): exact integer division rounding toward zero for integer
// dtypes (no detour through double, so int64 stays exact beyond 2^53); a division in the type
// itself, correctly rounded, for float32 and float64; a multiplication by 1/divisor in float32
// for the half types. Averaging is a sum followed by this.
void Divide(void* data, size_t count, DataType dtype, int64_t divisor);

// The type a reduction of `dtype` by `op` is carried out in: float32 for float16 and bfloat16
// under sum, average and product, so that every contribution is added in float32 and the
// result is rounded to the half type once, after the average and the post-scale (Horovod's
// CPU rule, "FP32 math for FP16"); `dtype` itself otherwise (min and max are exact).
DataType AccumulationType(DataType dtype, ReduceOp op);

// Convert's every case, out of line.
void ConvertScaled(const void* in, DataType from, void* out, DataType to, size_t count,
                   double prescale);

// out[i] = in[i] converted from `from` to `to`, for `from == to` (a copy; `in` may be `out`)
// or between float32 and a half type (rounded to nearest even). `prescale` multiplies each
// element in `from`'s own precision first, as Scale() does (a half input is rounded to its
// type before widening, as if the caller had scaled it); a narrowing takes none. Any other
// pair aborts. The commonest case, a copy in the same type unscaled (each small allreduce
// makes two), is inline: no call but the copy's.
inline void Convert(const void* in, DataType from, void* out, DataType to, size_t count,
                    double prescale = 1.0) {
  if (from != to || prescale != 1.0) return ConvertScaled(in, from, out, to, count, prescale);
  if (in != out && count > 0) std::memcpy(out, in, count * DataTypeSize(from));
}

// IEEE half and bfloat16 conversions (round to nearest even).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace troika::transport
