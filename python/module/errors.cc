#include "python/module/errors.h"

#include <pybind11/stl.h>  // MembershipChange::joined, a vector

#include <optional>
#include <string>

#include "troika/elastic.h"

namespace py = pybind11;

namespace troika::py_module {
namespace {

// Created by AddErrors.
PyObject* g_troika_error = nullptr;
PyObject* g_duplicate_name_error = nullptr;
PyObject* g_invalid_argument_error = nullptr;

// Raises `status` as `type` (TroikaError or a subclass).
[[noreturn]] void RaiseStatus(const absl::Status& status, PyObject* type) {
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

}  // namespace

void AddErrors(py::module_& m) {
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
}

void Check(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status, g_troika_error);
}

void CheckSubmitted(const absl::Status& status) {
  if (absl::IsAlreadyExists(status)) RaiseStatus(status, g_duplicate_name_error);
  if (absl::IsInvalidArgument(status)) RaiseStatus(status, g_invalid_argument_error);
  Check(status);
}

}  // namespace troika::py_module
