#pragma once
// What the front ends call per tensor or per large result, kept off pybind11's general paths:
// _troika.submit_allreduce and _troika.allreduce_wait (Context.allreduce and
// Context.allreduce_wait without pybind11's argument dispatch) and _troika.advise_fresh_buffer
// (a fresh result's pages, advised and mapped without the GIL).

#include <pybind11/pybind11.h>

namespace troika::py_module {

// Adds the three functions to `m`.
void AddHotPath(pybind11::module_& m);

}  // namespace troika::py_module
