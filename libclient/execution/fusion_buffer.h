#pragma once
// FusionBuffer: a persistent, growing host buffer that fused tensors are packed into. Grows
// to the largest size asked for and is reused; never shrinks. Layout: docs/fusion-buffer.md.
//
// Not thread-safe: owned by the executor thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace troika::internal {

class FusionBuffer {
 public:
  // A buffer of at least `bytes` bytes, 64-byte aligned; contents are not preserved.
  uint8_t* Reserve(size_t bytes) {
    if (bytes > capacity_) {
      // Grow geometrically so a slowly growing workload reallocates O(log n) times.
      size_t capacity = std::max(bytes, capacity_ * 3 / 2);
      data_.reset(static_cast<uint8_t*>(::operator new (capacity, std::align_val_t{64})));
      capacity_ = capacity;
    }
    return data_.get();
  }
  size_t capacity() const { return capacity_; }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<uint8_t, AlignedDelete> data_;
  size_t capacity_ = 0;
};

}  // namespace troika::internal
