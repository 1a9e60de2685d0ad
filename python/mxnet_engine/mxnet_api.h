#pragma once
// The part of MXNet's C API (include/mxnet/c_api.h, MXNet 1.x) that troika.mxnet's engine ops
// use, declared here and found at run time in the libmxnet.so the process has loaded: nothing
// of Troika is compiled against MXNet's headers or links it (docs/mxnet.md).
//
// Two things the C API hands over are C++ objects, used by their layout, which has been the same
// in every MXNet 1.x (1.5 to 1.9): the `on_complete` an asynchronous engine function receives
// (engine::CallbackOnComplete: a function pointer, the engine, a parameter), and the error it may
// be called with (a dmlc::Error, a std::runtime_error with no member of its own, which the engine
// copies at once).

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace troika::mxnet {

// mxnet::Context: where an engine operation runs.
struct MxContext {
  int32_t dev_type = 1;  // kCPU = 1, kGPU = 2, kCPUPinned = 3, kCPUShared = 5
  int32_t dev_id = 0;
};

// engine::CallbackOnComplete, copied out of the pointer the engine passes.
struct OnComplete {
  void (*callback)(void* engine, void* param, const void* error) = nullptr;
  void* engine = nullptr;
  void* param = nullptr;
};

// Signatures of c_api.h.
using EngineAsyncFunc = void (*)(void* run_context, void* on_complete, void* param);
using EngineFuncParamDeleter = void (*)(void* param);

// mxnet::FnProperty values (engine.h).
inline constexpr int kCpuPrioritized = 3;

// The functions, once bound.
class MxnetApi {
 public:
  // Finds the functions in the libmxnet.so at `path` (already loaded by `import mxnet`).
  // FAILED_PRECONDITION naming what is missing.
  static absl::Status Bind(const std::string& path);
  static bool bound();

  // MXNDArrayGetData: the address of an NDArray's data (allocating it if still delayed; an
  // array in a oneDNN layout is first reordered, which waits for its pending writes). Only
  // where nothing else allocates it meanwhile: inside an engine operation that depends on the
  // array. (The engine operation that writes a new array allocates it when it runs, without a
  // lock: an allocation from another thread then may give the array two buffers.)
  static absl::Status GetData(void* ndarray, void** data);
  // MXNDArrayDetach: a handle of our own to `ndarray`'s data (sharing it; no autograd record),
  // valid after the caller's handle is freed, until Release. The data itself lives on while
  // an engine operation depending on it is pending.
  static absl::Status Hold(void* ndarray, void** held);
  // MXNDArrayFree of a handle Hold gave.
  static void Release(void* held);
  // MXEnginePushAsyncND with the arrays as read (`reads`) and write (`writes`) dependencies.
  static absl::Status PushAsync(EngineAsyncFunc fn, void* param, const MxContext& where,
                                void** reads, int num_reads, void** writes, int num_writes,
                                int priority, const char* name);
  // Completes an engine operation; `error` (empty: success) is raised by every later read of
  // the arrays it writes (MXNetError in Python).
  static void Complete(const OnComplete& on_complete, const std::string& error);
};

}  // namespace troika::mxnet
