// The C ABI over troika::Context. No exception or C++ type crosses it: every entry point
// runs its body in Call, which records a failure for troika_last_error() and turns it (and
// any exception, as INTERNAL) into the entry point's error value; operations run in Submit,
// which also checks ctx, the handle out-parameter and the name, and hands out the handle.
// Bodies check what C++ cannot (NULL contexts, handles, names, shapes and out-parameters);
// buffers are checked by the C++ layer (an operation's handle fails with INVALID_ARGUMENT).

#include "troika/c_api.h"

#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "troika/troika.h"

struct troika_context {
  std::unique_ptr<troika::Context> context;
};
struct troika_handle {
  troika::Handle handle;
};

namespace {

thread_local std::string last_error;

// Records `status`'s message for troika_last_error() ("" if OK); returns its code. Never
// throws.
int Report(const absl::Status& status) noexcept {
  try {
    last_error.assign(status.message().data(), status.message().size());
  } catch (...) {
    last_error.clear();  // out of memory: no message rather than an exception
  }
  return static_cast<int>(status.code());
}

// The error value of entry points that return a status code: the failure's code.
struct StatusCodeOnError {};
constexpr StatusCodeOnError kCode{};

template <typename T>
T ErrorValue(T error_value, const absl::Status& /*failure*/) {
  return error_value;
}
int ErrorValue(StatusCodeOnError, const absl::Status& failure) {
  return static_cast<int>(failure.code());
}

// The frame of every entry point. Runs `body`, which returns absl::StatusOr<T>, T being
// what the entry point returns: its value on success. A failure (a refused argument, a
// failed call) is recorded for troika_last_error() and the entry point returns
// `error_value` (-1, NULL), or with kCode the failure's code. An exception escaping `body`
// is such a failure, INTERNAL naming `fn`: nothing crosses the ABI.
template <typename E, typename F>
auto Call(const char* fn, E error_value, F&& body) noexcept ->
    typename std::invoke_result_t<F&>::value_type {
  absl::Status failure;
  try {
    auto result = body();
    if (result.ok()) return *std::move(result);
    failure = std::move(result).status();
  } catch (const std::exception& e) {
    try {
      failure = absl::InternalError(absl::StrCat(fn, ": unexpected exception: ", e.what()));
    } catch (...) {
      failure = absl::InternalError("unexpected exception");
    }
  } catch (...) {
    failure = absl::InternalError("unexpected exception");
  }
  Report(failure);
  return ErrorValue(error_value, failure);
}

// INVALID_ARGUMENT "<prefix>: <what> is NULL" if `pointer` is NULL.
absl::Status Required(absl::string_view prefix, const void* pointer, absl::string_view what) {
  if (pointer != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(prefix, ": ", what, " is NULL"));
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

// The frame of every operation: checks ctx, the handle out-parameter (*handle is set to NULL
// first, so a failed call leaves no stale pointer), if `named` the name, and the shape; then
// runs `submit(context, dims)`, which returns the operation's handle (or an argument it
// refused), and hands that handle out.
template <typename F>
int Submit(const char* fn, troika_context* ctx, const char* name, const int64_t* shape, int ndim,
           troika_handle** handle, F&& submit, bool named = true) noexcept {
  return Call(fn, kCode, [&]() -> absl::StatusOr<int> {
    if (handle != nullptr) *handle = nullptr;
    const std::string what = What(fn, name);
    RETURN_IF_ERROR(Required(what, ctx, "ctx"));
    RETURN_IF_ERROR(Required(what, handle, "handle (the out-parameter)"));
    if (named) RETURN_IF_ERROR(Required(fn, name, "name"));
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, Dims(what, "shape", "ndim", shape, ndim));
    absl::StatusOr<troika::Handle> submitted = submit(*ctx->context, std::move(dims));
    RETURN_IF_ERROR(submitted.status());
    *handle = new troika_handle{*std::move(submitted)};
    return 0;
  });
}

// Alltoall's splits.
absl::StatusOr<std::vector<int64_t>> Splits(const char* fn, const char* name, const int64_t* splits,
                                            int nsplits) {
  return Dims(What(fn, name), "splits", "nsplits", splits, nsplits);
}

absl::StatusOr<int> Init(const absl::StatusOr<troika::Options>& options, troika_context** out) {
  RETURN_IF_ERROR(options.status());
  ASSIGN_OR_RETURN(std::unique_ptr<troika::Context> context, troika::Context::Init(*options));
  *out = new troika_context{std::move(context)};
  return 0;
}

troika::AllreduceOptions ReduceOptions(int op, double prescale, double postscale) {
  troika::AllreduceOptions options;
  options.op = static_cast<troika::ReduceOp>(op);
  options.prescale = prescale;
  options.postscale = postscale;
  return options;
}

troika::DataType Type(int dtype) { return static_cast<troika::DataType>(dtype); }

// The value of a context query, or -1 (INVALID_ARGUMENT) for a NULL ctx.
int Query(const char* fn, const troika_context* ctx, int (troika::Context::*get)() const) noexcept {
  return Call(fn, -1, [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Required(fn, ctx, "ctx"));
    return (ctx->context.get()->*get)();
  });
}

