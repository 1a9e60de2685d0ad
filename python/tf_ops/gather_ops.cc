// The data movements: TroikaAllgather, TroikaGroupedAllgather, TroikaBroadcast and
// TroikaAlltoall (troika.tensorflow.collectives wraps them). Attributes: the negotiated names
// (`tensor_name`, or `group_name` and `tensor_names`), `process_set_id`, and broadcast's
// `root_rank`, the root's position in the set.

#include <cstring>

#include "python/tf_ops/kernel_support.h"

namespace troika::tf {
namespace {

struct GatherKernel : AsyncKernel {
  using AsyncKernel::AsyncKernel;
  std::string group;               // grouped allgather only
  std::vector<std::string> names;  // one per tensor
  int process_set = 0;
  int root = 0;  // broadcast
};

void* Create(TF_OpKernelConstruction* ctx, bool grouped, bool broadcast) {
  Attrs attrs(ctx);
  auto* k = new GatherKernel(attrs);
  if (grouped) {
    k->group = attrs.String("group_name");
    k->names = attrs.StringList("tensor_names");
  } else {
    k->names = {attrs.String("tensor_name")};
  }
  k->process_set = attrs.Int("process_set_id");
  if (broadcast) k->root = attrs.Int("root_rank");
  return k;
}

void* CreateOne(TF_OpKernelConstruction* ctx) { return Create(ctx, false, false); }
void* CreateGroup(TF_OpKernelConstruction* ctx) { return Create(ctx, true, false); }
void* CreateBroadcast(TF_OpKernelConstruction* ctx) { return Create(ctx, false, true); }
void Destroy(void* k) { delete static_cast<GatherKernel*>(k); }

// Copies each handle-owned result into output i of its shape (the shapes are known only
// once the collective ran).
AsyncCall::Finish CopyResults(std::vector<Handle> handles, std::vector<TF_DataType> types) {
  return [handles = std::move(handles), types = std::move(types)](AsyncCall& call) {
    for (size_t i = 0; i < handles.size(); ++i) {
      const Handle& h = handles[i];
      void* out =
          call.AllocateOutput(static_cast<int>(i), types[i], h.output_shape(), h.output_bytes());
      if (call.ended()) return;
      if (h.output_bytes() > 0) std::memcpy(out, h.output(), h.output_bytes());
    }
  };
}

void ComputeAllgather(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const auto& k = *static_cast<GatherKernel*>(kernel);
  std::shared_ptr<AsyncCall> call = AsyncCall::Start(k, ctx, done);
  if (!call) return;
  if (TF_NumInputs(ctx) != static_cast<int>(k.names.size())) {
    return call->Fail(absl::InvalidArgumentError("tensor_names must name every input"));
  }
  std::vector<GroupTensor> group;
  std::vector<TF_DataType> types;
  for (size_t i = 0; i < k.names.size(); ++i) {
    std::optional<Input> in = call->GetInput(static_cast<int>(i));
    if (!in) return;
    group.push_back({k.names[i], in->data, nullptr, in->dtype, in->shape});
    types.push_back(in->tf_type);
  }
  OpOptions options{.process_set = k.process_set};
  std::vector<Handle> handles;
  if (k.group.empty()) {
    const GroupTensor& t = group[0];
    handles.push_back(call->context().Allgather(t.name, t.in, t.dtype, t.shape, options));
  } else {
    handles = call->context().GroupedAllgather(k.group, group, options);
  }
  AsyncCall::Finish finish = CopyResults(handles, std::move(types));
  AsyncCall::FinishWhenDone(std::move(call), std::move(handles), std::move(finish));
}

void ComputeBroadcast(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const auto& k = *static_cast<GatherKernel*>(kernel);
  std::shared_ptr<AsyncCall> call = AsyncCall::Start(k, ctx, done);
  if (!call) return;
  std::optional<Input> in = call->GetInput(0);
  if (!in) return;
  void* out = call->AllocateOutput(0, in->tf_type, in->shape, in->bytes);
  if (call->ended()) return;
  Handle h = call->context().Broadcast(k.names[0], in->data, out, in->dtype, in->shape, k.root,
                                       {.process_set = k.process_set});
  AsyncCall::FinishWhenDone(std::move(call), {h});
}

void ComputeAlltoall(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const auto& k = *static_cast<GatherKernel*>(kernel);
  std::shared_ptr<AsyncCall> call = AsyncCall::Start(k, ctx, done);
  if (!call) return;
  std::optional<Input> in = call->GetInput(0);
  if (!in) return;
  std::optional<Input> splits_in = call->GetInput(1);
  if (!splits_in) return;
  if (splits_in->tf_type != TF_INT32 || splits_in->shape.size() != 1) {
    return call->Fail(absl::InvalidArgumentError("alltoall: splits must be a 1-D int32 tensor"));
  }
  const auto* s = static_cast<const int32_t*>(splits_in->data);
  std::vector<int64_t> splits(s, s + splits_in->shape[0]);
  Handle h = call->context().Alltoall(k.names[0], in->data, in->dtype, in->shape, std::move(splits),
                                      {.process_set = k.process_set});
  const TF_DataType type = in->tf_type;
  AsyncCall::FinishWhenDone(call, {h}, [h, type](AsyncCall& c) {
    CopyResults({h}, {type})(c);
    if (c.ended()) return;
    const std::vector<int64_t>& received = h.received_splits();
    const std::vector<int64_t> shape = {static_cast<int64_t>(received.size())};
    auto* out = static_cast<int32_t*>(
        c.AllocateOutput(1, TF_INT32, shape, received.size() * sizeof(int32_t)));
    if (c.ended()) return;
    for (size_t i = 0; i < received.size(); ++i) out[i] = static_cast<int32_t>(received[i]);
  });
}

void DefineOne(TF_OpDefinitionBuilder* op) {
  TF_OpDefinitionBuilderAddAttr(op, (std::string("T: ") + kTypes).c_str());
  TF_OpDefinitionBuilderAddInput(op, "tensor: T");
  TF_OpDefinitionBuilderAddOutput(op, "output: T");
  TF_OpDefinitionBuilderAddAttr(op, "tensor_name: string");
  TF_OpDefinitionBuilderAddAttr(op, "process_set_id: int = 0");
}

const bool registered = [] {
  RegisterAsyncOp("TroikaAllgather", DefineOne, SameShapesButDim0, CreateOne, ComputeAllgather,
                  Destroy);
  RegisterAsyncOp(
      "TroikaGroupedAllgather",
      [](TF_OpDefinitionBuilder* op) {
        TF_OpDefinitionBuilderAddAttr(op, (std::string("T: list(") + kTypes + ")").c_str());
        TF_OpDefinitionBuilderAddInput(op, "tensors: T");
        TF_OpDefinitionBuilderAddOutput(op, "outputs: T");
        TF_OpDefinitionBuilderAddAttr(op, "group_name: string");
        TF_OpDefinitionBuilderAddAttr(op, "tensor_names: list(string)");
        TF_OpDefinitionBuilderAddAttr(op, "process_set_id: int = 0");
      },
      SameShapesButDim0, CreateGroup, ComputeAllgather, Destroy);
  RegisterAsyncOp(
      "TroikaBroadcast",
      [](TF_OpDefinitionBuilder* op) {
        DefineOne(op);
        TF_OpDefinitionBuilderAddAttr(op, "root_rank: int");
      },
      SameShapes, CreateBroadcast, ComputeBroadcast, Destroy);
  RegisterAsyncOp(
      "TroikaAlltoall",
      [](TF_OpDefinitionBuilder* op) {
        DefineOne(op);
        TF_OpDefinitionBuilderAddInput(op, "splits: int32");
        TF_OpDefinitionBuilderAddOutput(op, "received_splits: int32");
      },
      SameShapesButDim0, CreateOne, ComputeAlltoall, Destroy);
  return true;
}();

}  // namespace
}  // namespace troika::tf
