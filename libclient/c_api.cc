// The C ABI over troika::Context. No exception or C++ type crosses it: every entry point
// checks what C++ cannot (NULL contexts, handles, names, shapes and out-parameters) and runs
// its body under Guard, which turns any exception into INTERNAL with a message. Buffers are
// checked by the C++ layer (an operation's handle fails with INVALID_ARGUMENT).

#include "troika/c_api.h"

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "troika/troika.h"

struct troika_context {
  std::unique_ptr<troika::Context> context;
};
struct troika_handle {
  troika::Handle handle;
};

namespace {

thread_local std::string last_error;

// Records `status`'s message for troika_last_error(); returns its code. Never throws.
int Report(const absl::Status& status) noexcept {
  try {
    last_error.assign(status.message().data(), status.message().size());
  } catch (...) {
    last_error.clear();  // out of memory: no message rather than an exception
  }
  return static_cast<int>(status.code());
}

int Invalid(const std::string& what) { return Report(absl::InvalidArgumentError(what)); }

// Runs `body`; an exception escaping it is reported as INTERNAL naming `fn`, and
// `error_value` returned.
template <typename T, typename F>
T GuardOr(const char* fn, T error_value, F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      Report(absl::InternalError(absl::StrCat(fn, ": unexpected exception: ", e.what())));
    } catch (...) {
      Report(absl::InternalError("unexpected exception"));
    }
  } catch (...) {
    Report(absl::InternalError("unexpected exception"));
  }
  return error_value;
}

// For entry points that return a status code.
template <typename F>
int Guard(const char* fn, F&& body) noexcept {
  return GuardOr<int>(fn, static_cast<int>(absl::StatusCode::kInternal), std::forward<F>(body));
}

// `fn` and, if known, the tensor: the prefix of a message.
std::string What(const char* fn, const char* name) {
  return name != nullptr ? absl::StrCat(fn, " '", name, "'") : std::string(fn);
}

// The dims of `shape` (`ndim` of them; 0: a scalar). INVALID_ARGUMENT for a negative ndim,
// or a NULL shape with dims. `what` names the array ("shape", "splits").
absl::StatusOr<std::vector<int64_t>> Dims(const std::string& prefix, const char* what,
                                          const char* count, const int64_t* shape, int ndim) {
  if (ndim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": ", count, " is ", ndim, "; it must be >= 0"));
  }
  if (ndim > 0 && shape == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": ", what, " is NULL but ", count, " is ", ndim));
  }
  return std::vector<int64_t>(shape, shape + ndim);
}

// The checks every operation shares: ctx, the handle out-parameter (*handle is set to NULL
// first, so a failed call leaves no stale pointer) and, if `named`, the name.
int CheckOp(const char* fn, const troika_context* ctx, const char* name, troika_handle** handle,
            bool named = true) {
  if (handle != nullptr) *handle = nullptr;
  if (ctx == nullptr) return Invalid(absl::StrCat(What(fn, name), ": ctx is NULL"));
  if (handle == nullptr) {
    return Invalid(absl::StrCat(What(fn, name), ": handle (the out-parameter) is NULL"));
  }
  if (named && name == nullptr) return Invalid(absl::StrCat(fn, ": name is NULL"));
  return 0;
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

// The value of a context query, or -1 (INVALID_ARGUMENT) for a NULL ctx.
template <typename F>
int Query(const char* fn, const troika_context* ctx, F&& get) noexcept {
  return GuardOr<int>(fn, -1, [&] {
    if (ctx == nullptr) {
      Invalid(absl::StrCat(fn, ": ctx is NULL"));
      return -1;
    }
    return get(*ctx->context);
  });
}

// Copies up to `max` of `values` to `out`; returns values.size(), or -1 (INVALID_ARGUMENT)
// for a NULL handle, a negative max or a NULL out with max > 0.
int CopyOut(const char* fn, const troika_handle* handle,
            const std::vector<int64_t>& (*get)(const troika::Handle&), int64_t* out,
            int max) noexcept {
  return GuardOr<int>(fn, -1, [&] {
    if (handle == nullptr) return Invalid(absl::StrCat(fn, ": handle is NULL")), -1;
    if (max < 0) return Invalid(absl::StrCat(fn, ": max is ", max, "; it must be >= 0")), -1;
    if (max > 0 && out == nullptr) {
      return Invalid(absl::StrCat(fn, ": the output array is NULL but max is ", max)), -1;
    }
    const std::vector<int64_t>& values = get(handle->handle);
    for (int i = 0; i < max && i < static_cast<int>(values.size()); ++i) out[i] = values[i];
    return static_cast<int>(values.size());
  });
}

}  // namespace

