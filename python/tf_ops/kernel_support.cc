// kernel_support.h: the context, types, attributes and AsyncCall of troika.tensorflow's ops.

#include "python/tf_ops/kernel_support.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace troika::tf {
namespace {

std::atomic<Context*> g_context{nullptr};

}  // namespace

Context* CurrentContext() { return g_context.load(std::memory_order_acquire); }

std::optional<DataType> ToTroika(TF_DataType type) {
  switch (type) {
    case TF_UINT8:
      return DataType::kUint8;
    case TF_INT8:
      return DataType::kInt8;
    case TF_UINT16:
      return DataType::kUint16;
    case TF_INT16:
      return DataType::kInt16;
    case TF_INT32:
      return DataType::kInt32;
    case TF_INT64:
      return DataType::kInt64;
    case TF_HALF:
      return DataType::kFloat16;
    case TF_BFLOAT16:
      return DataType::kBFloat16;
    case TF_FLOAT:
      return DataType::kFloat32;
    case TF_DOUBLE:
      return DataType::kFloat64;
    case TF_BOOL:
      return DataType::kBool;
    default:
      return std::nullopt;
  }
}

bool Attrs::Check(TF_Status* status) {
  if (TF_GetCode(status) == TF_OK) return true;
  if (ok_) TF_OpKernelConstruction_Failure(ctx_, status);
  ok_ = false;
  return false;
}

std::string Attrs::String(const char* name) {
  TF_Status* status = TF_NewStatus();
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx_, name, &list_size, &total_size, status);
  std::string value;
  if (Check(status) && total_size > 0) {
    value.resize(total_size);
    TF_OpKernelConstruction_GetAttrString(ctx_, name, value.data(), total_size, status);
    Check(status);
  }
  TF_DeleteStatus(status);
  return value;
}

std::vector<std::string> Attrs::StringList(const char* name) {
  TF_Status* status = TF_NewStatus();
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx_, name, &list_size, &total_size, status);
  std::vector<std::string> values;
  if (Check(status) && list_size > 0) {
    std::vector<char*> pointers(list_size);
    std::vector<size_t> lengths(list_size);
    std::vector<char> storage(total_size > 0 ? total_size : 1);
    TF_OpKernelConstruction_GetAttrStringList(ctx_, name, pointers.data(), lengths.data(),
                                              list_size, storage.data(), storage.size(), status);
    if (Check(status)) {
      for (int i = 0; i < list_size; ++i) values.emplace_back(pointers[i], lengths[i]);
    }
  }
  TF_DeleteStatus(status);
  return values;
}

int32_t Attrs::Int(const char* name) {
  TF_Status* status = TF_NewStatus();
  int32_t value = 0;
  TF_OpKernelConstruction_GetAttrInt32(ctx_, name, &value, status);
  Check(status);
  TF_DeleteStatus(status);
  return value;
}

float Attrs::Float(const char* name) {
  TF_Status* status = TF_NewStatus();
  float value = 0;
  TF_OpKernelConstruction_GetAttrFloat(ctx_, name, &value, status);
  Check(status);
  TF_DeleteStatus(status);
  return value;
}

bool Attrs::Bool(const char* name) {
  TF_Status* status = TF_NewStatus();
  TF_Bool value = false;
  TF_OpKernelConstruction_GetAttrBool(ctx_, name, &value, status);
  Check(status);
  TF_DeleteStatus(status);
  return value;
}

void SetFailure(TF_OpKernelContext* ctx, const absl::Status& status) {
  TF_Status* tf_status = TF_NewStatus();
  // absl::StatusCode and TF_Code are both the canonical codes.
  TF_SetStatus(tf_status, static_cast<TF_Code>(status.code()),
               std::string(status.message()).c_str());
  TF_OpKernelContext_Failure(ctx, tf_status);
  TF_DeleteStatus(tf_status);
}

