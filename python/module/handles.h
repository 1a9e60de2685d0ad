#pragma once
// troika._troika.Handle: a troika::Handle plus where its buffers live, and how submissions
// hand one out (an operation the core refused at submission raises at the call instead).

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "troika/troika.h"

namespace troika::py_module {

struct PyHandle {
  troika::Handle handle;
  int device = -1;  // -1: host

  bool Poll() const { return handle.Poll(); }
  // Blocks (without the GIL) until done; raises TroikaError if the op failed. With a timeout
  // in seconds: returns False if still running then, True once done.
  bool Wait(std::optional<double> timeout) const;
  void WaitOnStream(uintptr_t stream) const;
  // Copies a handle-owned result (allgather, alltoall, reducescatter) into the caller's host
  // buffer of `capacity` bytes; returns the bytes copied. The op must have succeeded.
  size_t CopyOutput(uintptr_t dst, size_t capacity) const;
};

// `h` for Python; raises (CheckSubmitted) if the core refused it at submission (done, failed,
// when submission returns: a name in flight, an invalid argument, a rank that joined, a closed
// context), as Horovod raises at the call.
PyHandle Wrap(troika::Handle h, int device);
// A group's handles (a group is refused whole: every handle fails alike).
std::vector<PyHandle> WrapAll(std::vector<troika::Handle> handles, int device);

// Defines the Handle class in `m`.
void BindHandle(pybind11::module_& m);

}  // namespace troika::py_module
