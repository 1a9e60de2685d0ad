#include "python/module/hot_path.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "python/module/arguments.h"
#include "python/module/errors.h"
#include "python/module/handles.h"

namespace py = pybind11;

namespace troika::py_module {
namespace {

// Advises the kernel on the whole pages of [address, address + bytes), a result buffer the
// framework has just allocated: a large allocation is a fresh mapping, and writing it faults
// once per 4 KiB page — at 64 MiB that costs more than copying it. Asks for transparent huge
// pages (MADV_HUGEPAGE: a fault per 2 MiB) and, with `populate`, maps the pages now
// (MADV_POPULATE_WRITE, Linux 5.14+, without the GIL) instead of inside the collective: a
// receive that faults stalls the transfer it is part of, on every rank downstream of it.
// Advice only: the memory, its contents and its owner are unchanged, and a kernel without
// transparent huge pages (or with them off, or too old to populate) ignores it. Returns whether
// the kernel took the huge-page advice.
bool AdviseFreshBuffer(uintptr_t address, size_t bytes, bool populate) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (address + page - 1) / page * page;
  const uintptr_t end = (address + bytes) / page * page;
  if (address == 0 || end <= begin) return false;
  bool huge = false;
#ifdef MADV_HUGEPAGE
  huge = madvise(Ptr(begin), end - begin, MADV_HUGEPAGE) == 0;
#endif
#ifdef MADV_POPULATE_WRITE
  if (populate) {
    py::gil_scoped_release release;
    madvise(Ptr(begin), end - begin, MADV_POPULATE_WRITE);
  }
#else
  (void)populate;
#endif
  return huge;
}

// The arguments submit_allreduce and allreduce_wait share, read off the call: context, name,
// input, output, dtype, shape (args[0..5]), op, prescale, postscale, process_set (args[6..9]).
struct AllreduceCall {
  troika::Context* context;
  std::string name;
  void* in;
  void* out;
  troika::DataType dtype;
  std::vector<int64_t> shape;
  troika::AllreduceOptions options;
};

AllreduceCall ReadAllreduceCall(PyObject* const* args, int device, uintptr_t ready_stream) {
  auto integer = [&](int i) { return py::cast<int64_t>(py::handle(args[i])); };
  auto address = [&](int i) { return Ptr(py::cast<uintptr_t>(py::handle(args[i]))); };
  AllreduceCall call{&py::cast<troika::Context&>(py::handle(args[0])),
                     py::cast<std::string>(py::handle(args[1])),
                     nullptr,
                     nullptr,
                     troika::DataType::kFloat32,
                     {},
                     {}};
  py::detail::type_caster<Dims> shape;
  if (!shape.load(py::handle(args[5]), true)) throw py::type_error("shape: a sequence of ints");
  call.shape = std::move(static_cast<Dims&>(shape).v);
  call.options = MakeAllreduceOptions(
      static_cast<int>(integer(6)), py::cast<double>(py::handle(args[7])),
      py::cast<double>(py::handle(args[8])), static_cast<int>(integer(9)), device, ready_stream);
  call.dtype = ToDataType(integer(4));
  call.in = address(2);
  call.out = address(3);
  return call;
}

// Context.allreduce without pybind11's dispatch, for the front ends' hot path (issue 36: 256
// small allreduces a step): _troika.submit_allreduce(context, name, input, output, dtype,
// shape, op, prescale, postscale, process_set, device, ready_stream), all positional, as
// Context.allreduce takes them; returns the Handle. pybind11's general dispatcher (argument
// records, a conversion flag per argument, overload passes) costs more than the conversions
// themselves; a METH_FASTCALL function reads its arguments straight off the call.
PyObject* SubmitAllreduce(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  return FastCall("submit_allreduce", nargs, 12, [&]() -> PyObject* {
    const int device = py::cast<int>(py::handle(args[10]));
    AllreduceCall call = ReadAllreduceCall(args, device, py::cast<uintptr_t>(py::handle(args[11])));
    PyHandle h = Wrap(call.context->Allreduce(call.name, call.in, call.out, call.dtype,
                                              std::move(call.shape), call.options),
                      device);
    return py::cast(std::move(h)).release().ptr();
  });
}

// Context.allreduce_wait the same way, for the front ends' synchronous allreduce (issue 49: a
// 4-byte hvd.allreduce_ paid pybind11's dispatch on top of the collective):
// _troika.allreduce_wait(context, name, input, output, dtype, shape, op, prescale, postscale,
// process_set), positional, host buffers; returns None once the allreduce finished, without
// the GIL meanwhile; raises as Context.allreduce_wait.
PyObject* AllreduceWait(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  return FastCall("allreduce_wait", nargs, 10, [&]() -> PyObject* {
    AllreduceCall call = ReadAllreduceCall(args, -1, 0);
    AllreduceAndWait(*call.context, call.name, call.in, call.out, call.dtype, std::move(call.shape),
                     call.options);
    Py_RETURN_NONE;
  });
}

PyMethodDef g_fast_functions[] = {
    {"submit_allreduce",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&SubmitAllreduce)), METH_FASTCALL,
     "Context.allreduce(...) as submit_allreduce(context, name, input, output, dtype, shape, op, "
     "prescale, postscale, process_set, device, ready_stream), positional only: the same "
     "submission without pybind11's argument dispatch (the front ends' per-tensor path)"},
    {"allreduce_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&AllreduceWait)),
     METH_FASTCALL,
     "Context.allreduce_wait(...) as allreduce_wait(context, name, input, output, dtype, shape, "
     "op, prescale, postscale, process_set), positional only, without pybind11's argument "
     "dispatch (the front ends' synchronous allreduce of host tensors)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void AllreduceAndWait(troika::Context& context, const std::string& name, void* in, void* out,
                      troika::DataType dtype, std::vector<int64_t> shape,
                      troika::AllreduceOptions options) {
  options.wait = true;
  absl::Status s;
  bool refused = false;
  {
    py::gil_scoped_release release;
    troika::Handle h = context.Allreduce(name, in, out, dtype, std::move(shape), options);
    s = h.Wait();
    refused = !s.ok() && h.Refusal().has_value();  // asked only of a failure
  }
  if (refused) CheckSubmitted(s);
  Check(s);
}

void AddHotPath(py::module_& m) {
  m.def("advise_fresh_buffer", &AdviseFreshBuffer, py::arg("address"), py::arg("bytes"),
        py::arg("populate") = false,
        "Advises the kernel on a freshly allocated host buffer (its whole pages): transparent "
        "huge pages (MADV_HUGEPAGE), so that its first writes fault once per 2 MiB instead of "
        "once per 4 KiB; with populate, its pages mapped now (MADV_POPULATE_WRITE, without the "
        "GIL) rather than inside the collective that writes it. Advice only; returns whether "
        "the kernel took the huge-page advice");
  if (PyModule_AddFunctions(m.ptr(), g_fast_functions) != 0) throw py::error_already_set();
}

}  // namespace troika::py_module
