// TroikaJoin (this rank is out of data; outputs the last rank to join) and TroikaBarrier.
// Unlike the collectives they stay in program order inside tf.function (troika.tensorflow
// does not list them as order-insensitive). TroikaQuery: the job's size, this rank and the
// like when the graph runs (Horovod's size_op, rank_op, ...), not when it is built.

#include "python/tf_ops/kernel_support.h"

namespace troika::tf {
namespace {

struct ControlKernel : AsyncKernel {
  using AsyncKernel::AsyncKernel;
  int process_set = 0;
};

void* CreateBarrier(TF_OpKernelConstruction* ctx) {
  Attrs attrs(ctx);
  auto* k = new ControlKernel(attrs);
  k->process_set = attrs.Int("process_set_id");
  return k;
}
void* CreateJoin(TF_OpKernelConstruction* ctx) {
  Attrs attrs(ctx);
  return new ControlKernel(attrs);
}
void Destroy(void* k) { delete static_cast<ControlKernel*>(k); }

void ComputeJoin(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  std::shared_ptr<AsyncCall> call =
      AsyncCall::Start(*static_cast<ControlKernel*>(kernel), ctx, done);
  if (!call) return;
  Handle h = call->context().Join();
  AsyncCall::FinishWhenDone(call, {h}, [h](AsyncCall& c) {
    auto* out = static_cast<int32_t*>(c.AllocateOutput(0, TF_INT32, {}, sizeof(int32_t)));
    if (!c.ended()) *out = h.joined_last_rank();
  });
}

void ComputeBarrier(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const auto& k = *static_cast<ControlKernel*>(kernel);
  std::shared_ptr<AsyncCall> call = AsyncCall::Start(k, ctx, done);
  if (!call) return;
  Handle h = call->context().Barrier({.process_set = k.process_set});
  AsyncCall::FinishWhenDone(std::move(call), {h});
}

void ScalarShape(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* scalar = TF_ShapeInferenceContextScalar(ctx);
  TF_ShapeInferenceContextSetOutput(ctx, 0, scalar, status);
  TF_DeleteShapeHandle(scalar);
}

void NoShape(TF_ShapeInferenceContext*, TF_Status*) {}

struct QueryKernel {
  std::string what;
  int process_set = 0;
};

void* CreateQuery(TF_OpKernelConstruction* ctx) {
  Attrs attrs(ctx);
  return new QueryKernel{attrs.String("what"), attrs.Int("process_set_id")};
}
void DestroyQuery(void* k) { delete static_cast<QueryKernel*>(k); }

// Horovod's process_set_included_op codes where the answer is not 0 or 1.
constexpr int32_t kNotInitialized = -1;
constexpr int32_t kUnknownSet = -3;

absl::StatusOr<int32_t> Query(const QueryKernel& k) {
  Context* c = CurrentContext();
  if (k.what == "process_set_included") {
    if (c == nullptr) return kNotInitialized;
    absl::StatusOr<std::pair<int, int>> member = c->ProcessSetMember(k.process_set);
    if (!member.ok()) return kUnknownSet;
    return member->first >= 0 ? 1 : 0;
  }
  if (c == nullptr) {
    return absl::FailedPreconditionError("Troika has not been initialized; use hvd.init().");
  }
  if (k.what == "size") {
    absl::StatusOr<std::pair<int, int>> member = c->ProcessSetMember(k.process_set);
    if (!member.ok()) return member.status();
    return member->second;
  }
  if (k.what == "rank") return c->rank();
  if (k.what == "local_size") return c->local_size();
  if (k.what == "local_rank") return c->local_rank();
  if (k.what == "cross_size") return c->cross_size();
  if (k.what == "cross_rank") return c->cross_rank();
  return absl::InvalidArgumentError("TroikaQuery: unknown query '" + k.what + "'");
}

void ComputeQuery(void* kernel, TF_OpKernelContext* ctx) {
  absl::StatusOr<int32_t> value = Query(*static_cast<QueryKernel*>(kernel));
  if (!value.ok()) return SetFailure(ctx, value.status());
  TF_Status* status = TF_NewStatus();
  TF_Tensor* out = TF_AllocateOutput(ctx, 0, TF_INT32, nullptr, 0, sizeof(int32_t), status);
  if (TF_GetCode(status) == TF_OK) {
    *static_cast<int32_t*>(TF_TensorData(out)) = *value;
  } else {
    TF_OpKernelContext_Failure(ctx, status);
  }
  TF_DeleteTensor(out);
  TF_DeleteStatus(status);
}

void RegisterQuery() {
  TF_Status* status = TF_NewStatus();
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder("TroikaQuery");
  TF_OpDefinitionBuilderAddOutput(op, "value: int32");
  TF_OpDefinitionBuilderAddAttr(op, "what: string");
  TF_OpDefinitionBuilderAddAttr(op, "process_set_id: int = 0");
  TF_OpDefinitionBuilderSetIsStateful(op, true);  // answered when run: never folded
  TF_OpDefinitionBuilderSetShapeInferenceFunction(op, ScalarShape);
  TF_RegisterOpDefinition(op, status);
  if (TF_GetCode(status) == TF_OK) {
    TF_KernelBuilder* kernel =
        TF_NewKernelBuilder("TroikaQuery", "CPU", CreateQuery, ComputeQuery, DestroyQuery);
    TF_RegisterKernelBuilder("TroikaQuery", kernel, status);
  }
  TF_DeleteStatus(status);
}

const bool registered = [] {
  RegisterAsyncOp(
      "TroikaJoin",
      [](TF_OpDefinitionBuilder* op) { TF_OpDefinitionBuilderAddOutput(op, "last_rank: int32"); },
      ScalarShape, CreateJoin, ComputeJoin, Destroy);
  RegisterAsyncOp(
      "TroikaBarrier",
      [](TF_OpDefinitionBuilder* op) {
        TF_OpDefinitionBuilderAddAttr(op, "process_set_id: int = 0");
      },
      NoShape, CreateBarrier, ComputeBarrier, Destroy);
  RegisterQuery();
  return true;
}();

}  // namespace
}  // namespace troika::tf
