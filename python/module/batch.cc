#include "python/module/batch.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "python/module/arguments.h"
#include "python/module/errors.h"

namespace py = pybind11;

namespace troika::py_module {
namespace {

// One entry of submit_allreduces, read while the GIL is held.
struct BatchEntry {
  std::string name;
  uintptr_t in = 0;
  uintptr_t out = 0;
  troika::DataType dtype = troika::DataType::kFloat32;
  std::vector<int64_t> shape;
};

uintptr_t Address(PyObject* o, const char* what) {
  const unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::type_error(std::string("submit_allreduces: ") + what + ": an address (an int)");
  }
  return static_cast<uintptr_t>(v);
}

// (name, input address, output address, dtype, shape), exactly a tuple of five: read straight
// off the tuple (this runs once per tensor of every batch).
BatchEntry ReadEntry(PyObject* o) {
  if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 5) {
    throw py::type_error(
        "submit_allreduces: each entry is a tuple (name, input, output, dtype, shape)");
  }
  BatchEntry e;
  Py_ssize_t length = 0;
  const char* name = PyUnicode_Check(PyTuple_GET_ITEM(o, 0))
                         ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(o, 0), &length)
                         : nullptr;
  if (name == nullptr) {
    PyErr_Clear();
    throw py::type_error("submit_allreduces: an entry's name must be a str");
  }
  e.name.assign(name, static_cast<size_t>(length));
  e.in = Address(PyTuple_GET_ITEM(o, 1), "input");
  e.out = Address(PyTuple_GET_ITEM(o, 2), "output");
  e.dtype = ToDataType(py::cast<int>(py::handle(PyTuple_GET_ITEM(o, 3))));
  py::detail::type_caster<Dims> shape;
  if (!shape.load(py::handle(PyTuple_GET_ITEM(o, 4)), true)) {
    throw py::type_error("submit_allreduces: an entry's shape must be a sequence of ints");
  }
  e.shape = std::move(static_cast<Dims&>(shape).v);
  return e;
}

// _troika.submit_allreduces(context, entries, op, prescale, postscale, process_set, device,
// ready_stream), positional, as submit_allreduce's: every entry is read (and a bad one raises,
// with nothing submitted) before the GIL is released once and each is submitted as
// Context::Allreduce would be.
PyObject* SubmitAllreduces(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  return FastCall("submit_allreduces", nargs, 8, [&]() -> PyObject* {
    auto& c = py::cast<troika::Context&>(py::handle(args[0]));
    PyObject* list = args[1];
    if (!PyList_Check(list) && !PyTuple_Check(list)) {
      throw py::type_error("submit_allreduces: entries must be a list or tuple");
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
    PyObject** items = PySequence_Fast_ITEMS(list);
    std::vector<BatchEntry> entries;
    entries.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) entries.push_back(ReadEntry(items[i]));
    auto integer = [&](int i) { return py::cast<int64_t>(py::handle(args[i])); };
    const int device = static_cast<int>(integer(6));
    const troika::AllreduceOptions options =
        MakeAllreduceOptions(static_cast<int>(integer(2)), py::cast<double>(py::handle(args[3])),
                             py::cast<double>(py::handle(args[4])), static_cast<int>(integer(5)),
                             device, py::cast<uintptr_t>(py::handle(args[7])));
    std::vector<troika::Handle> handles;
    handles.reserve(entries.size());
    {
      py::gil_scoped_release release;
      for (BatchEntry& e : entries) {
        handles.push_back(
            c.Allreduce(e.name, Ptr(e.in), Ptr(e.out), e.dtype, std::move(e.shape), options));
      }
    }
    return py::cast(AllreduceBatch(std::move(handles), device)).release().ptr();
  });
}

PyMethodDef g_batch_functions[] = {
    {"submit_allreduces",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&SubmitAllreduces)), METH_FASTCALL,
     "submit_allreduces(context, entries, op, prescale, postscale, process_set, device, "
     "ready_stream), positional only: one Context.allreduce per entry (name, input, output, "
     "dtype, shape), each negotiated on its own, submitted in one call that releases the GIL "
     "once; returns an AllreduceBatch. A bad entry raises before anything is submitted; an "
     "operation the core refuses raises at AllreduceBatch.wait()"},
    {nullptr, nullptr, 0, nullptr}};

// The first failure among `statuses` (those of `handles`), raised: a refusal as a
// submission's (CheckSubmitted); OK: nothing.
void RaiseFirst(const std::vector<troika::Handle>& handles,
                const std::vector<absl::Status>& statuses) {
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].ok()) continue;
    if (handles[i].Refusal()) CheckSubmitted(statuses[i]);
    Check(statuses[i]);
  }
}

}  // namespace

bool AllreduceBatch::Poll() const {
  for (const troika::Handle& h : handles_) {
    if (!h.Poll()) return false;
  }
  return true;
}

void AllreduceBatch::Wait() const {
  std::vector<absl::Status> statuses(handles_.size());
  // Finished already (small operations often are by then): no hand-off of the GIL.
  bool done = true;
  for (const troika::Handle& h : handles_) done = done && h.Peek().has_value();
  {
    std::optional<py::gil_scoped_release> release;
    if (!done) release.emplace();
    for (size_t i = 0; i < handles_.size(); ++i) statuses[i] = handles_[i].Wait();
  }
  RaiseFirst(handles_, statuses);
}

void AllreduceBatch::WaitOnStream(uintptr_t stream) const {
  std::vector<absl::Status> statuses(handles_.size());
  {
    py::gil_scoped_release release;
    for (size_t i = 0; i < handles_.size(); ++i) {
      statuses[i] = handles_[i].WaitOnStream(Ptr(stream));
    }
  }
  RaiseFirst(handles_, statuses);
}

void AddBatch(py::module_& m) {
  py::class_<AllreduceBatch>(m, "AllreduceBatch")
      .def("poll", &AllreduceBatch::Poll, "True once every operation finished (never blocks)")
      .def("wait", &AllreduceBatch::Wait,
           "Blocks until every operation finished, without the GIL; then raises the first "
           "failure (a TroikaError) in submission order")
      .def("wait_on_stream", &AllreduceBatch::WaitOnStream, py::arg("stream"),
           "GPU operations: makes the CUDA stream (an address) wait for every result")
      .def("__len__", &AllreduceBatch::size)
      .def_property_readonly("device", &AllreduceBatch::device);
  if (PyModule_AddFunctions(m.ptr(), g_batch_functions) != 0) throw py::error_already_set();
}

}  // namespace troika::py_module
