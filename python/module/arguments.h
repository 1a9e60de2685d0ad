#pragma once
// How troika._troika reads its arguments: buffers are raw addresses given as Python ints,
// data types and reduce ops the integers of troika::DataType and troika::ReduceOp (out of
// range: ValueError), shapes sequences of ints (Dims), CUDA streams addresses.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "troika/troika.h"

namespace troika::py_module {

// A tensor's shape as Python passes it: a torch.Size (a tuple), a tuple or a list of ints,
// read straight from the sequence's items (pybind11's own vector conversion goes through the
// generic sequence protocol, ~0.3 us per call for a torch.Size here: every submission pays
// it, 256 times a step in issue 36's many-small-tensors workload); any other sequence of
// ints as pybind11 converts it.
struct Dims {
  std::vector<int64_t> v;
};

}  // namespace troika::py_module

namespace pybind11::detail {
template <>
struct type_caster<troika::py_module::Dims> {
  PYBIND11_TYPE_CASTER(troika::py_module::Dims, const_name("Sequence[int]"));
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

namespace troika::py_module {

inline troika::DataType ToDataType(int dtype) {
  if (dtype < 0 || dtype >= troika::kNumDataTypes) {
    throw pybind11::value_error("dtype " + std::to_string(dtype) +
                                " is not a troika DataType (0.." +
                                std::to_string(troika::kNumDataTypes - 1) + ")");
  }
  return static_cast<troika::DataType>(dtype);
}

inline troika::ReduceOp ToReduceOp(int op) {
  if (op < 0 || op > static_cast<int>(troika::ReduceOp::kProduct)) {
    throw pybind11::value_error("op " + std::to_string(op) + " is not a troika ReduceOp");
  }
  return static_cast<troika::ReduceOp>(op);
}

inline void* Ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

inline troika::Device MakeDevice(int device, uintptr_t ready_stream) {
  troika::Device d;
  d.ordinal = device;
  d.ready_stream = Ptr(ready_stream);
  return d;
}

inline troika::OpOptions MakeOpOptions(int process_set, int device, uintptr_t ready_stream) {
  troika::OpOptions o;
  o.process_set = process_set;
  o.device = MakeDevice(device, ready_stream);
  return o;
}

inline troika::AllreduceOptions MakeAllreduceOptions(int op, double prescale, double postscale,
                                                     int process_set, int device,
                                                     uintptr_t ready_stream) {
  troika::AllreduceOptions o;
  o.op = ToReduceOp(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = process_set;
  o.device = MakeDevice(device, ready_stream);
  return o;
}

// The tensors of a grouped operation as Python passes them: (name, input address, output
// address, output capacity in bytes, dtype, shape); output and capacity are 0 where unused.
using GroupEntries =
    std::vector<std::tuple<std::string, uintptr_t, uintptr_t, size_t, int, std::vector<int64_t>>>;

inline std::vector<troika::GroupTensor> ToGroupTensors(const GroupEntries& entries) {
  std::vector<troika::GroupTensor> tensors;
  tensors.reserve(entries.size());
  for (const auto& [name, in, out, out_bytes, dtype, shape] : entries) {
    tensors.push_back({name, Ptr(in), Ptr(out), ToDataType(dtype), shape, out_bytes});
  }
  return tensors;
}

// The body of a METH_FASTCALL function of troika._troika (the front ends' hot path, called
// without pybind11's dispatch): checks that `nargs` positional arguments are `expected`, then
// runs `body`, which returns a new reference; a C++ exception it throws becomes the Python
// error pybind11's dispatcher would set (a conversion error TypeError, prefixed with `name`).
// Returns nullptr with the error set.
template <typename Body>
PyObject* FastCall(const char* name, Py_ssize_t nargs, Py_ssize_t expected, Body&& body) {
  if (nargs != expected) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd positional arguments (%zd given)", name, expected,
                 nargs);
    return nullptr;
  }
  try {
    return body();
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (pybind11::cast_error& e) {  // as pybind11's dispatcher: a wrong argument type
    PyErr_SetString(PyExc_TypeError, (std::string(name) + ": " + e.what()).c_str());
  } catch (pybind11::reference_cast_error&) {  // `context` is not a Context (None, say)
    PyErr_SetString(PyExc_TypeError,
                    (std::string(name) + ": the first argument must be a Context").c_str());
  } catch (pybind11::builtin_exception& e) {  // TypeError, ValueError (ToDataType), ...
    e.set_error();
  }
  return nullptr;
}

}  // namespace troika::py_module