extern "C" {

const char* troika_last_error(void) { return last_error.c_str(); }

int troika_init_from_env(troika_context** out) {
  return Guard("troika_init_from_env", [&] {
    if (out == nullptr) return Invalid("troika_init_from_env: out is NULL");
    *out = nullptr;
    return Init(troika::Options::FromEnvironment(), out);
  });
}

int troika_init(const char* coordinator, const char* job, int rank, int size,
                troika_context** out) {
  return Guard("troika_init", [&] {
    if (out == nullptr) return Invalid("troika_init: out is NULL");
    *out = nullptr;
    if (coordinator == nullptr) return Invalid("troika_init: coordinator is NULL");
    if (job == nullptr) return Invalid("troika_init: job is NULL");
    troika::Options options;
    options.coordinator = coordinator;
    options.job = job;
    options.rank = rank;
    options.size = size;
    if (absl::Status s = troika::Options::SecurityFromEnvironment(options); !s.ok()) {
      return Report(s);
    }
    return Init(options, out);
  });
}

int troika_shutdown(troika_context* ctx) {
  return Guard("troika_shutdown", [&] {
    if (ctx == nullptr) return Invalid("troika_shutdown: ctx is NULL");
    return Report(ctx->context->Shutdown());
  });
}
void troika_free(troika_context* ctx) { delete ctx; }

int troika_rank(const troika_context* ctx) {
  return Query("troika_rank", ctx, [](const troika::Context& c) { return c.rank(); });
}
int troika_size(const troika_context* ctx) {
  return Query("troika_size", ctx, [](const troika::Context& c) { return c.size(); });
}
int troika_local_rank(const troika_context* ctx) {
  return Query("troika_local_rank", ctx, [](const troika::Context& c) { return c.local_rank(); });
}
int troika_local_size(const troika_context* ctx) {
  return Query("troika_local_size", ctx, [](const troika::Context& c) { return c.local_size(); });
}
int troika_cross_rank(const troika_context* ctx) {
  return Query("troika_cross_rank", ctx, [](const troika::Context& c) { return c.cross_rank(); });
}
int troika_cross_size(const troika_context* ctx) {
  return Query("troika_cross_size", ctx, [](const troika::Context& c) { return c.cross_size(); });
}

int troika_allreduce(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int op, double prescale, double postscale,
                     troika_handle** handle) {
  constexpr char kFn[] = "troika_allreduce";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    return Wrap(ctx->context->Allreduce(name, in, out, static_cast<troika::DataType>(dtype),
                                        *std::move(dims), ReduceOptions(op, prescale, postscale)),
                handle);
  });
}

int troika_allgather(troika_context* ctx, const char* name, const void* in, int dtype,
                     const int64_t* shape, int ndim, troika_handle** handle) {
  constexpr char kFn[] = "troika_allgather";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    return Wrap(
        ctx->context->Allgather(name, in, static_cast<troika::DataType>(dtype), *std::move(dims)),
        handle);
  });
}

int troika_broadcast(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int root, troika_handle** handle) {
  constexpr char kFn[] = "troika_broadcast";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    return Wrap(ctx->context->Broadcast(name, in, out, static_cast<troika::DataType>(dtype),
                                        *std::move(dims), root),
                handle);
  });
}