// The value of a handle query, or `error_value` (INVALID_ARGUMENT) for a NULL handle.
template <typename T, typename F>
T HandleQuery(const char* fn, const troika_handle* handle, T error_value, F&& get) noexcept {
  return Call(fn, error_value, [&]() -> absl::StatusOr<T> {
    RETURN_IF_ERROR(Required(fn, handle, "handle"));
    return get(handle->handle);
  });
}

// Copies up to `max` of `values` to `out`; returns values.size(), or -1 (INVALID_ARGUMENT)
// for a NULL handle, a negative max or a NULL out with max > 0.
int CopyOut(const char* fn, const troika_handle* handle,
            const std::vector<int64_t>& (*get)(const troika::Handle&), int64_t* out,
            int max) noexcept {
  return HandleQuery(fn, handle, -1, [&](const troika::Handle& h) -> absl::StatusOr<int> {
    if (max < 0) {
      return absl::InvalidArgumentError(absl::StrCat(fn, ": max is ", max, "; it must be >= 0"));
    }
    if (max > 0 && out == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": the output array is NULL but max is ", max));
    }
    const std::vector<int64_t>& values = get(h);
    for (int i = 0; i < max && i < static_cast<int>(values.size()); ++i) out[i] = values[i];
    return static_cast<int>(values.size());
  });
}

}  // namespace

extern "C" {

const char* troika_last_error(void) { return last_error.c_str(); }

int troika_init_from_env(troika_context** out) {
  constexpr char kFn[] = "troika_init_from_env";
  return Call(kFn, kCode, [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Required(kFn, out, "out"));
    *out = nullptr;
    return Init(troika::Options::FromEnvironment(), out);
  });
}

int troika_init(const char* coordinator, const char* job, int rank, int size,
                troika_context** out) {
  constexpr char kFn[] = "troika_init";
  return Call(kFn, kCode, [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Required(kFn, out, "out"));
    *out = nullptr;
    RETURN_IF_ERROR(Required(kFn, coordinator, "coordinator"));
    RETURN_IF_ERROR(Required(kFn, job, "job"));
    troika::Options options;
    options.coordinator = coordinator;
    options.job = job;
    options.rank = rank;
    options.size = size;
    RETURN_IF_ERROR(troika::Options::SecurityFromEnvironment(options));
    return Init(options, out);
  });
}

int troika_shutdown(troika_context* ctx) {
  constexpr char kFn[] = "troika_shutdown";
  return Call(kFn, kCode, [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Required(kFn, ctx, "ctx"));
    return Report(ctx->context->Shutdown());
  });
}
void troika_free(troika_context* ctx) { delete ctx; }

