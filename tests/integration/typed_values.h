#pragma once
// Reading and writing elements of any DataType as double, for reference checks. Test values
// are small integers, exactly representable in every dtype, so sums, minima, maxima and small
// products are exact everywhere and only averages need a tolerance.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/types.h"
#include "libclient/transport/reduce.h"

namespace troika::testing {

inline void Put(DataType dtype, void* data, size_t i, double v) {
  switch (dtype) {
    case DataType::kUint8:
      static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = transport::FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = transport::FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(data)[i] = v;
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(data)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kUint16:
      static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(data)[i] = v != 0 ? 1 : 0;
      break;
  }
}

inline double Get(DataType dtype, const void* data, size_t i) {
  switch (dtype) {
    case DataType::kUint8:
      return static_cast<const uint8_t*>(data)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(data)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    case DataType::kInt64:
      return static_cast<const int64_t*>(data)[i];
    case DataType::kFloat16:
      return transport::HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBFloat16:
      return transport::BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(data)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(data)[i];
    case DataType::kUint16:
      return static_cast<const uint16_t*>(data)[i];
    case DataType::kBool:
      return static_cast<const uint8_t*>(data)[i];  // the byte: results must be 0 or 1
  }
  return 0;
}

inline bool IsFloat(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

// Relative tolerance of a value computed with one rounding in `dtype`.
inline double Tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return 1e-3;
    case DataType::kBFloat16:
      return 8e-3;
    case DataType::kFloat32:
      return 1e-6;
    case DataType::kFloat64:
      return 1e-12;
    default:
      return 0;
  }
}

// A tensor of `count` elements of `dtype` holding values(i).
template <typename F>
std::vector<uint8_t> MakeTensor(DataType dtype, size_t count, F values) {
  std::vector<uint8_t> out(count * DataTypeSize(dtype) + 1);  // +1: never a null data()
  for (size_t i = 0; i < count; ++i) Put(dtype, out.data(), i, values(i));
  return out;
}

}  // namespace troika::testing
