#pragma once
// OutputPool: recycles the buffers of handle-owned results (allgather, alltoall,
// reducescatter). A training loop gathers the same sizes step after step; a fresh buffer each
// time would page-fault its way through the whole result (at 64 MiB that cost more than the
// transfer). A buffer returns to the pool when its last handle lets go, and the pool keeps at
// most `max_idle_bytes` of them.
//
// Thread-safe. Buffers may outlive the pool (they are then simply freed).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace troika::internal {

class OutputPool : public std::enable_shared_from_this<OutputPool> {
 public:
  static std::shared_ptr<OutputPool> Create(size_t max_idle_bytes) {
    return std::shared_ptr<OutputPool>(new OutputPool(max_idle_bytes));
  }
  ~OutputPool();
  OutputPool(const OutputPool&) = delete;
  OutputPool& operator=(const OutputPool&) = delete;

  // A buffer of at least `bytes` bytes (contents unspecified): an idle one no more than twice
  // that size if there is one, else a new one.
  std::shared_ptr<uint8_t> Acquire(size_t bytes);
  size_t idle_bytes() const;

 private:
  explicit OutputPool(size_t max_idle_bytes) : max_idle_bytes_(max_idle_bytes) {}
  void Release(uint8_t* buffer, size_t capacity);

  const size_t max_idle_bytes_;
  mutable std::mutex mu_;
  std::multimap<size_t, uint8_t*> idle_;  // capacity -> buffer; guarded by mu_
  size_t idle_bytes_ = 0;                 // guarded by mu_
};

}  // namespace troika::internal