std::shared_ptr<AsyncCall> AsyncCall::Start(const AsyncKernel& kernel, TF_OpKernelContext* ctx,
                                            TF_AsyncOpKernelDoneCallback* done) {
  // TF passes the address of its own std::function<void()>, a temporary of
  // CAsyncOpKernel::ComputeAsync (tensorflow/c/kernels.cc) destroyed when the kernel's
  // ComputeAsync returns; the C API has no other way to keep it. Moved out here, it lives
  // until the call ends. tests/python/tensorflow checks this on each supported TF version.
  std::function<void()> owned = std::move(*reinterpret_cast<std::function<void()>*>(done));
  Context* context = CurrentContext();
  if (context == nullptr) {
    SetFailure(ctx,
               absl::FailedPreconditionError("Troika has not been initialized; use hvd.init()."));
    owned();
    return nullptr;
  }
  return std::shared_ptr<AsyncCall>(
      new AsyncCall(ctx, std::move(owned), context, kernel.caller_waits));
}

AsyncCall::~AsyncCall() {
  if (!ended_) End();  // a kernel that returned without ending its call (a bug): don't hang TF
}

std::optional<Input> AsyncCall::GetInput(int index) {
  TF_Status* status = TF_NewStatus();
  Input in;
  TF_GetInput(ctx_, index, &in.tensor, status);
  const bool ok = TF_GetCode(status) == TF_OK;
  if (!ok) TF_OpKernelContext_Failure(ctx_, status);
  TF_DeleteStatus(status);
  if (!ok) {
    End();
    return std::nullopt;
  }
  tensors_.push_back(in.tensor);
  in.tf_type = TF_TensorType(in.tensor);
  std::optional<DataType> dtype = ToTroika(in.tf_type);
  if (!dtype) {
    Fail(absl::InvalidArgumentError("Troika has no element type for this tensor's dtype"));
    return std::nullopt;
  }
  in.dtype = *dtype;
  in.data = TF_TensorData(in.tensor);
  in.bytes = TF_TensorByteSize(in.tensor);
  in.shape.resize(TF_NumDims(in.tensor));
  for (size_t d = 0; d < in.shape.size(); ++d) in.shape[d] = TF_Dim(in.tensor, static_cast<int>(d));
  return in;
}

void* AsyncCall::AllocateOutput(int index, TF_DataType type, const std::vector<int64_t>& shape,
                                size_t bytes) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor* out = TF_AllocateOutput(ctx_, index, type, shape.data(),
                                     static_cast<int>(shape.size()), bytes, status);
  const bool ok = TF_GetCode(status) == TF_OK && out != nullptr;
  if (!ok) TF_OpKernelContext_Failure(ctx_, status);
  TF_DeleteStatus(status);
  if (!ok) {
    End();
    return nullptr;
  }
  tensors_.push_back(out);
  return TF_TensorData(out);
}

void AsyncCall::Fail(const absl::Status& status) {
  SetFailure(ctx_, status);
  End();
}

void AsyncCall::End() {
  if (ended_) return;
  ended_ = true;
  for (TF_Tensor* t : tensors_) TF_DeleteTensor(t);
  tensors_.clear();
  std::function<void()> done = std::move(done_);
  done();
}

void AsyncCall::FinishWhenDone(std::shared_ptr<AsyncCall> call, std::vector<Handle> handles,
                               Finish finish) {
  struct Waiting {
    std::shared_ptr<AsyncCall> call;
    Finish finish;
    std::atomic<size_t> left;
    std::mutex mu;
    absl::Status first;  // guarded by mu
  };
  if (handles.empty()) {
    if (finish) finish(*call);
    call->End();
    return;
  }
  auto waiting = std::make_shared<Waiting>();
  waiting->call = std::move(call);
  waiting->finish = std::move(finish);
  waiting->left = handles.size();
  const bool caller_waits = waiting->call->caller_waits_;
  for (const Handle& h : handles) {
    h.OnDone(
        [waiting](const absl::Status& status) {
          if (!status.ok()) {
            std::lock_guard<std::mutex> lock(waiting->mu);
            if (waiting->first.ok()) waiting->first = status;
          }
          if (waiting->left.fetch_sub(1) != 1) return;
          AsyncCall& c = *waiting->call;
          absl::Status first;
          {
            std::lock_guard<std::mutex> lock(waiting->mu);
            first = waiting->first;
          }
          if (!first.ok()) {
            c.Fail(first);
          } else {
            if (waiting->finish) waiting->finish(c);
            c.End();
          }
          waiting->call.reset();  // the handles' callbacks hold `waiting`, not the call
        },
        caller_waits);
  }
}

