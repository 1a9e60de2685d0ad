// troika._troika: the compiled Python module over libtroika's C++ API.
//
// It never includes or links a framework (PyTorch or other): buffers are raw addresses given
// as Python ints, data types the integers of troika::DataType, shapes lists of ints, CUDA
// streams addresses. The framework layers (python/troika/torch/) are pure Python on top, so one
// build serves every torch version a user has.
//
// The GIL is released wherever the call may block: Context.init, Context.allreduce_wait,
// Handle.wait, add/remove of a process set, Context.shutdown. Submissions never block and keep
// it. Handles may be waited from any thread. Every error is a troika.TroikaError (a
// RuntimeError) with `code` (the status code's name, "INVALID_ARGUMENT") and `message`
// (Troika's text); str() is "CODE: message". An operation the core refuses at submission (this
// rank's own error: nothing was sent) raises there, as Horovod's do, rather than handing out a
// failed handle; a name already in flight on this rank (ALREADY_EXISTS) as
// troika.DuplicateNameError and an invalid argument (INVALID_ARGUMENT) as
// troika.InvalidArgumentError, both TroikaErrors and ValueErrors.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "troika/elastic.h"
#include "troika/troika.h"

namespace py = pybind11;

namespace {

// A tensor's shape as Python passes it: a torch.Size (a tuple), a tuple or a list of ints,
// read straight from the sequence's items (pybind11's own vector conversion goes through the
// generic sequence protocol, ~0.3 us per call for a torch.Size here: every submission pays
// it, 256 times a step in issue 36's many-small-tensors workload); any other sequence of
// ints as pybind11 converts it.
struct Dims {
  std::vector<int64_t> v;
};

}  // namespace

namespace pybind11::detail {
template <>
struct type_caster<Dims> {
  PYBIND11_TYPE_CASTER(Dims, const_name("Sequence[int]"));
  bool load(handle src, bool convert) {
    if (LoadInts(src.ptr())) return true;
    list_caster<std::vector<int64_t>, int64_t> generic;  // numpy ints, other sequences
    if (!generic.load(src, convert)) return false;
    value.v = std::move(static_cast<std::vector<int64_t>&>(generic));
    return true;
  }

 private:
  // A tuple or list of Python ints into value.v; false (no error set) for anything else.
  bool LoadInts(PyObject* o) {
    if (!PyTuple_Check(o) && !PyList_Check(o)) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject** items = PySequence_Fast_ITEMS(o);
    value.v.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!PyLong_Check(items[i])) return false;
      const long long d = PyLong_AsLongLong(items[i]);
      if (d == -1 && PyErr_Occurred()) {  // out of range: as pybind11's conversion fails
        PyErr_Clear();
        return false;
      }
      value.v[static_cast<size_t>(i)] = d;
    }
    return true;
  }
};
}  // namespace pybind11::detail