int troika_rank(const troika_context* ctx) {
  return Query("troika_rank", ctx, &troika::Context::rank);
}
int troika_size(const troika_context* ctx) {
  return Query("troika_size", ctx, &troika::Context::size);
}
int troika_local_rank(const troika_context* ctx) {
  return Query("troika_local_rank", ctx, &troika::Context::local_rank);
}
int troika_local_size(const troika_context* ctx) {
  return Query("troika_local_size", ctx, &troika::Context::local_size);
}
int troika_cross_rank(const troika_context* ctx) {
  return Query("troika_cross_rank", ctx, &troika::Context::cross_rank);
}
int troika_cross_size(const troika_context* ctx) {
  return Query("troika_cross_size", ctx, &troika::Context::cross_size);
}

int troika_allreduce(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int op, double prescale, double postscale,
                     troika_handle** handle) {
  return Submit("troika_allreduce", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.Allreduce(name, in, out, Type(dtype), std::move(dims),
                                     ReduceOptions(op, prescale, postscale));
                });
}

int troika_allgather(troika_context* ctx, const char* name, const void* in, int dtype,
                     const int64_t* shape, int ndim, troika_handle** handle) {
  return Submit("troika_allgather", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.Allgather(name, in, Type(dtype), std::move(dims));
                });
}

int troika_broadcast(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int root, troika_handle** handle) {
  return Submit("troika_broadcast", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.Broadcast(name, in, out, Type(dtype), std::move(dims), root);
                });
}

int troika_alltoall(troika_context* ctx, const char* name, const void* in, int dtype,
                    const int64_t* shape, int ndim, const int64_t* splits, int nsplits,
                    troika_handle** handle) {
  constexpr char kFn[] = "troika_alltoall";
  return Submit(
      kFn, ctx, name, shape, ndim, handle,
      [&](troika::Context& c, std::vector<int64_t> dims) -> absl::StatusOr<troika::Handle> {
        ASSIGN_OR_RETURN(std::vector<int64_t> split_list, Splits(kFn, name, splits, nsplits));
        return c.Alltoall(name, in, Type(dtype), std::move(dims), std::move(split_list));
      });
}

int troika_reducescatter(troika_context* ctx, const char* name, const void* in, int dtype,
                         const int64_t* shape, int ndim, int op, double prescale, double postscale,
                         troika_handle** handle) {
  return Submit("troika_reducescatter", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.Reducescatter(name, in, Type(dtype), std::move(dims),
                                         ReduceOptions(op, prescale, postscale));
                });
}

int troika_allgather_into(troika_context* ctx, const char* name, const void* in, void* out,
                          size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                          troika_handle** handle) {
  return Submit("troika_allgather_into", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.AllgatherInto(name, in, out, out_bytes, Type(dtype), std::move(dims));
                });
}

int troika_allgather_into_or_owned(troika_context* ctx, const char* name, const void* in, void* out,
                                   size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                                   troika_handle** handle) {
  return Submit("troika_allgather_into_or_owned", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.AllgatherInto(name, in, out, out_bytes, Type(dtype), std::move(dims),
                                         {.handle_owned_if_too_small = true});
                });
}

int troika_alltoall_into(troika_context* ctx, const char* name, const void* in, void* out,
                         size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                         const int64_t* splits, int nsplits, troika_handle** handle) {
  constexpr char kFn[] = "troika_alltoall_into";
  return Submit(
      kFn, ctx, name, shape, ndim, handle,
      [&](troika::Context& c, std::vector<int64_t> dims) -> absl::StatusOr<troika::Handle> {
        ASSIGN_OR_RETURN(std::vector<int64_t> split_list, Splits(kFn, name, splits, nsplits));
        return c.AlltoallInto(name, in, out, out_bytes, Type(dtype), std::move(dims),
                              std::move(split_list));
      });
}

int troika_reducescatter_into(troika_context* ctx, const char* name, const void* in, void* out,
                              size_t out_bytes, int dtype, const int64_t* shape, int ndim, int op,
                              double prescale, double postscale, troika_handle** handle) {
  return Submit("troika_reducescatter_into", ctx, name, shape, ndim, handle,
                [&](troika::Context& c, std::vector<int64_t> dims) {
                  return c.ReducescatterInto(name, in, out, out_bytes, Type(dtype), std::move(dims),
                                             ReduceOptions(op, prescale, postscale));
                });
}

