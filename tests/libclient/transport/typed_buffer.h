#pragma once
// TypedBuffer: a host buffer of `count` elements of any DataType, read and written as
// double, for building inputs and checking results of reductions in tests. Header-only.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/types.h"
#include "libclient/transport/reduce.h"

namespace troika::transport {

inline constexpr DataType kAllDataTypes[] = {
    DataType::kUint8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
    DataType::kInt16,   DataType::kUint16,   DataType::kBool,
};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                             ReduceOp::kProduct};

inline bool IsUnsigned(DataType dtype) {
  return dtype == DataType::kUint8 || dtype == DataType::kUint16 || dtype == DataType::kBool;
}

class TypedBuffer {
 public:
  TypedBuffer(DataType dtype, size_t count)
      : dtype_(dtype), count_(count), bytes_(count * DataTypeSize(dtype) + 1) {}

  DataType dtype() const { return dtype_; }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * DataTypeSize(dtype_); }
  // Never null, even when empty.
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  // Element i converted to double (exactly: every DataType value fits, except int64 beyond
  // 2^53, which tests do not use).
  double Get(size_t i) const {
    const char* p = bytes_.data() + i * DataTypeSize(dtype_);
    switch (dtype_) {
      case DataType::kUint8:
        return Load<uint8_t>(p);
      case DataType::kInt8:
        return Load<int8_t>(p);
      case DataType::kInt32:
        return Load<int32_t>(p);
      case DataType::kInt64:
        return static_cast<double>(Load<int64_t>(p));
      case DataType::kFloat16:
        return HalfToFloat(Load<uint16_t>(p));
      case DataType::kBFloat16:
        return BFloat16ToFloat(Load<uint16_t>(p));
      case DataType::kFloat32:
        return Load<float>(p);
      case DataType::kFloat64:
        return Load<double>(p);
      case DataType::kInt16:
        return Load<int16_t>(p);
      case DataType::kUint16:
        return Load<uint16_t>(p);
      case DataType::kBool:
        return Load<uint8_t>(p);  // the byte as is: kernels must produce 0 or 1
    }
    return 0;
  }

  // Stores v converted to the element type (integers: toward zero; floating point: rounded
  // to nearest even, through float for the half types; bool: v != 0, so that a reference
  // computed in double on 0/1 inputs gives bool's or (sum, max) and and (product, min)).
  void Set(size_t i, double v) {
    char* p = bytes_.data() + i * DataTypeSize(dtype_);
    switch (dtype_) {
      case DataType::kUint8:
        return StoreAs<uint8_t>(p, static_cast<uint8_t>(v));
      case DataType::kInt8:
        return StoreAs<int8_t>(p, static_cast<int8_t>(v));
      case DataType::kInt32:
        return StoreAs<int32_t>(p, static_cast<int32_t>(v));
      case DataType::kInt64:
        return StoreAs<int64_t>(p, static_cast<int64_t>(v));
      case DataType::kFloat16:
        return StoreAs<uint16_t>(p, FloatToHalf(static_cast<float>(v)));
      case DataType::kBFloat16:
        return StoreAs<uint16_t>(p, FloatToBFloat16(static_cast<float>(v)));
      case DataType::kFloat32:
        return StoreAs<float>(p, static_cast<float>(v));
      case DataType::kFloat64:
        return StoreAs<double>(p, v);
      case DataType::kInt16:
        return StoreAs<int16_t>(p, static_cast<int16_t>(v));
      case DataType::kUint16:
        return StoreAs<uint16_t>(p, static_cast<uint16_t>(v));
      case DataType::kBool:
        return StoreAs<uint8_t>(p, v != 0 ? 1 : 0);
    }
  }

 private:
  template <typename T>
  static T Load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  template <typename T>
  static void StoreAs(char* p, T v) {
    std::memcpy(p, &v, sizeof(T));
  }

  DataType dtype_;
  size_t count_;
  std::vector<char> bytes_;
};

// The reduction of two values as the reference computes it: in double.
inline double ReferenceOp(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return b > a ? b : a;
    case ReduceOp::kProduct:
      return a * b;
    default:
      return a + b;
  }
}

inline std::string TypeOpName(DataType dtype, ReduceOp op) {
  return std::string(DataTypeName(dtype)) + "/" + std::string(ReduceOpName(op));
}

}  // namespace troika::transport
