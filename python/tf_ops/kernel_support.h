#pragma once
// What every troika.tensorflow kernel shares: the process's troika::Context, TF's types as
// Troika's, reading a kernel's attributes, and AsyncCall, one run of an asynchronous kernel
// from ComputeAsync until TF's done callback.
//
// Only TensorFlow's stable C API (tensorflow/c/kernels.h, ops.h, tf_tensor.h, tf_status.h)
// and libtroika's C++ API are used: no TensorFlow C++ symbol, so one build runs on every
// TensorFlow whose libtensorflow_framework.so.2 exports these functions (docs/tensorflow.md).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"
#include "troika/troika.h"

namespace troika::tf {

// The context the ops submit to, set from Python (troika_tf_bind_context) at every init();
// null before the first. Contexts handed over are never freed while the library is loaded
// (troika.tensorflow keeps them), so a kernel holding an old one submits to a shut-down
// context and fails cleanly.
Context* CurrentContext();

// The element types the ops take (Troika's DataType), as an op definition's attribute
// ("T: {...}") and one by one.
inline constexpr char kTypes[] =
    "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}";
std::optional<DataType> ToTroika(TF_DataType type);

// A kernel's attributes, read at construction; a missing or ill-typed one is the kernel's
// failure (TF then refuses to build it).
class Attrs {
 public:
  explicit Attrs(TF_OpKernelConstruction* ctx) : ctx_(ctx) {}
  std::string String(const char* name);
  std::vector<std::string> StringList(const char* name);
  int32_t Int(const char* name);
  float Float(const char* name);
  bool Bool(const char* name);
  bool ok() const { return ok_; }

 private:
  bool Check(TF_Status* status);
  TF_OpKernelConstruction* ctx_;
  bool ok_ = true;
};

// What every asynchronous kernel reads at construction: its `blocking` attribute, set by the
// Python wrapper when the op is run eagerly (the calling thread then waits for it, which counts
// for deadlock detection: Handle::OnDone's caller_waits). Each kernel's own state derives
// from it; RegisterAsyncOp defines the attribute.
struct AsyncKernel {
  explicit AsyncKernel(Attrs& attrs) : caller_waits(attrs.Bool("blocking")) {}
  bool caller_waits;
};

// One input as Troika takes it: the tensor (owned, deleted with the call), its data, type and
// shape.
struct Input {
  TF_Tensor* tensor = nullptr;
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  TF_DataType tf_type = TF_FLOAT;
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

// One execution of an asynchronous kernel. Start() takes TF's done callback; the call then
// ends exactly once, by Fail() or by FinishWhenDone(), which runs TF's done after the handles
// completed. Tensors taken through the call are deleted at its end.
class AsyncCall {
 public:
  // Null if there is no context yet (the kernel has then failed and finished).
  static std::shared_ptr<AsyncCall> Start(const AsyncKernel& kernel, TF_OpKernelContext* ctx,
                                          TF_AsyncOpKernelDoneCallback* done);
  ~AsyncCall();

  Context& context() const { return *context_; }
  TF_OpKernelContext* ctx() const { return ctx_; }
  // Input `index`; nullopt after failing the call (an element type Troika has no number for).
  std::optional<Input> GetInput(int index);
  // Allocates output `index` and returns its data (null for no elements); check ended()
  // after it: a failed allocation fails the call.
  void* AllocateOutput(int index, TF_DataType type, const std::vector<int64_t>& shape,
                       size_t bytes);
  // True once the call ended (failed or finished): the kernel must return.
  bool ended() const { return ended_; }
  // Ends the call with `status` as the kernel's error.
  void Fail(const absl::Status& status);
  // Ends the call once every handle completed: the first failure is the kernel's error; else
  // `finish` (if any) runs first, on the completing thread, to write results the handles
  // own into outputs it allocates (and may Fail instead).
  using Finish = std::function<void(AsyncCall& call)>;
  static void FinishWhenDone(std::shared_ptr<AsyncCall> call, std::vector<Handle> handles,
                             Finish finish = nullptr);

 private:
  AsyncCall(TF_OpKernelContext* ctx, std::function<void()> done, Context* context,
            bool caller_waits)
      : ctx_(ctx), done_(std::move(done)), context_(context), caller_waits_(caller_waits) {}
  void End();

  TF_OpKernelContext* ctx_;
  std::function<void()> done_;
  Context* context_;
  bool caller_waits_;
  std::vector<TF_Tensor*> tensors_;  // inputs and outputs taken, deleted at the end
  bool ended_ = false;
};

// TF's status for one of Troika's (the codes are the same canonical numbers).
void SetFailure(TF_OpKernelContext* ctx, const absl::Status& status);

// Builds and registers the op `name` (`define` adds its inputs, outputs and attributes; this
// adds `blocking`, AsyncKernel's) as a stateful op with `shape` as its shape function, and its
// CPU kernel.
using ShapeFn = void (*)(TF_ShapeInferenceContext*, TF_Status*);
void RegisterAsyncOp(const char* name, const std::function<void(TF_OpDefinitionBuilder*)>& define,
                     ShapeFn shape, void* (*create)(TF_OpKernelConstruction*),
                     void (*compute)(void*, TF_OpKernelContext*, TF_AsyncOpKernelDoneCallback*),
                     void (*destroy)(void*));

// Shape functions: each output the shape of the input at the same index; dim 0 of each unknown.
void SameShapes(TF_ShapeInferenceContext* ctx, TF_Status* status);
void SameShapesButDim0(TF_ShapeInferenceContext* ctx, TF_Status* status);

}  // namespace troika::tf
