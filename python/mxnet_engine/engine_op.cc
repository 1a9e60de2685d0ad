// engine_op.h: a Troika collective as an MXNet engine operation.

#include "python/mxnet_engine/engine_op.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include "common/status_macros.h"

namespace troika::mxnet {
namespace {

std::atomic<Context*> g_context{nullptr};

// The pushed operation, owned by itself from the push until it completed.
struct Op {
  Request request;
  // Our handles to each tensor's arrays (MxnetApi::Hold; the same one in place), from the push
  // until the operation completed: the caller's may be freed meanwhile.
  std::vector<void*> held_inputs, held_outputs;
  std::vector<void*> inputs;   // data addresses, per tensor, read when the engine runs it
  std::vector<void*> outputs;  // data addresses, per tensor
  OnComplete on_complete;
  std::atomic<size_t> left{0};
  std::mutex mu;
  absl::Status first;  // the first failure; guarded by mu

  // One of its handles completed; the last completes the engine operation and frees this.
  void Done(const absl::Status& status) {
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok()) first = status;
    }
    if (left.fetch_sub(1) != 1) return;
    Finish();
  }

  ~Op() {
    for (size_t i = 0; i < held_inputs.size(); ++i) {
      MxnetApi::Release(held_inputs[i]);
      if (i < held_outputs.size() && held_outputs[i] != held_inputs[i]) {
        MxnetApi::Release(held_outputs[i]);
      }
    }
  }

  // The arrays' data addresses, read now that the engine runs the operation: every earlier
  // write of them finished, so each has its one buffer.
  absl::Status ReadAddresses() {
    for (size_t i = 0; i < held_inputs.size(); ++i) {
      void* in = nullptr;
      void* out = nullptr;
      RETURN_IF_ERROR(MxnetApi::GetData(held_inputs[i], &in));
      if (held_outputs[i] == held_inputs[i]) {
        out = in;
      } else {
        RETURN_IF_ERROR(MxnetApi::GetData(held_outputs[i], &out));
      }
      inputs.push_back(in);
      outputs.push_back(out);
    }
    return absl::OkStatus();
  }

  // Completes the engine operation (with the first failure, if any) and frees this: our
  // handles go first, while the engine still holds the arrays for the operation.
  void Finish() {
    std::string error;
    if (!first.ok()) error = "troika.mxnet: " + Describe() + " failed: " + first.ToString();
    const OnComplete callback = on_complete;
    delete this;
    MxnetApi::Complete(callback, error);
  }

  std::string Describe() const {
    const char* kind = request.kind == Kind::kAllreduce   ? "allreduce"
                       : request.kind == Kind::kBroadcast ? "broadcast"
                                                          : "reducescatter";
    return std::string(kind) + " " +
           (request.group.empty() ? request.tensors.front().name : request.group);
  }

  std::vector<GroupTensor> Group() const {
    std::vector<GroupTensor> group;
    group.reserve(request.tensors.size());
    for (size_t i = 0; i < request.tensors.size(); ++i) {
      const Tensor& t = request.tensors[i];
      group.push_back(GroupTensor{t.name, inputs[i], outputs[i], t.dtype, t.shape, t.output_bytes});
    }
    return group;
  }

  std::vector<Handle> Submit(Context& context) const {
    const Tensor& t = request.tensors.front();
    switch (request.kind) {
      case Kind::kAllreduce:
        if (!request.group.empty()) {
          return context.GroupedAllreduce(request.group, Group(), request.reduce);
        }
        return {context.Allreduce(t.name, inputs[0], outputs[0], t.dtype, t.shape, request.reduce)};
      case Kind::kBroadcast: {
        OpOptions options;
        options.process_set = request.reduce.process_set;
        return {context.Broadcast(t.name, inputs[0], outputs[0], t.dtype, t.shape, request.root,
                                  options)};
      }
      case Kind::kReducescatter:
        if (!request.group.empty()) {
          return context.GroupedReducescatter(request.group, Group(), request.reduce);
        }
        return {context.ReducescatterInto(t.name, inputs[0], outputs[0], t.output_bytes, t.dtype,
                                          t.shape, request.reduce)};
    }
    return {};
  }
};

// EngineAsyncFunc: the engine runs the operation (its inputs are ready).
void Run(void* /*run_context*/, void* on_complete, void* param) {
  auto* op = static_cast<Op*>(param);
  op->on_complete = *static_cast<const OnComplete*>(on_complete);
  Context* context = g_context.load(std::memory_order_acquire);
  if (context == nullptr) {
    op->first = absl::FailedPreconditionError(
        "Troika is not initialized (hvd.init()) or was shut down before the engine ran it");
    op->Finish();
    return;
  }
  if (absl::Status s = op->ReadAddresses(); !s.ok()) {
    op->first = s;
    op->Finish();
    return;
  }
  std::vector<Handle> handles = op->Submit(*context);
  if (handles.empty()) {  // nothing was submitted: complete now (never leave the engine waiting)
    op->first = absl::InternalError("no operation was submitted");
    op->Finish();
    return;
  }
  op->left = handles.size();                           // before any callback: one may run at once
  const bool caller_waits = op->request.caller_waits;  // op may be freed by the last OnDone
  for (const Handle& h : handles) {
    h.OnDone([op](const absl::Status& status) { op->Done(status); }, caller_waits);
  }
}

}  // namespace

void BindContext(Context* context) { g_context.store(context, std::memory_order_release); }

absl::Status Push(Request request) {
  if (request.tensors.empty()) return absl::InvalidArgumentError("troika.mxnet: no tensors");
  auto op = std::make_unique<Op>();
  std::vector<void*> reads, writes;
  // The data addresses are read when the engine runs the operation, not now: an array that an
  // operation still pending creates gets its buffer when that operation runs.
  for (const Tensor& t : request.tensors) {
    void* in = nullptr;
    void* out = nullptr;
    RETURN_IF_ERROR(MxnetApi::Hold(t.input, &in));
    op->held_inputs.push_back(in);
    if (t.output == t.input) {
      out = in;
    } else {
      RETURN_IF_ERROR(MxnetApi::Hold(t.output, &out));
    }
    op->held_outputs.push_back(out);
    writes.push_back(t.output);
  }
  // The engine refuses an array named twice; an input that is also an output is a write only.
  std::sort(writes.begin(), writes.end());
  writes.erase(std::unique(writes.begin(), writes.end()), writes.end());
  for (const Tensor& t : request.tensors) {
    if (!std::binary_search(writes.begin(), writes.end(), t.input)) reads.push_back(t.input);
  }
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());

  const MxContext where = request.where;
  const int priority = request.priority;
  const char* name = request.kind == Kind::kAllreduce   ? "troika_allreduce"
                     : request.kind == Kind::kBroadcast ? "troika_broadcast"
                                                        : "troika_reducescatter";
  op->request = std::move(request);
  Op* raw = op.release();
  absl::Status pushed =
      MxnetApi::PushAsync(&Run, raw, where, reads.data(), static_cast<int>(reads.size()),
                          writes.data(), static_cast<int>(writes.size()), priority, name);
  if (!pushed.ok()) delete raw;  // the engine never took it
  return pushed;
}

}  // namespace troika::mxnet
