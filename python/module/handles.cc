#include "python/module/handles.h"

#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "python/module/arguments.h"
#include "python/module/errors.h"

namespace py = pybind11;

namespace troika::py_module {
namespace {

// Refusal, not Peek: an accepted operation may have finished (and failed) already.
void RaiseIfRefused(const troika::Handle& h) {
  if (std::optional<absl::Status> s = h.Refusal()) CheckSubmitted(*s);
}

std::vector<int64_t> Shape(const std::vector<int64_t>& shape) { return shape; }

}  // namespace

bool PyHandle::Wait(std::optional<double> timeout) const {
  // Finished already (a small operation often is by the time it is waited for): Wait()
  // returns at once, so the GIL is kept rather than handed off and taken back. (Wait, not
  // Peek's status: it also tells the runtime the result was observed.)
  if (handle.Peek().has_value()) {
    Check(handle.Wait());
    return true;
  }
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = timeout ? handle.WaitFor(absl::Seconds(*timeout)) : handle.Wait();
  }
  if (timeout && absl::IsDeadlineExceeded(s) && !handle.Poll()) return false;
  Check(s);
  return true;
}

void PyHandle::WaitOnStream(uintptr_t stream) const {
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = handle.WaitOnStream(Ptr(stream));
  }
  Check(s);
}

size_t PyHandle::CopyOutput(uintptr_t dst, size_t capacity) const {
  if (!handle.Poll()) throw py::value_error("copy_output: the operation has not completed");
  Check(handle.Wait());
  if (device >= 0) {
    throw py::value_error("copy_output copies host results; this result is in GPU memory");
  }
  const size_t bytes = handle.output_bytes();
  if (bytes > capacity) {
    throw py::value_error("copy_output: the result has " + std::to_string(bytes) +
                          " bytes, the buffer " + std::to_string(capacity));
  }
  if (bytes > 0) {
    if (dst == 0 || handle.output() == nullptr) {
      throw py::value_error("copy_output: null buffer");
    }
    std::memcpy(Ptr(dst), handle.output(), bytes);
  }
  return bytes;
}

PyHandle Wrap(troika::Handle h, int device) {
  RaiseIfRefused(h);
  return PyHandle{std::move(h), device};
}

std::vector<PyHandle> WrapAll(std::vector<troika::Handle> handles, int device) {
  if (!handles.empty()) RaiseIfRefused(handles.front());
  std::vector<PyHandle> out;
  out.reserve(handles.size());
  for (troika::Handle& h : handles) out.push_back(Wrap(std::move(h), device));
  return out;
}

void BindHandle(py::module_& m) {
  py::class_<PyHandle>(m, "Handle")
      .def("poll", &PyHandle::Poll, "True once the operation finished (never blocks)")
      .def("wait", &PyHandle::Wait, py::arg("timeout") = py::none(),
           "Blocks until done, without the GIL; raises TroikaError if the operation failed. "
           "With timeout (seconds): False if still running then.")
      .def("wait_on_stream", &PyHandle::WaitOnStream, py::arg("stream"),
           "GPU operations: makes the CUDA stream (an address) wait for the result")
      .def("copy_output", &PyHandle::CopyOutput, py::arg("dst"), py::arg("capacity"),
           "Copies a handle-owned host result to the address dst (capacity bytes); returns "
           "the bytes copied")
      .def_property_readonly("output_bytes",
                             [](const PyHandle& h) { return h.handle.output_bytes(); })
      .def_property_readonly(
          "output_address",
          [](const PyHandle& h) { return reinterpret_cast<uintptr_t>(h.handle.output()); })
      .def_property_readonly("output_shape",
                             [](const PyHandle& h) { return Shape(h.handle.output_shape()); })
      .def_property_readonly("received_splits",
                             [](const PyHandle& h) { return Shape(h.handle.received_splits()); })
      .def_property_readonly("joined_last_rank",
                             [](const PyHandle& h) { return h.handle.joined_last_rank(); })
      .def_property_readonly("device", [](const PyHandle& h) { return h.device; });
}

}  // namespace troika::py_module
