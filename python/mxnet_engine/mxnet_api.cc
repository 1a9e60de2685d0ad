// mxnet_api.h: MXNet's C API, found at run time.

#include "python/mxnet_engine/mxnet_api.h"

#include <dlfcn.h>

#include <atomic>
#include <stdexcept>

namespace troika::mxnet {
namespace {

using PushAsyncNDFn = int (*)(EngineAsyncFunc, void*, EngineFuncParamDeleter, void*, void**, int,
                              void**, int, void*, int, const char*, bool);
using GetDataFn = int (*)(void*, void**);
using DetachFn = int (*)(void*, void**);
using FreeFn = int (*)(void*);
using GetLastErrorFn = const char* (*)();

struct Functions {
  PushAsyncNDFn push_async_nd = nullptr;
  GetDataFn get_data = nullptr;
  DetachFn detach = nullptr;
  FreeFn free = nullptr;
  GetLastErrorFn get_last_error = nullptr;
};

std::atomic<const Functions*> g_functions{nullptr};

absl::Status LastError(const char* call) {
  const Functions* f = g_functions.load(std::memory_order_acquire);
  return absl::InternalError(std::string(call) + " failed: " +
                             (f != nullptr ? f->get_last_error() : "MXNet is not bound"));
}

}  // namespace

absl::Status MxnetApi::Bind(const std::string& path) {
  if (bound()) return absl::OkStatus();
  // The library `import mxnet` loaded (RTLD_NOLOAD: never a second copy); else load it.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen(path.c_str(), RTLD_NOW);
  if (lib == nullptr) {
    return absl::FailedPreconditionError("troika.mxnet: cannot load " + path + ": " + dlerror());
  }
  auto* f = new Functions;  // never freed: engine operations may run until the process exits
  f->push_async_nd = reinterpret_cast<PushAsyncNDFn>(dlsym(lib, "MXEnginePushAsyncND"));
  f->get_data = reinterpret_cast<GetDataFn>(dlsym(lib, "MXNDArrayGetData"));
  f->detach = reinterpret_cast<DetachFn>(dlsym(lib, "MXNDArrayDetach"));
  f->free = reinterpret_cast<FreeFn>(dlsym(lib, "MXNDArrayFree"));
  f->get_last_error = reinterpret_cast<GetLastErrorFn>(dlsym(lib, "MXGetLastError"));
  if (f->push_async_nd == nullptr || f->get_data == nullptr || f->detach == nullptr ||
      f->free == nullptr || f->get_last_error == nullptr) {
    delete f;
    return absl::FailedPreconditionError(
        "troika.mxnet: " + path +
        " lacks MXEnginePushAsyncND, MXNDArrayGetData, MXNDArrayDetach, MXNDArrayFree or "
        "MXGetLastError (MXNet 1.5 or later has them)");
  }
  const Functions* expected = nullptr;
  if (!g_functions.compare_exchange_strong(expected, f, std::memory_order_acq_rel)) delete f;
  return absl::OkStatus();
}

bool MxnetApi::bound() { return g_functions.load(std::memory_order_acquire) != nullptr; }

absl::Status MxnetApi::GetData(void* ndarray, void** data) {
  const Functions* f = g_functions.load(std::memory_order_acquire);
  if (f == nullptr) return absl::FailedPreconditionError("troika.mxnet: MXNet is not bound");
  if (f->get_data(ndarray, data) != 0) return LastError("MXNDArrayGetData");
  return absl::OkStatus();
}

absl::Status MxnetApi::Hold(void* ndarray, void** held) {
  const Functions* f = g_functions.load(std::memory_order_acquire);
  if (f == nullptr) return absl::FailedPreconditionError("troika.mxnet: MXNet is not bound");
  if (f->detach(ndarray, held) != 0) return LastError("MXNDArrayDetach");
  return absl::OkStatus();
}

void MxnetApi::Release(void* held) {
  const Functions* f = g_functions.load(std::memory_order_acquire);
  if (f != nullptr && held != nullptr) f->free(held);
}

absl::Status MxnetApi::PushAsync(EngineAsyncFunc fn, void* param, const MxContext& where,
                                 void** reads, int num_reads, void** writes, int num_writes,
                                 int priority, const char* name) {
  const Functions* f = g_functions.load(std::memory_order_acquire);
  if (f == nullptr) return absl::FailedPreconditionError("troika.mxnet: MXNet is not bound");
  int property = kCpuPrioritized;
  // No deleter: the parameter is the operation's own, freed by it once it completed.
  if (f->push_async_nd(fn, param, nullptr, const_cast<MxContext*>(&where), reads, num_reads, writes,
                       num_writes, &property, priority, name, false) != 0) {
    return LastError("MXEnginePushAsyncND");
  }
  return absl::OkStatus();
}

void MxnetApi::Complete(const OnComplete& on_complete, const std::string& error) {
  if (error.empty()) {
    on_complete.callback(on_complete.engine, on_complete.param, nullptr);
    return;
  }
  // A dmlc::Error by layout (see mxnet_api.h); the engine copies it before returning.
  const std::runtime_error e(error);
  on_complete.callback(on_complete.engine, on_complete.param, &e);
}

}  // namespace troika::mxnet
