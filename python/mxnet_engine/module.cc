// troika.mxnet._engine: pushing Troika's collectives onto MXNet's engine (engine_op.h), for
// troika.mxnet. Takes NDArray handles as integers; includes no MXNet header (mxnet_api.h).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "python/mxnet_engine/engine_op.h"
#include "python/mxnet_engine/mxnet_api.h"

namespace py = pybind11;

namespace troika::mxnet {
namespace {

void* Ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

void Check(const absl::Status& status) {
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

// (name, input handle, output handle, dtype, shape, output bytes) per tensor.
using Entry = std::tuple<std::string, uintptr_t, uintptr_t, int, std::vector<int64_t>, size_t>;

void PushOp(int kind, const std::string& group, const std::vector<Entry>& entries, int op,
            double prescale, double postscale, int process_set, int root, int priority,
            int dev_type, int dev_id, bool caller_waits) {
  if (kind < 0 || kind > static_cast<int>(Kind::kReducescatter)) {
    throw py::value_error("troika.mxnet: unknown operation kind " + std::to_string(kind));
  }
  Request request;
  request.kind = static_cast<Kind>(kind);
  request.group = group;
  for (const Entry& e : entries) {
    const int dtype = std::get<3>(e);
    if (dtype < 0 || dtype >= kNumDataTypes) {
      throw py::value_error("troika.mxnet: unknown dtype number " + std::to_string(dtype));
    }
    request.tensors.push_back(Tensor{std::get<0>(e), Ptr(std::get<1>(e)), Ptr(std::get<2>(e)),
                                     static_cast<DataType>(dtype), std::get<4>(e), std::get<5>(e)});
  }
  request.reduce.op = static_cast<ReduceOp>(op);
  request.reduce.prescale = prescale;
  request.reduce.postscale = postscale;
  request.reduce.process_set = process_set;
  request.root = root;
  request.priority = priority;
  request.where = MxContext{dev_type, dev_id};
  request.caller_waits = caller_waits;
  absl::Status s;
  {
    py::gil_scoped_release release;  // reading an array's data may wait for its writes
    s = Push(std::move(request));
  }
  Check(s);
}

}  // namespace
}  // namespace troika::mxnet

PYBIND11_MODULE(_engine, m) {
  namespace mx = troika::mxnet;
  m.doc() = "troika.mxnet's collectives as MXNet engine operations (no MXNet header included)";
  m.attr("ALLREDUCE") = static_cast<int>(mx::Kind::kAllreduce);
  m.attr("BROADCAST") = static_cast<int>(mx::Kind::kBroadcast);
  m.attr("REDUCESCATTER") = static_cast<int>(mx::Kind::kReducescatter);
  m.def(
      "bind_mxnet", [](const std::string& path) { mx::Check(mx::MxnetApi::Bind(path)); },
      py::arg("path"), "Finds MXNet's C API in the loaded libmxnet.so at `path`");
  m.def(
      "bind_context",
      [](uintptr_t address) { mx::BindContext(reinterpret_cast<troika::Context*>(address)); },
      py::arg("address"),
      "The troika::Context* (troika._troika.Context.address) operations submit to; 0: none");
  m.def("push", &mx::PushOp, py::arg("kind"), py::arg("group"), py::arg("tensors"), py::arg("op"),
        py::arg("prescale"), py::arg("postscale"), py::arg("process_set"), py::arg("root"),
        py::arg("priority"), py::arg("dev_type"), py::arg("dev_id"),
        py::arg("caller_waits") = false,
        "Pushes one operation: tensors are (name, input handle, output handle, dtype, shape, "
        "output bytes); a non-empty group makes them one grouped operation. caller_waits: "
        "Python's thread will wait for it (it counts as waiting once the engine runs it)");
}
