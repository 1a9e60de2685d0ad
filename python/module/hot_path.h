#pragma once
// What the front ends call per tensor or per large result, kept off pybind11's general paths:
// _troika.submit_allreduce and _troika.allreduce_wait (Context.allreduce and
// Context.allreduce_wait without pybind11's argument dispatch) and _troika.advise_fresh_buffer
// (a fresh result's pages, advised and mapped without the GIL).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "troika/troika.h"

namespace troika::py_module {

// A host allreduce with AllreduceOptions::wait, the GIL released meanwhile (a scheduled one
// runs on this thread); raises its failure (a refusal as CheckSubmitted does). Both
// allreduce_wait entries (_troika's and Context's) call it.
void AllreduceAndWait(troika::Context& context, const std::string& name, void* in, void* out,
                      troika::DataType dtype, std::vector<int64_t> shape,
                      troika::AllreduceOptions options);

// Adds the three functions to `m`.
void AddHotPath(pybind11::module_& m);

}  // namespace troika::py_module