namespace {

// The exception classes, created at import: TroikaError (a subclass of RuntimeError), and
// DuplicateNameError and InvalidArgumentError (of TroikaError and ValueError) for a submission
// refused because its name is in flight (ALREADY_EXISTS) or its arguments are invalid.
PyObject* g_troika_error = nullptr;
PyObject* g_duplicate_name_error = nullptr;
PyObject* g_invalid_argument_error = nullptr;

// Raises `status` as a TroikaError, or as `type` (a subclass).
[[noreturn]] void RaiseStatus(const absl::Status& status, PyObject* type = g_troika_error) {
  std::string code = absl::StatusCodeToString(status.code());
  std::string message(status.message());
  std::string text = code + ": " + message;
  py::object cls = py::reinterpret_borrow<py::object>(type);
  py::object exc = cls(text);
  exc.attr("code") = code;
  exc.attr("message") = message;
  // An elastic job went on without some ranks (docs/elastic.md): the renumbering, for
  // troika.torch.elastic.run; None otherwise.
  exc.attr("membership_change") = py::none();
  if (std::optional<troika::MembershipChange> change = troika::GetMembershipChange(status)) {
    py::dict d;
    d["epoch"] = change->epoch;
    d["size"] = change->size;
    d["next_rank"] = change->next_rank;
    d["at_commit"] = change->at_commit;
    d["joined"] = change->joined;
    exc.attr("membership_change") = d;
  }
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

// The status of an operation's submission (and run): ALREADY_EXISTS, a name in flight on this
// rank, raises DuplicateNameError and INVALID_ARGUMENT InvalidArgumentError.
void CheckSubmitted(const absl::Status& status) {
  if (absl::IsAlreadyExists(status)) RaiseStatus(status, g_duplicate_name_error);
  if (absl::IsInvalidArgument(status)) RaiseStatus(status, g_invalid_argument_error);
  Check(status);
}

troika::DataType ToDataType(int dtype) {
  if (dtype < 0 || dtype >= troika::kNumDataTypes) {
    throw py::value_error("dtype " + std::to_string(dtype) + " is not a troika DataType (0.." +
                          std::to_string(troika::kNumDataTypes - 1) + ")");
  }
  return static_cast<troika::DataType>(dtype);
}

troika::ReduceOp ToReduceOp(int op) {
  if (op < 0 || op > static_cast<int>(troika::ReduceOp::kProduct)) {
    throw py::value_error("op " + std::to_string(op) + " is not a troika ReduceOp");
  }
  return static_cast<troika::ReduceOp>(op);
}

void* Ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

troika::Device MakeDevice(int device, uintptr_t ready_stream) {
  troika::Device d;
  d.ordinal = device;
  d.ready_stream = Ptr(ready_stream);
  return d;
}

troika::OpOptions MakeOpOptions(int process_set, int device, uintptr_t ready_stream) {
  troika::OpOptions o;
  o.process_set = process_set;
  o.device = MakeDevice(device, ready_stream);
  return o;
}

troika::AllreduceOptions MakeAllreduceOptions(int op, double prescale, double postscale,
                                              int process_set, int device, uintptr_t ready_stream) {
  troika::AllreduceOptions o;
  o.op = ToReduceOp(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = process_set;
  o.device = MakeDevice(device, ready_stream);
  return o;
}

// A troika::Handle plus where its buffers live (device -1: host).
struct PyHandle {
  troika::Handle handle;
  int device = -1;

  bool Poll() const { return handle.Poll(); }

  // Blocks (without the GIL) until done; raises TroikaError if the op failed. With a timeout
  // in seconds: returns False if still running then, True once done.
  bool Wait(std::optional<double> timeout) const {
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

  void WaitOnStream(uintptr_t stream) const {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = handle.WaitOnStream(Ptr(stream));
    }
    Check(s);
  }

  // Copies a handle-owned result (allgather, alltoall, reducescatter) into the caller's host
  // buffer of `capacity` bytes; returns the bytes copied. The op must have succeeded.
  size_t CopyOutput(uintptr_t dst, size_t capacity) const {
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
};

// An op the core refused at submission (done, failed, when submission returns: a name in flight,
// an invalid argument, a rank that joined, a closed context) raises here, as Horovod raises at
// the call. Peek, not Poll: a poll would count as waiting and send the op's request early.
void RaiseIfRefused(const troika::Handle& h) {
  if (std::optional<absl::Status> s = h.Peek()) CheckSubmitted(*s);
}

PyHandle Wrap(troika::Handle h, int device) {
  RaiseIfRefused(h);
  return PyHandle{std::move(h), device};
}

std::vector<PyHandle> WrapAll(std::vector<troika::Handle> handles, int device) {
  // A group is refused whole (every handle fails alike).
  if (!handles.empty()) RaiseIfRefused(handles.front());
  std::vector<PyHandle> out;
  out.reserve(handles.size());
  for (troika::Handle& h : handles) out.push_back(Wrap(std::move(h), device));
  return out;
}

// The tensors of a grouped operation as Python passes them: (name, input address, output
// address, output capacity in bytes, dtype, shape); output and capacity are 0 where unused.
using GroupEntries =
    std::vector<std::tuple<std::string, uintptr_t, uintptr_t, size_t, int, std::vector<int64_t>>>;

std::vector<troika::GroupTensor> ToGroupTensors(const GroupEntries& entries) {
  std::vector<troika::GroupTensor> tensors;
  tensors.reserve(entries.size());
  for (const auto& [name, in, out, out_bytes, dtype, shape] : entries) {
    tensors.push_back({name, Ptr(in), Ptr(out), ToDataType(dtype), shape, out_bytes});
  }
  return tensors;
}

// The binding of a grouped reduction (GroupedAllreduce, GroupedReducescatter): Python's
// entries and options in, one Handle per tensor out.
using GroupedReduceMethod = std::vector<troika::Handle> (troika::Context::*)(
    const std::string&, const std::vector<troika::GroupTensor>&, troika::AllreduceOptions);

auto GroupedReduce(GroupedReduceMethod method) {
  return [method](troika::Context& c, const std::string& group, const GroupEntries& tensors, int op,
                  double prescale, double postscale, int process_set, int device,
                  uintptr_t ready_stream) {
    return WrapAll((c.*method)(group, ToGroupTensors(tensors),
                               MakeAllreduceOptions(op, prescale, postscale, process_set, device,
                                                    ready_stream)),
                   device);
  };
}

std::vector<int64_t> Shape(const std::vector<int64_t>& shape) { return shape; }

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

// Context.allreduce without pybind11's dispatch, for the front ends' hot path (issue 36: 256
// small allreduces a step): _troika.submit_allreduce(context, name, input, output, dtype,
// shape, op, prescale, postscale, process_set, device, ready_stream), all positional, as
// Context.allreduce takes them; returns the Handle. pybind11's general dispatcher (argument
// records, a conversion flag per argument, overload passes) costs more than the conversions
// themselves; a METH_FASTCALL function reads its arguments straight off the call.
PyObject* SubmitAllreduce(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 12) {
    PyErr_Format(PyExc_TypeError, "submit_allreduce takes 12 positional arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  try {
    auto& c = py::cast<troika::Context&>(py::handle(args[0]));
    const std::string name = py::cast<std::string>(py::handle(args[1]));
    py::detail::type_caster<Dims> shape;
    if (!shape.load(py::handle(args[5]), true)) throw py::type_error("shape: a sequence of ints");
    auto integer = [&](int i) { return py::cast<int64_t>(py::handle(args[i])); };
    auto address = [&](int i) { return Ptr(py::cast<uintptr_t>(py::handle(args[i]))); };
    const int device = static_cast<int>(integer(10));
    troika::AllreduceOptions options =
        MakeAllreduceOptions(static_cast<int>(integer(6)), py::cast<double>(py::handle(args[7])),
                             py::cast<double>(py::handle(args[8])), static_cast<int>(integer(9)),
                             device, py::cast<uintptr_t>(py::handle(args[11])));
    PyHandle h = Wrap(c.Allreduce(name, address(2), address(3), ToDataType(integer(4)),
                                  std::move(static_cast<Dims&>(shape).v), options),
                      device);
    return py::cast(std::move(h)).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (py::cast_error& e) {  // as pybind11's dispatcher: a wrong argument type
    PyErr_SetString(PyExc_TypeError, (std::string("submit_allreduce: ") + e.what()).c_str());
  } catch (py::reference_cast_error& e) {  // `context` is not a Context (None, say)
    PyErr_SetString(PyExc_TypeError, "submit_allreduce: the first argument must be a Context");
  } catch (py::builtin_exception& e) {  // ValueError (ToDataType, ToReduceOp), ...
    e.set_error();
  }
  return nullptr;
}

PyMethodDef g_fast_functions[] = {
    {"submit_allreduce",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&SubmitAllreduce)), METH_FASTCALL,
     "Context.allreduce(...) as submit_allreduce(context, name, input, output, dtype, shape, op, "
     "prescale, postscale, process_set, device, ready_stream), positional only: the same "
     "submission without pybind11's argument dispatch (the front ends' per-tensor path)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

PYBIND11_MODULE(_troika, m) {
  m.doc() = "Troika's compiled core: collectives over raw buffers (see troika.torch)";

  g_troika_error = PyErr_NewExceptionWithDoc(
      "troika.TroikaError",
      "A Troika operation failed. `code`: the status code's name (e.g. 'INVALID_ARGUMENT'); "
      "`message`: Troika's message.",
      PyExc_RuntimeError, nullptr);
  m.add_object("TroikaError", py::handle(g_troika_error));
  // Submissions refused at once: TroikaErrors that are also ValueErrors, as Horovod raises.
  py::tuple value_error_bases =
      py::make_tuple(py::handle(g_troika_error), py::handle(PyExc_ValueError));
  auto add_value_error = [&](const char* name, const char* doc) {
    PyObject* cls = PyErr_NewExceptionWithDoc((std::string("troika.") + name).c_str(), doc,
                                              value_error_bases.ptr(), nullptr);
    m.add_object(name, py::handle(cls));
    return cls;
  };
  g_duplicate_name_error = add_value_error(
      "DuplicateNameError",
      "An operation was submitted under a name already in flight on this rank (ALREADY_EXISTS).");
  g_invalid_argument_error =
      add_value_error("InvalidArgumentError",
                      "An operation's arguments are invalid on this rank (INVALID_ARGUMENT).");

  // Enum values as plain ints, so that the Python layers pass them back unchanged.
  py::dict dtypes;
  dtypes["uint8"] = static_cast<int>(troika::DataType::kUint8);
  dtypes["int8"] = static_cast<int>(troika::DataType::kInt8);
  dtypes["int32"] = static_cast<int>(troika::DataType::kInt32);
  dtypes["int64"] = static_cast<int>(troika::DataType::kInt64);
  dtypes["float16"] = static_cast<int>(troika::DataType::kFloat16);
  dtypes["bfloat16"] = static_cast<int>(troika::DataType::kBFloat16);
  dtypes["float32"] = static_cast<int>(troika::DataType::kFloat32);
  dtypes["float64"] = static_cast<int>(troika::DataType::kFloat64);
  dtypes["int16"] = static_cast<int>(troika::DataType::kInt16);
  dtypes["uint16"] = static_cast<int>(troika::DataType::kUint16);
  dtypes["bool"] = static_cast<int>(troika::DataType::kBool);
  m.attr("DTYPES") = dtypes;
  m.attr("SUM") = static_cast<int>(troika::ReduceOp::kSum);
  m.attr("AVERAGE") = static_cast<int>(troika::ReduceOp::kAverage);
  m.attr("MIN") = static_cast<int>(troika::ReduceOp::kMin);
  m.attr("MAX") = static_cast<int>(troika::ReduceOp::kMax);
  m.attr("PRODUCT") = static_cast<int>(troika::ReduceOp::kProduct);

  m.def("advise_fresh_buffer", &AdviseFreshBuffer, py::arg("address"), py::arg("bytes"),
        py::arg("populate") = false,
        "Advises the kernel on a freshly allocated host buffer (its whole pages): transparent "
        "huge pages (MADV_HUGEPAGE), so that its first writes fault once per 2 MiB instead of "
        "once per 4 KiB; with populate, its pages mapped now (MADV_POPULATE_WRITE, without the "
        "GIL) rather than inside the collective that writes it. Advice only; returns whether "
        "the kernel took the huge-page advice");

  if (PyModule_AddFunctions(m.ptr(), g_fast_functions) != 0) throw py::error_already_set();

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

  py::class_<troika::Context>(m, "Context")
      .def_static(
          "init",
          [](int rank, int size, int64_t epoch) {
            absl::StatusOr<troika::Options> options = troika::Options::FromEnvironment();
            Check(options.status());
            // An elastic job's next generation: the rank and size it gave this process.
            if (rank >= 0) options->rank = rank;
            if (size >= 0) options->size = size;
            if (epoch > 0) options->epoch = epoch;  // else TROIKA_EPOCH's
            absl::StatusOr<std::unique_ptr<troika::Context>> ctx;
            {
              py::gil_scoped_release release;
              ctx = troika::Context::Init(*options);
            }
            Check(ctx.status());
            return std::move(*ctx);
          },
          py::arg("rank") = -1, py::arg("size") = -1, py::arg("epoch") = 0,
          "Joins the job the TROIKA_* environment names (troikarun sets it); blocks until "
          "every rank attached. rank, size (>= 0), epoch (> 0): instead of TROIKA_RANK, "
          "TROIKA_SIZE and TROIKA_EPOCH, an elastic job's next generation (Options::epoch)")
      .def_property_readonly(
          "address", [](troika::Context& c) { return reinterpret_cast<uintptr_t>(&c); },
          "the troika::Context* of this process, for native code using the C++ API on it "
          "(valid until shutdown)")
      .def_property_readonly("rank", &troika::Context::rank)
      .def_property_readonly("size", &troika::Context::size)
      .def_property_readonly("local_rank", &troika::Context::local_rank)
      .def_property_readonly("local_size", &troika::Context::local_size)
      .def_property_readonly("cross_rank", &troika::Context::cross_rank)
      .def_property_readonly("cross_size", &troika::Context::cross_size)
      .def_property_readonly(
          "generation", [](const troika::Context& c) { return c.membership().epoch; },
          "the job's membership generation (1, then one more per elastic membership change)")
      .def(
          "allreduce",
          [](troika::Context& c, const std::string& name, uintptr_t in, uintptr_t out, int dtype,
             Dims shape, int op, double prescale, double postscale, int process_set, int device,
             uintptr_t ready_stream) {
            return Wrap(c.Allreduce(name, Ptr(in), Ptr(out), ToDataType(dtype), std::move(shape.v),
                                    MakeAllreduceOptions(op, prescale, postscale, process_set,
                                                         device, ready_stream)),
                        device);
          },
          py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
          py::arg("op") = static_cast<int>(troika::ReduceOp::kSum), py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0, py::arg("device") = -1,
          py::arg("ready_stream") = 0, "Submits an allreduce; returns its Handle")
      .def(
          "allreduce_wait",
          [](troika::Context& c, const std::string& name, uintptr_t in, uintptr_t out, int dtype,
             Dims shape, int op, double prescale, double postscale, int process_set) {
            troika::AllreduceOptions options =
                MakeAllreduceOptions(op, prescale, postscale, process_set, -1, 0);
            options.wait = true;
            const troika::DataType type = ToDataType(dtype);
            absl::Status s;
            bool refused = false;  // done when submission returned: refused (or run: scheduled)
            {
              py::gil_scoped_release release;
              troika::Handle h =
                  c.Allreduce(name, Ptr(in), Ptr(out), type, std::move(shape.v), options);
              refused = h.Peek().has_value();
              s = h.Wait();
            }
            if (refused) CheckSubmitted(s);
            Check(s);
          },
          py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
          py::arg("op") = static_cast<int>(troika::ReduceOp::kSum), py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0,
          "A host allreduce, returning once it finished (the GIL released; a scheduled one runs "
          "on this thread, with no handle); raises TroikaError if it failed")
      .def(
          "allgather",
          [](troika::Context& c, const std::string& name, uintptr_t in, int dtype, Dims shape,
             int process_set, int device, uintptr_t ready_stream) {
            return Wrap(c.Allgather(name, Ptr(in), ToDataType(dtype), std::move(shape.v),
                                    MakeOpOptions(process_set, device, ready_stream)),
                        device);
          },
          py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"),
          py::arg("process_set") = 0, py::arg("device") = -1, py::arg("ready_stream") = 0)
      .def(
          "allgather_into",
          [](troika::Context& c, const std::string& name, uintptr_t in, uintptr_t out,
             size_t out_bytes, int dtype, Dims shape, int process_set, int device,
             uintptr_t ready_stream, bool handle_owned_if_too_small) {
            troika::OpOptions options = MakeOpOptions(process_set, device, ready_stream);
            options.handle_owned_if_too_small = handle_owned_if_too_small;
            return Wrap(c.AllgatherInto(name, Ptr(in), Ptr(out), out_bytes, ToDataType(dtype),
                                        std::move(shape.v), options),
                        device);
          },
          py::arg("name"), py::arg("input"), py::arg("output"), py::arg("output_bytes"),
          py::arg("dtype"), py::arg("shape"), py::arg("process_set") = 0, py::arg("device") = -1,
          py::arg("ready_stream") = 0, py::arg("handle_owned_if_too_small") = false,
          "Context::AllgatherInto: into `output` (output_bytes bytes). A result that does not fit "
          "fails with OUT_OF_RANGE, or with handle_owned_if_too_small is handle-owned instead "
          "(output_address is then not `output`)")
      .def(
          "broadcast",
          [](troika::Context& c, const std::string& name, uintptr_t in, uintptr_t out, int dtype,
             Dims shape, int root, int process_set, int device, uintptr_t ready_stream) {
            return Wrap(c.Broadcast(name, Ptr(in), Ptr(out), ToDataType(dtype), std::move(shape.v),
                                    root, MakeOpOptions(process_set, device, ready_stream)),
                        device);
          },
          py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
          py::arg("root"), py::arg("process_set") = 0, py::arg("device") = -1,
          py::arg("ready_stream") = 0)
      .def(
          "alltoall",
          [](troika::Context& c, const std::string& name, uintptr_t in, int dtype, Dims shape,
             std::vector<int64_t> splits, int process_set, int device, uintptr_t ready_stream) {
            return Wrap(
                c.Alltoall(name, Ptr(in), ToDataType(dtype), std::move(shape.v), std::move(splits),
                           MakeOpOptions(process_set, device, ready_stream)),
                device);
          },
          py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"),
          py::arg("splits") = std::vector<int64_t>{}, py::arg("process_set") = 0,
          py::arg("device") = -1, py::arg("ready_stream") = 0)
      .def(
          "alltoall_into",
          [](troika::Context& c, const std::string& name, uintptr_t in, uintptr_t out,
             size_t out_bytes, int dtype, Dims shape, std::vector<int64_t> splits, int process_set,
             int device, uintptr_t ready_stream) {
            return Wrap(c.AlltoallInto(name, Ptr(in), Ptr(out), out_bytes, ToDataType(dtype),
                                       std::move(shape.v), std::move(splits),
                                       MakeOpOptions(process_set, device, ready_stream)),
                        device);
          },
          py::arg("name"), py::arg("input"), py::arg("output"), py::arg("output_bytes"),
          py::arg("dtype"), py::arg("shape"), py::arg("splits") = std::vector<int64_t>{},
          py::arg("process_set") = 0, py::arg("device") = -1, py::arg("ready_stream") = 0)
      .def(
          "reducescatter",
          [](troika::Context& c, const std::string& name, uintptr_t in, int dtype, Dims shape,
             int op, double prescale, double postscale, int process_set, int device,
             uintptr_t ready_stream) {
            return Wrap(c.Reducescatter(name, Ptr(in), ToDataType(dtype), std::move(shape.v),
                                        MakeAllreduceOptions(op, prescale, postscale, process_set,
                                                             device, ready_stream)),
                        device);
          },
          py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"),
          py::arg("op") = static_cast<int>(troika::ReduceOp::kSum), py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0, py::arg("device") = -1,
          py::arg("ready_stream") = 0)
      .def(
          "reducescatter_into",
          [](troika::Context& c, const std::string& name, uintptr_t in, uintptr_t out,
             size_t out_bytes, int dtype, Dims shape, int op, double prescale, double postscale,
             int process_set, int device, uintptr_t ready_stream) {
            return Wrap(
                c.ReducescatterInto(name, Ptr(in), Ptr(out), out_bytes, ToDataType(dtype),
                                    std::move(shape.v),
                                    MakeAllreduceOptions(op, prescale, postscale, process_set,
                                                         device, ready_stream)),
                device);
          },
          py::arg("name"), py::arg("input"), py::arg("output"), py::arg("output_bytes"),
          py::arg("dtype"), py::arg("shape"),
          py::arg("op") = static_cast<int>(troika::ReduceOp::kSum), py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0, py::arg("device") = -1,
          py::arg("ready_stream") = 0)
      .def("grouped_allreduce", GroupedReduce(&troika::Context::GroupedAllreduce), py::arg("group"),
           py::arg("tensors"), py::arg("op") = static_cast<int>(troika::ReduceOp::kSum),
           py::arg("prescale") = 1.0, py::arg("postscale") = 1.0, py::arg("process_set") = 0,
           py::arg("device") = -1, py::arg("ready_stream") = 0,
           "tensors: (name, input, output, 0, dtype, shape) each; one Handle per tensor, "
           "negotiated as one group (Context::GroupedAllreduce)")
      .def(
          "grouped_allgather",
          [](troika::Context& c, const std::string& group, const GroupEntries& tensors,
             int process_set, int device, uintptr_t ready_stream) {
            return WrapAll(c.GroupedAllgather(group, ToGroupTensors(tensors),
                                              MakeOpOptions(process_set, device, ready_stream)),
                           device);
          },
          py::arg("group"), py::arg("tensors"), py::arg("process_set") = 0, py::arg("device") = -1,
          py::arg("ready_stream") = 0,
          "tensors: (name, input, 0, 0, dtype, shape) each; handle-owned results, as allgather")
      .def("grouped_reducescatter", GroupedReduce(&troika::Context::GroupedReducescatter),
           py::arg("group"), py::arg("tensors"),
           py::arg("op") = static_cast<int>(troika::ReduceOp::kSum), py::arg("prescale") = 1.0,
           py::arg("postscale") = 1.0, py::arg("process_set") = 0, py::arg("device") = -1,
           py::arg("ready_stream") = 0,
           "tensors: (name, input, output, output_bytes, dtype, shape) each; into the outputs, "
           "as reducescatter_into")
      .def(
          "barrier",
          [](troika::Context& c, int process_set) {
            return Wrap(c.Barrier(MakeOpOptions(process_set, -1, 0)), -1);
          },
          py::arg("process_set") = 0)
      .def(
          "elastic_commit", [](troika::Context& c) { return Wrap(c.ElasticCommit(), -1); },
          "an elastic job's commit point, where nodes waiting to join are admitted")
      .def("join", [](troika::Context& c) { return Wrap(c.Join(), -1); })
      .def(
          "add_process_set",
          [](troika::Context& c, std::vector<int> ranks) {
            absl::StatusOr<int> id;
            {
              py::gil_scoped_release release;
              id = c.AddProcessSet(std::move(ranks));
            }
            Check(id.status());
            return *id;
          },
          py::arg("ranks"), "Every rank of the job calls it with the same ranks; returns the id")
      .def(
          "remove_process_set",
          [](troika::Context& c, int id) {
            absl::Status s;
            {
              py::gil_scoped_release release;
              s = c.RemoveProcessSet(id);
            }
            Check(s);
          },
          py::arg("id"))
      .def(
          "shutdown",
          [](troika::Context& c) {
            absl::Status s;
            {
              py::gil_scoped_release release;
              s = c.Shutdown();
            }
            Check(s);
          },
          "Leaves the job; raises the error that had failed the context, if one did");
}