int troika_alltoall(troika_context* ctx, const char* name, const void* in, int dtype,
                    const int64_t* shape, int ndim, const int64_t* splits, int nsplits,
                    troika_handle** handle) {
  constexpr char kFn[] = "troika_alltoall";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    auto split_list = Dims(What(kFn, name), "splits", "nsplits", splits, nsplits);
    if (!split_list.ok()) return Report(split_list.status());
    return Wrap(ctx->context->Alltoall(name, in, static_cast<troika::DataType>(dtype),
                                       *std::move(dims), *std::move(split_list)),
                handle);
  });
}

int troika_reducescatter(troika_context* ctx, const char* name, const void* in, int dtype,
                         const int64_t* shape, int ndim, int op, double prescale, double postscale,
                         troika_handle** handle) {
  constexpr char kFn[] = "troika_reducescatter";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    return Wrap(
        ctx->context->Reducescatter(name, in, static_cast<troika::DataType>(dtype),
                                    *std::move(dims), ReduceOptions(op, prescale, postscale)),
        handle);
  });
}

int troika_allgather_into(troika_context* ctx, const char* name, const void* in, void* out,
                          size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                          troika_handle** handle) {
  constexpr char kFn[] = "troika_allgather_into";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    return Wrap(ctx->context->AllgatherInto(name, in, out, out_bytes,
                                            static_cast<troika::DataType>(dtype), *std::move(dims)),
                handle);
  });
}

int troika_alltoall_into(troika_context* ctx, const char* name, const void* in, void* out,
                         size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                         const int64_t* splits, int nsplits, troika_handle** handle) {
  constexpr char kFn[] = "troika_alltoall_into";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    auto split_list = Dims(What(kFn, name), "splits", "nsplits", splits, nsplits);
    if (!split_list.ok()) return Report(split_list.status());
    return Wrap(
        ctx->context->AlltoallInto(name, in, out, out_bytes, static_cast<troika::DataType>(dtype),
                                   *std::move(dims), *std::move(split_list)),
        handle);
  });
}

int troika_reducescatter_into(troika_context* ctx, const char* name, const void* in, void* out,
                              size_t out_bytes, int dtype, const int64_t* shape, int ndim, int op,
                              double prescale, double postscale, troika_handle** handle) {
  constexpr char kFn[] = "troika_reducescatter_into";
  return Guard(kFn, [&] {
    if (int code = CheckOp(kFn, ctx, name, handle); code != 0) return code;
    auto dims = Dims(What(kFn, name), "shape", "ndim", shape, ndim);
    if (!dims.ok()) return Report(dims.status());
    return Wrap(ctx->context->ReducescatterInto(
                    name, in, out, out_bytes, static_cast<troika::DataType>(dtype),
                    *std::move(dims), ReduceOptions(op, prescale, postscale)),
                handle);
  });
}

int troika_barrier(troika_context* ctx, troika_handle** handle) {
  return Guard("troika_barrier", [&] {
    if (int code = CheckOp("troika_barrier", ctx, nullptr, handle, false); code != 0) return code;
    return Wrap(ctx->context->Barrier(), handle);
  });
}

