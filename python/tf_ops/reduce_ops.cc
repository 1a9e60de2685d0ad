// The reductions: TroikaAllreduce, TroikaGroupedAllreduce, TroikaReducescatter and
// TroikaGroupedReducescatter (troika.tensorflow.collectives wraps them).
//
// Attributes: `reduce_op` (troika::ReduceOp's number), `prescale_factor`, `postscale_factor`,
// `process_set_id`, and the negotiated names: `tensor_name`, or for the grouped forms
// `group_name` and one `tensor_names` entry per tensor.

#include "python/tf_ops/kernel_support.h"

namespace troika::tf {
namespace {

struct ReduceKernel : AsyncKernel {
  using AsyncKernel::AsyncKernel;
  std::string group;               // grouped forms only
  std::vector<std::string> names;  // one per tensor
  AllreduceOptions options;
};

void* CreateReduce(TF_OpKernelConstruction* ctx, bool grouped) {
  Attrs attrs(ctx);
  auto* k = new ReduceKernel(attrs);
  if (grouped) {
    k->group = attrs.String("group_name");
    k->names = attrs.StringList("tensor_names");
  } else {
    k->names = {attrs.String("tensor_name")};
  }
  k->options.op = static_cast<ReduceOp>(attrs.Int("reduce_op"));
  k->options.prescale = attrs.Float("prescale_factor");
  k->options.postscale = attrs.Float("postscale_factor");
  k->options.process_set = attrs.Int("process_set_id");
  return k;
}

void* CreateOne(TF_OpKernelConstruction* ctx) { return CreateReduce(ctx, false); }
void* CreateGroup(TF_OpKernelConstruction* ctx) { return CreateReduce(ctx, true); }
void Destroy(void* k) { delete static_cast<ReduceKernel*>(k); }

// The inputs of a call (one per name); false after failing it.
bool Inputs(AsyncCall& call, const ReduceKernel& k, std::vector<Input>& ins) {
  if (TF_NumInputs(call.ctx()) != static_cast<int>(k.names.size())) {
    call.Fail(absl::InvalidArgumentError("tensor_names must name every input"));
    return false;
  }
  for (size_t i = 0; i < k.names.size(); ++i) {
    std::optional<Input> in = call.GetInput(static_cast<int>(i));
    if (!in) return false;
    ins.push_back(std::move(*in));
  }
  return true;
}

void ComputeAllreduce(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const auto& k = *static_cast<ReduceKernel*>(kernel);
  std::shared_ptr<AsyncCall> call = AsyncCall::Start(k, ctx, done);
  if (!call) return;
  std::vector<Input> ins;
  if (!Inputs(*call, k, ins)) return;
  std::vector<GroupTensor> group;
  for (size_t i = 0; i < ins.size(); ++i) {
    void* out =
        call->AllocateOutput(static_cast<int>(i), ins[i].tf_type, ins[i].shape, ins[i].bytes);
    if (call->ended()) return;
    group.push_back({k.names[i], ins[i].data, out, ins[i].dtype, ins[i].shape});
  }
  std::vector<Handle> handles;
  if (k.group.empty()) {
    handles.push_back(call->context().Allreduce(group[0].name, group[0].in, group[0].out,
                                                group[0].dtype, group[0].shape, k.options));
  } else {
    handles = call->context().GroupedAllreduce(k.group, group, k.options);
  }
  AsyncCall::FinishWhenDone(std::move(call), std::move(handles));
}

// Reducescatter's results are sized here (the rows of this rank's position in the set), so the
// core writes them straight into TF's outputs.
void ComputeReducescatter(void* kernel, TF_OpKernelContext* ctx,
                          TF_AsyncOpKernelDoneCallback* done) {
  const auto& k = *static_cast<ReduceKernel*>(kernel);
  std::shared_ptr<AsyncCall> call = AsyncCall::Start(k, ctx, done);
  if (!call) return;
  std::vector<Input> ins;
  if (!Inputs(*call, k, ins)) return;
  absl::StatusOr<std::pair<int, int>> member =
      call->context().ProcessSetMember(k.options.process_set);
  if (!member.ok()) return call->Fail(member.status());
  const auto [position, set_size] = *member;
  if (position < 0) {
    return call->Fail(
        absl::FailedPreconditionError("reducescatter on a process set this rank is not in"));
  }
  std::vector<GroupTensor> group;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i].shape.empty()) {
      return call->Fail(absl::InvalidArgumentError(
          "reducescatter needs a tensor of at least one dimension (it scatters dim 0)"));
    }
    const int64_t dim0 = ins[i].shape[0];
    std::vector<int64_t> out_shape = ins[i].shape;
    out_shape[0] = dim0 / set_size + (position < dim0 % set_size ? 1 : 0);
    const size_t bytes =
        dim0 == 0 ? 0
                  : ins[i].bytes / static_cast<size_t>(dim0) * static_cast<size_t>(out_shape[0]);
    void* out = call->AllocateOutput(static_cast<int>(i), ins[i].tf_type, out_shape, bytes);
    if (call->ended()) return;
    group.push_back({k.names[i], ins[i].data, out, ins[i].dtype, ins[i].shape, bytes});
  }
  std::vector<Handle> handles;
  if (k.group.empty()) {
    const GroupTensor& t = group[0];
    handles.push_back(call->context().ReducescatterInto(t.name, t.in, t.out, t.out_bytes, t.dtype,
                                                        t.shape, k.options));
  } else {
    handles = call->context().GroupedReducescatter(k.group, group, k.options);
  }
  AsyncCall::FinishWhenDone(std::move(call), std::move(handles));
}

