#pragma once
// troika._troika's exceptions: every error is a troika.TroikaError (a RuntimeError) with `code`
// (the status code's name, "INVALID_ARGUMENT"), `message` (Troika's text) and
// `membership_change`; str() is "CODE: message". A submission the core refuses at once raises
// troika.DuplicateNameError (a name in flight on this rank: ALREADY_EXISTS) or
// troika.InvalidArgumentError (INVALID_ARGUMENT), both TroikaErrors and ValueErrors, as
// Horovod's do.

#include <pybind11/pybind11.h>

#include "absl/status/status.h"

namespace troika::py_module {

// Creates the exception classes in `m` (at import).
void AddErrors(pybind11::module_& m);

// Raises a failed `status` as a TroikaError.
void Check(const absl::Status& status);
// The status of an operation's submission (and run): as Check, but ALREADY_EXISTS raises
// DuplicateNameError and INVALID_ARGUMENT InvalidArgumentError.
void CheckSubmitted(const absl::Status& status);

}  // namespace troika::py_module