int troika_grouped_allreduce(troika_context* ctx, const char* group, int n, const char** names,
                             const void** ins, void** outs, const int* dtypes,
                             const int64_t** shapes, const int* ndims, int op, double prescale,
                             double postscale, troika_handle** handles) {
  constexpr char kFn[] = "troika_grouped_allreduce";
  return Guard(kFn, [&] {
    if (handles != nullptr) {
      for (int i = 0; i < n; ++i) handles[i] = nullptr;
    }
    const std::string prefix = What(kFn, group);
    if (ctx == nullptr) return Invalid(absl::StrCat(prefix, ": ctx is NULL"));
    if (group == nullptr) return Invalid(absl::StrCat(kFn, ": group is NULL"));
    if (n < 0) return Invalid(absl::StrCat(prefix, ": n is ", n, "; it must be >= 0"));
    if (n > 0) {
      const std::pair<const void*, const char*> arrays[] = {
          {names, "names"},   {ins, "ins"},     {outs, "outs"},      {dtypes, "dtypes"},
          {shapes, "shapes"}, {ndims, "ndims"}, {handles, "handles"}};
      for (const auto& [array, what] : arrays) {
        if (array == nullptr) {
          return Invalid(absl::StrCat(prefix, ": ", what, " is NULL but n is ", n));
        }
      }
    }
    std::vector<troika::GroupTensor> tensors;
    for (int i = 0; i < n; ++i) {
      if (names[i] == nullptr) return Invalid(absl::StrCat(prefix, ": names[", i, "] is NULL"));
      auto dims = Dims(absl::StrCat(prefix, ", tensor '", names[i], "'"), "shape", "ndim",
                       shapes[i], ndims[i]);
      if (!dims.ok()) return Report(dims.status());
      tensors.push_back(
          {names[i], ins[i], outs[i], static_cast<troika::DataType>(dtypes[i]), *std::move(dims)});
    }
    std::vector<troika::Handle> out =
        ctx->context->GroupedAllreduce(group, tensors, ReduceOptions(op, prescale, postscale));
    for (int i = 0; i < n; ++i) Wrap(std::move(out[i]), &handles[i]);
    return 0;
  });
}

int troika_join(troika_context* ctx, troika_handle** handle) {
  return Guard("troika_join", [&] {
    if (int code = CheckOp("troika_join", ctx, nullptr, handle, false); code != 0) return code;
    return Wrap(ctx->context->Join(), handle);
  });
}

int troika_handle_joined_last_rank(const troika_handle* handle) {
  return GuardOr<int>("troika_handle_joined_last_rank", -1, [&] {
    if (handle == nullptr) return Invalid("troika_handle_joined_last_rank: handle is NULL"), -1;
    return handle->handle.joined_last_rank();
  });
}

int troika_mark_step(troika_context* ctx, troika_step_timing* timing) {
  return Guard("troika_mark_step", [&] {
    if (ctx == nullptr) return Invalid("troika_mark_step: ctx is NULL");
    const troika::StepTiming step = ctx->context->MarkStep();
    if (timing != nullptr) {
      timing->total_seconds = absl::ToDoubleSeconds(step.total);
      timing->compute_seconds = absl::ToDoubleSeconds(step.compute);
      timing->negotiation_wait_seconds = absl::ToDoubleSeconds(step.negotiation_wait);
      timing->communication_seconds = absl::ToDoubleSeconds(step.communication);
    }
    return 0;
  });
}

int troika_handle_poll(const troika_handle* handle) {
  return GuardOr<int>("troika_handle_poll", -1, [&] {
    if (handle == nullptr) return Invalid("troika_handle_poll: handle is NULL"), -1;
    return handle->handle.Poll() ? 1 : 0;
  });
}

int troika_handle_wait(troika_handle* handle) {
  return Guard("troika_handle_wait", [&] {
    if (handle == nullptr) return Invalid("troika_handle_wait: handle is NULL");
    return Report(handle->handle.Wait());
  });
}

const void* troika_handle_output(const troika_handle* handle, size_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return GuardOr<const void*>("troika_handle_output", nullptr, [&]() -> const void* {
    if (handle == nullptr) {
      Invalid("troika_handle_output: handle is NULL");
      return nullptr;
    }
    if (bytes != nullptr) *bytes = handle->handle.output_bytes();
    return handle->handle.output();
  });
}

int troika_handle_output_shape(const troika_handle* handle, int64_t* dims, int max_dims) {
  return CopyOut(
      "troika_handle_output_shape", handle,
      [](const troika::Handle& h) -> const std::vector<int64_t>& { return h.output_shape(); }, dims,
      max_dims);
}

int troika_handle_received_splits(const troika_handle* handle, int64_t* splits, int max) {
  return CopyOut(
      "troika_handle_received_splits", handle,
      [](const troika::Handle& h) -> const std::vector<int64_t>& { return h.received_splits(); },
      splits, max);
}

void troika_handle_free(troika_handle* handle) { delete handle; }

}  // extern "C"
