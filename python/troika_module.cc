// troika._troika: the compiled Python module over libtroika's C++ API. This file binds
// troika::Context; module/ holds the rest: errors (the exception classes), arguments (how
// addresses, dtypes, ops and shapes are read), handles (Handle), hot_path (submit_allreduce,
// advise_fresh_buffer), batch (submit_allreduces, AllreduceBatch).
//
// It never includes or links a framework (PyTorch or other): buffers are raw addresses given
// as Python ints, data types the integers of troika::DataType, shapes lists of ints, CUDA
// streams addresses. The framework layers (python/troika/torch/) are pure Python on top, so one
// build serves every torch version a user has.
//
// The GIL is released wherever the call may block: Context.init, Context.allreduce_wait,
// Handle.wait, add/remove of a process set, Context.shutdown. Submissions never block and keep
// it, but for submit_allreduces, which releases it once for its many. Handles may be waited
// from any thread. Every error is a troika.TroikaError (a RuntimeError) with `code` (the
// status code's name, "INVALID_ARGUMENT") and `message` (Troika's text); str() is
// "CODE: message". An operation the core refuses at submission (this rank's own error: nothing
// was sent) raises there, as Horovod's do, rather than handing out a failed handle (but in
// submit_allreduces' batch: at its wait); a name already in flight on this rank
// (ALREADY_EXISTS) as troika.DuplicateNameError and an invalid argument (INVALID_ARGUMENT) as
// troika.InvalidArgumentError, both TroikaErrors and ValueErrors.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "python/module/arguments.h"
#include "python/module/batch.h"
#include "python/module/errors.h"
#include "python/module/handles.h"
#include "python/module/hot_path.h"
#include "troika/troika.h"

namespace py = pybind11;

namespace troika::py_module {
namespace {

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

// DTYPES and the reduce ops: enum values as plain ints, so that the Python layers pass them
// back unchanged.
void AddConstants(py::module_& m) {
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
}

void BindContext(py::module_& m) {
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
            AllreduceAndWait(c, name, Ptr(in), Ptr(out), ToDataType(dtype), std::move(shape.v),
                             MakeAllreduceOptions(op, prescale, postscale, process_set, -1, 0));
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

}  // namespace
}  // namespace troika::py_module

PYBIND11_MODULE(_troika, m) {
  namespace module = troika::py_module;
  m.doc() = "Troika's compiled core: collectives over raw buffers (see troika.torch)";
  module::AddErrors(m);
  module::AddConstants(m);
  module::AddHotPath(m);
  module::AddBatch(m);
  module::BindHandle(m);
  module::BindContext(m);
}
