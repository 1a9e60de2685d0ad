#pragma once
// _troika.submit_allreduces and _troika.AllreduceBatch: many independent allreduces submitted
// in one call and waited for in one call, each with its own name, dtype and shape (as many
// Context::Allreduce calls, not a group: each is negotiated, scheduled and fused as it would
// be alone). For a front end that hands over the gradients a backward pass made ready
// together (troika.torch's DistributedOptimizer): one call into the module and one release of
// the GIL per set of tensors instead of two calls per tensor (docs/PERFORMANCE.md, issue 49).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "troika/troika.h"

namespace troika::py_module {

// The handles of one submit_allreduces call. Thread contract: as troika::Handle (any thread may
// poll or wait; the GIL is released while waiting).
class AllreduceBatch {
 public:
  AllreduceBatch(std::vector<troika::Handle> handles, int device)
      : handles_(std::move(handles)), device_(device) {}

  size_t size() const { return handles_.size(); }
  int device() const { return device_; }
  // True once every operation finished (successfully or not). Never blocks.
  bool Poll() const;
  // Blocks (releasing the GIL at most once) until every operation finished; then raises the
  // first failure, in submission order, as a TroikaError (an operation the core refused at
  // submission included: nothing raises at submit_allreduces for it). Every operation is
  // waited for before anything raises: they all use the caller's buffers.
  void Wait() const;
  // GPU operations: makes the CUDA stream (an address) wait for every result
  // (Handle::WaitOnStream: the CPU waits only until each is issued); raises as Wait().
  void WaitOnStream(uintptr_t stream) const;

 private:
  // Constant after construction
  std::vector<troika::Handle> handles_;
  int device_;
};

// Adds submit_allreduces and the AllreduceBatch class to `m`.
void AddBatch(pybind11::module_& m);

}  // namespace troika::py_module