void RegisterAsyncOp(const char* name, const std::function<void(TF_OpDefinitionBuilder*)>& define,
                     ShapeFn shape, void* (*create)(TF_OpKernelConstruction*),
                     void (*compute)(void*, TF_OpKernelContext*, TF_AsyncOpKernelDoneCallback*),
                     void (*destroy)(void*)) {
  TF_Status* status = TF_NewStatus();
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder(name);
  define(op);
  TF_OpDefinitionBuilderAddAttr(op, "blocking: bool = false");
  // Stateful so that grappler never constant-folds or merges two of them; troika.tensorflow
  // lists the op as order-insensitive so that tf.function does not chain them in program
  // order either (docs/design/tensorflow.md, "The op must not be ordered or folded").
  TF_OpDefinitionBuilderSetIsStateful(op, true);
  TF_OpDefinitionBuilderSetShapeInferenceFunction(op, shape);
  TF_RegisterOpDefinition(op, status);  // takes `op`
  if (TF_GetCode(status) == TF_OK) {
    TF_KernelBuilder* kernel = TF_NewAsyncKernelBuilder(name, "CPU", create, compute, destroy);
    TF_RegisterKernelBuilder(name, kernel, status);  // takes `kernel`
  }
  TF_DeleteStatus(status);
}

namespace {

// Output i from input i's shape, with dim 0 unknown if `unknown_dim0`.
void ShapesFromInputs(TF_ShapeInferenceContext* ctx, TF_Status* status, bool unknown_dim0) {
  const int64_t n = TF_ShapeInferenceContextNumInputs(ctx);
  for (int64_t i = 0; i < n && TF_GetCode(status) == TF_OK; ++i) {
    TF_ShapeHandle* in = TF_NewShapeHandle();
    TF_ShapeInferenceContextGetInput(ctx, static_cast<int>(i), in, status);
    if (TF_GetCode(status) == TF_OK) {
      if (unknown_dim0 && TF_ShapeInferenceContextRankKnown(ctx, in) &&
          TF_ShapeInferenceContextRank(ctx, in) > 0) {
        TF_ShapeHandle* rest = TF_NewShapeHandle();
        TF_ShapeInferenceContextSubshape(ctx, in, 1, TF_ShapeInferenceContextRank(ctx, in), rest,
                                         status);
        TF_ShapeHandle* dim0 = TF_ShapeInferenceContextVectorFromSize(ctx, -1);
        if (TF_GetCode(status) == TF_OK) {
          TF_ShapeInferenceContextConcatenateShapes(ctx, dim0, rest, in, status);
        }
        TF_DeleteShapeHandle(dim0);
        TF_DeleteShapeHandle(rest);
      }
      if (TF_GetCode(status) == TF_OK) {
        TF_ShapeInferenceContextSetOutput(ctx, static_cast<int>(i), in, status);
      }
    }
    TF_DeleteShapeHandle(in);
  }
}

}  // namespace

void SameShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  ShapesFromInputs(ctx, status, false);
}

void SameShapesButDim0(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  ShapesFromInputs(ctx, status, true);
}

}  // namespace troika::tf

extern "C" {
// Called by troika.tensorflow at every init() with the new context's address
// (troika._troika.Context.address).
__attribute__((visibility("default"))) void troika_tf_bind_context(uintptr_t address) {
  troika::tf::g_context.store(reinterpret_cast<troika::Context*>(address),
                              std::memory_order_release);
}
}
