// The C ABI over troika::Context. No exception or C++ type crosses it.

#include "troika/c_api.h"

#include <memory>
#include <string>
#include <vector>

#include "troika/troika.h"

struct troika_context {
  std::unique_ptr<troika::Context> context;
};
struct troika_handle {
  troika::Handle handle;
};

namespace {

thread_local std::string last_error;

int Report(const absl::Status& status) {
  last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

std::vector<int64_t> Shape(const int64_t* shape, int ndim) {
  return shape != nullptr && ndim > 0 ? std::vector<int64_t>(shape, shape + ndim)
                                      : std::vector<int64_t>();
}

int Wrap(troika::Handle handle, troika_handle** out) {
  *out = new troika_handle{std::move(handle)};
  return 0;
}

int Init(const absl::StatusOr<troika::Options>& options, troika_context** out) {
  if (!options.ok()) return Report(options.status());
  auto context = troika::Context::Init(*options);
  if (!context.ok()) return Report(context.status());
  *out = new troika_context{*std::move(context)};
  return 0;
}

troika::AllreduceOptions ReduceOptions(int op, double prescale, double postscale) {
  troika::AllreduceOptions options;
  options.op = static_cast<troika::ReduceOp>(op);
  options.prescale = prescale;
  options.postscale = postscale;
  return options;
}

}  // namespace

extern "C" {

const char* troika_last_error(void) { return last_error.c_str(); }

int troika_init_from_env(troika_context** out) {
  return Init(troika::Options::FromEnvironment(), out);
}

int troika_init(const char* coordinator, const char* job, int rank, int size,
                troika_context** out) {
  troika::Options options;
  options.coordinator = coordinator != nullptr ? coordinator : "";
  options.job = job != nullptr ? job : "";
  options.rank = rank;
  options.size = size;
  if (absl::Status s = troika::Options::SecurityFromEnvironment(options); !s.ok()) {
    return Report(s);
  }
  return Init(options, out);
}

int troika_shutdown(troika_context* ctx) { return Report(ctx->context->Shutdown()); }
void troika_free(troika_context* ctx) { delete ctx; }

int troika_rank(const troika_context* ctx) { return ctx->context->rank(); }
int troika_size(const troika_context* ctx) { return ctx->context->size(); }
int troika_local_rank(const troika_context* ctx) { return ctx->context->local_rank(); }
int troika_local_size(const troika_context* ctx) { return ctx->context->local_size(); }
int troika_cross_rank(const troika_context* ctx) { return ctx->context->cross_rank(); }
int troika_cross_size(const troika_context* ctx) { return ctx->context->cross_size(); }

int troika_allreduce(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int op, double prescale, double postscale,
                     troika_handle** handle) {
  return Wrap(ctx->context->Allreduce(name, in, out, static_cast<troika::DataType>(dtype),
                                      Shape(shape, ndim), ReduceOptions(op, prescale, postscale)),
              handle);
}

int troika_allgather(troika_context* ctx, const char* name, const void* in, int dtype,
                     const int64_t* shape, int ndim, troika_handle** handle) {
  return Wrap(
      ctx->context->Allgather(name, in, static_cast<troika::DataType>(dtype), Shape(shape, ndim)),
      handle);
}

int troika_broadcast(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int root, troika_handle** handle) {
  return Wrap(ctx->context->Broadcast(name, in, out, static_cast<troika::DataType>(dtype),
                                      Shape(shape, ndim), root),
              handle);
}

int troika_alltoall(troika_context* ctx, const char* name, const void* in, int dtype,
                    const int64_t* shape, int ndim, const int64_t* splits, int nsplits,
                    troika_handle** handle) {
  return Wrap(ctx->context->Alltoall(name, in, static_cast<troika::DataType>(dtype),
                                     Shape(shape, ndim), Shape(splits, nsplits)),
              handle);
}

int troika_reducescatter(troika_context* ctx, const char* name, const void* in, int dtype,
                         const int64_t* shape, int ndim, int op, double prescale, double postscale,
                         troika_handle** handle) {
  return Wrap(
      ctx->context->Reducescatter(name, in, static_cast<troika::DataType>(dtype),
                                  Shape(shape, ndim), ReduceOptions(op, prescale, postscale)),
      handle);
}

int troika_barrier(troika_context* ctx, troika_handle** handle) {
  return Wrap(ctx->context->Barrier(), handle);
}

int troika_grouped_allreduce(troika_context* ctx, const char* group, int n, const char** names,
                             const void** ins, void** outs, const int* dtypes,
                             const int64_t** shapes, const int* ndims, int op, double prescale,
                             double postscale, troika_handle** handles) {
  std::vector<troika::GroupTensor> tensors;
  for (int i = 0; i < n; ++i) {
    tensors.push_back({names[i], ins[i], outs[i], static_cast<troika::DataType>(dtypes[i]),
                       Shape(shapes[i], ndims[i])});
  }
  std::vector<troika::Handle> out = ctx->context->GroupedAllreduce(
      group != nullptr ? group : "", tensors, ReduceOptions(op, prescale, postscale));
  for (int i = 0; i < n; ++i) Wrap(std::move(out[i]), &handles[i]);
  return 0;
}

int troika_join(troika_context* ctx, troika_handle** handle) {
  return Wrap(ctx->context->Join(), handle);
}

int troika_handle_joined_last_rank(const troika_handle* handle) {
  return handle->handle.joined_last_rank();
}

int troika_mark_step(troika_context* ctx, troika_step_timing* timing) {
  if (ctx == nullptr) return Report(absl::InvalidArgumentError("troika_mark_step: ctx is NULL"));
  const troika::StepTiming step = ctx->context->MarkStep();
  if (timing != nullptr) {
    timing->total_seconds = absl::ToDoubleSeconds(step.total);
    timing->compute_seconds = absl::ToDoubleSeconds(step.compute);
    timing->negotiation_wait_seconds = absl::ToDoubleSeconds(step.negotiation_wait);
    timing->communication_seconds = absl::ToDoubleSeconds(step.communication);
  }
  return 0;
}

int troika_handle_poll(const troika_handle* handle) { return handle->handle.Poll() ? 1 : 0; }
int troika_handle_wait(troika_handle* handle) { return Report(handle->handle.Wait()); }

const void* troika_handle_output(const troika_handle* handle, size_t* bytes) {
  if (bytes != nullptr) *bytes = handle->handle.output_bytes();
  return handle->handle.output();
}

int troika_handle_output_shape(const troika_handle* handle, int64_t* dims, int max_dims) {
  const std::vector<int64_t>& shape = handle->handle.output_shape();
  for (int i = 0; i < max_dims && i < static_cast<int>(shape.size()); ++i) dims[i] = shape[i];
  return static_cast<int>(shape.size());
}

int troika_handle_received_splits(const troika_handle* handle, int64_t* splits, int max) {
  const std::vector<int64_t>& s = handle->handle.received_splits();
  for (int i = 0; i < max && i < static_cast<int>(s.size()); ++i) splits[i] = s[i];
  return static_cast<int>(s.size());
}

void troika_handle_free(troika_handle* handle) { delete handle; }

}  // extern "C"