int troika_barrier(troika_context* ctx, troika_handle** handle) {
  return Submit(
      "troika_barrier", ctx, /*name=*/nullptr, /*shape=*/nullptr, /*ndim=*/0, handle,
      [](troika::Context& c, std::vector<int64_t>) { return c.Barrier(); }, /*named=*/false);
}

int troika_grouped_allreduce(troika_context* ctx, const char* group, int n, const char** names,
                             const void** ins, void** outs, const int* dtypes,
                             const int64_t** shapes, const int* ndims, int op, double prescale,
                             double postscale, troika_handle** handles) {
  constexpr char kFn[] = "troika_grouped_allreduce";
  return Call(kFn, kCode, [&]() -> absl::StatusOr<int> {
    if (handles != nullptr) {
      for (int i = 0; i < n; ++i) handles[i] = nullptr;
    }
    const std::string prefix = What(kFn, group);
    RETURN_IF_ERROR(Required(prefix, ctx, "ctx"));
    RETURN_IF_ERROR(Required(kFn, group, "group"));
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ": n is ", n, "; it must be >= 0"));
    }
    if (n > 0) {
      const std::pair<const void*, const char*> arrays[] = {
          {names, "names"},   {ins, "ins"},     {outs, "outs"},      {dtypes, "dtypes"},
          {shapes, "shapes"}, {ndims, "ndims"}, {handles, "handles"}};
      for (const auto& [array, what] : arrays) {
        if (array == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat(prefix, ": ", what, " is NULL but n is ", n));
        }
      }
    }
    std::vector<troika::GroupTensor> tensors;
    for (int i = 0; i < n; ++i) {
      if (names[i] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(prefix, ": names[", i, "] is NULL"));
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                       Dims(absl::StrCat(prefix, ", tensor '", names[i], "'"), "shape", "ndim",
                            shapes[i], ndims[i]));
      tensors.push_back({names[i], ins[i], outs[i], Type(dtypes[i]), std::move(dims)});
    }
    std::vector<troika::Handle> out =
        ctx->context->GroupedAllreduce(group, tensors, ReduceOptions(op, prescale, postscale));
    for (int i = 0; i < n; ++i) handles[i] = new troika_handle{std::move(out[i])};
    return 0;
  });
}

int troika_join(troika_context* ctx, troika_handle** handle) {
  return Submit(
      "troika_join", ctx, /*name=*/nullptr, /*shape=*/nullptr, /*ndim=*/0, handle,
      [](troika::Context& c, std::vector<int64_t>) { return c.Join(); }, /*named=*/false);
}

int troika_handle_joined_last_rank(const troika_handle* handle) {
  return HandleQuery("troika_handle_joined_last_rank", handle, -1,
                     [](const troika::Handle& h) { return h.joined_last_rank(); });
}

int troika_mark_step(troika_context* ctx, troika_step_timing* timing) {
  constexpr char kFn[] = "troika_mark_step";
  return Call(kFn, kCode, [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Required(kFn, ctx, "ctx"));
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
  return HandleQuery("troika_handle_poll", handle, -1,
                     [](const troika::Handle& h) { return h.Poll() ? 1 : 0; });
}

// Records the operation's status even when OK (troika_last_error() is then ""), as
// troika_shutdown does.
int troika_handle_wait(troika_handle* handle) {
  constexpr char kFn[] = "troika_handle_wait";
  return Call(kFn, kCode, [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Required(kFn, handle, "handle"));
    return Report(handle->handle.Wait());
  });
}

const void* troika_handle_output(const troika_handle* handle, size_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return HandleQuery("troika_handle_output", handle, static_cast<const void*>(nullptr),
                     [&](const troika::Handle& h) {
                       if (bytes != nullptr) *bytes = h.output_bytes();
                       return h.output();
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
