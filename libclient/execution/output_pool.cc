#include "libclient/execution/output_pool.h"

namespace troika::internal {

OutputPool::~OutputPool() {
  for (auto& [capacity, buffer] : idle_) delete[] buffer;
}

std::shared_ptr<uint8_t> OutputPool::Acquire(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  uint8_t* buffer = nullptr;
  size_t capacity = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.lower_bound(bytes);
    if (it != idle_.end() && it->first / 2 <= bytes) {
      capacity = it->first;
      buffer = it->second;
      idle_bytes_ -= capacity;
      idle_.erase(it);
    }
  }
  if (buffer == nullptr) buffer = new uint8_t[capacity];
  std::weak_ptr<OutputPool> pool = weak_from_this();
  return std::shared_ptr<uint8_t>(buffer, [pool, capacity](uint8_t* p) {
    if (auto alive = pool.lock()) {
      alive->Release(p, capacity);
    } else {
      delete[] p;
    }
  });
}

void OutputPool::Release(uint8_t* buffer, size_t capacity) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_bytes_ + capacity <= max_idle_bytes_) {
      idle_.emplace(capacity, buffer);
      idle_bytes_ += capacity;
      return;
    }
  }
  delete[] buffer;
}

size_t OutputPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

}  // namespace troika::internal