void DefineReduce(TF_OpDefinitionBuilder* op, bool grouped) {
  if (grouped) {
    TF_OpDefinitionBuilderAddAttr(op, (std::string("T: list(") + kTypes + ")").c_str());
    TF_OpDefinitionBuilderAddInput(op, "tensors: T");
    TF_OpDefinitionBuilderAddOutput(op, "outputs: T");
    TF_OpDefinitionBuilderAddAttr(op, "group_name: string");
    TF_OpDefinitionBuilderAddAttr(op, "tensor_names: list(string)");
  } else {
    TF_OpDefinitionBuilderAddAttr(op, (std::string("T: ") + kTypes).c_str());
    TF_OpDefinitionBuilderAddInput(op, "tensor: T");
    TF_OpDefinitionBuilderAddOutput(op, "output: T");
    TF_OpDefinitionBuilderAddAttr(op, "tensor_name: string");
  }
  TF_OpDefinitionBuilderAddAttr(op, "reduce_op: int");
  TF_OpDefinitionBuilderAddAttr(op, "prescale_factor: float = 1.0");
  TF_OpDefinitionBuilderAddAttr(op, "postscale_factor: float = 1.0");
  TF_OpDefinitionBuilderAddAttr(op, "process_set_id: int = 0");
}

const bool registered = [] {
  RegisterAsyncOp(
      "TroikaAllreduce", [](TF_OpDefinitionBuilder* op) { DefineReduce(op, false); }, SameShapes,
      CreateOne, ComputeAllreduce, Destroy);
  RegisterAsyncOp(
      "TroikaGroupedAllreduce", [](TF_OpDefinitionBuilder* op) { DefineReduce(op, true); },
      SameShapes, CreateGroup, ComputeAllreduce, Destroy);
  RegisterAsyncOp(
      "TroikaReducescatter", [](TF_OpDefinitionBuilder* op) { DefineReduce(op, false); },
      SameShapesButDim0, CreateOne, ComputeReducescatter, Destroy);
  RegisterAsyncOp(
      "TroikaGroupedReducescatter", [](TF_OpDefinitionBuilder* op) { DefineReduce(op, true); },
      SameShapesButDim0, CreateGroup, ComputeReducescatter, Destroy);
  return true;
}();

}  // namespace
}  // namespace troika::tf
