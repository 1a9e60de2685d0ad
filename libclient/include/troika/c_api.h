/* libtroika's C ABI, for bindings in other languages. Mirrors troika/troika.h.
 *
 * Conventions: functions return 0 on success or a canonical status code (the values of
 * absl::StatusCode / google.rpc.Code, e.g. 3 INVALID_ARGUMENT, 10 ABORTED, 13 INTERNAL); on
 * failure troika_last_error() gives the message on the calling thread. Handles and contexts are
 * owned by the caller and freed with troika_handle_free / troika_free. Thread-safe as the C++
 * API.
 *
 * Arguments are checked; nothing here crashes on a NULL or negative one, and no C++ exception
 * crosses the ABI (an unexpected one is returned as INTERNAL with its message):
 *  - A NULL context, handle, name, group or out-parameter (`out`, `handle`, `handles`) is
 *    INVALID_ARGUMENT (3) with a message naming the function and, where known, the tensor.
 *    Functions that return a value rather than a code return a documented error value
 *    instead (-1, or NULL), with the message in troika_last_error().
 *  - A shape is `ndim` dims at `shape`: ndim == 0 is a scalar (shape may then be NULL);
 *    ndim < 0, or shape == NULL with ndim > 0, is INVALID_ARGUMENT. Alltoall's splits and the
 *    arrays of troika_grouped_allreduce are checked the same way.
 *  - Buffers are checked when the operation is submitted, as in the C++ API: a NULL input of
 *    a tensor with elements (except a broadcast's input on a non-root rank, which is never
 *    read), or a NULL output of an allreduce or broadcast with elements, fails the operation:
 *    the call returns 0 and a handle whose wait returns INVALID_ARGUMENT naming the op and the
 *    tensor. Such a local failure happens on this rank only: a rank that did submit the
 *    tensor waits for it.
 *  - Enum arguments (dtype, op) and values (root, splits) are checked as in the C++ API (the
 *    handle fails with INVALID_ARGUMENT).
 * A call that fails with a code writes no handle: *handle (handles[i]) is set to NULL when the
 * pointer itself is not NULL. */
#ifndef TROIKA_C_API_H_
#define TROIKA_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troika_context troika_context;
typedef struct troika_handle troika_handle;

/* Same values as troika::DataType and troika::ReduceOp. */
enum troika_dtype {
  TROIKA_UINT8 = 0,
  TROIKA_INT8 = 1,
  TROIKA_INT32 = 2,
  TROIKA_INT64 = 3,
  TROIKA_FLOAT16 = 4,
  TROIKA_BFLOAT16 = 5,
  TROIKA_FLOAT32 = 6,
  TROIKA_FLOAT64 = 7,
  TROIKA_INT16 = 8,
  TROIKA_UINT16 = 9,
  TROIKA_BOOL = 10 /* one byte: 0 false, else true; reduce ops as troika::ReduceOp documents */
};
enum troika_reduce_op {
  TROIKA_SUM = 0,
  TROIKA_AVERAGE = 1,
  TROIKA_MIN = 2,
  TROIKA_MAX = 3,
  TROIKA_PRODUCT = 4
};

/* The message of the last failed call on this thread ("" if none). */
const char* troika_last_error(void);

/* Joins the job described by the TROIKA_* environment variables. *out is NULL on failure. */
int troika_init_from_env(troika_context** out);
/* Joins `job` at `coordinator` as `rank` of `size` with the Gloo data plane; security
 * settings come from the environment (troika::Options::SecurityFromEnvironment). NULL
 * coordinator, job or out: INVALID_ARGUMENT. *out is NULL on failure. */
int troika_init(const char* coordinator, const char* job, int rank, int size, troika_context** out);
/* Leaves the job (see troika::Context::Shutdown). */
int troika_shutdown(troika_context* ctx);
/* Shuts down if needed and frees the context; NULL: nothing. */
void troika_free(troika_context* ctx);

/* The context's membership; -1 (INVALID_ARGUMENT in troika_last_error) if ctx is NULL. */
int troika_rank(const troika_context* ctx);
int troika_size(const troika_context* ctx);
int troika_local_rank(const troika_context* ctx);
int troika_local_size(const troika_context* ctx);
int troika_cross_rank(const troika_context* ctx);
int troika_cross_size(const troika_context* ctx);

/* Asynchronous operations: on success *out is a new handle (also for an operation that
 * failed at once: its wait returns the error). */
int troika_allreduce(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int op, double prescale, double postscale,
                     troika_handle** handle);
int troika_allgather(troika_context* ctx, const char* name, const void* in, int dtype,
                     const int64_t* shape, int ndim, troika_handle** handle);
int troika_broadcast(troika_context* ctx, const char* name, const void* in, void* out, int dtype,
                     const int64_t* shape, int ndim, int root, troika_handle** handle);
/* splits: nsplits == size entries, or NULL/0 for an even split. */
int troika_alltoall(troika_context* ctx, const char* name, const void* in, int dtype,
                    const int64_t* shape, int ndim, const int64_t* splits, int nsplits,
                    troika_handle** handle);
int troika_reducescatter(troika_context* ctx, const char* name, const void* in, int dtype,
                         const int64_t* shape, int ndim, int op, double prescale, double postscale,
                         troika_handle** handle);
/* The same three writing the result into the caller's `out` of `out_bytes` bytes (host memory;
 * NULL only with 0 bytes) instead of a handle-owned buffer: Context::AllgatherInto,
 * AlltoallInto, ReducescatterInto. troika_handle_output then returns `out` and the result's
 * size. A result that does not fit fails the handle with OUT_OF_RANGE (11) naming the bytes
 * needed and given; this rank still took part in the collective (troika/troika.h says why),
 * so the other ranks and later operations go on. */
int troika_allgather_into(troika_context* ctx, const char* name, const void* in, void* out,
                          size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                          troika_handle** handle);
/* troika_allgather_into, but a result larger than `out_bytes` is handle-owned instead of
 * failing (OpOptions::handle_owned_if_too_small): the handle succeeds, and
 * troika_handle_output returns that buffer rather than `out`. */
int troika_allgather_into_or_owned(troika_context* ctx, const char* name, const void* in, void* out,
                                   size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                                   troika_handle** handle);
int troika_alltoall_into(troika_context* ctx, const char* name, const void* in, void* out,
                         size_t out_bytes, int dtype, const int64_t* shape, int ndim,
                         const int64_t* splits, int nsplits, troika_handle** handle);
int troika_reducescatter_into(troika_context* ctx, const char* name, const void* in, void* out,
                              size_t out_bytes, int dtype, const int64_t* shape, int ndim, int op,
                              double prescale, double postscale, troika_handle** handle);
int troika_barrier(troika_context* ctx, troika_handle** handle);
/* Context::GroupedAllreduce over n tensors: tensor i is names[i], ins[i], outs[i], dtypes[i],
 * shapes[i] (ndims[i] dims). Writes n handles to handles[] (each freed on its own). n < 0, a
 * NULL array with n > 0, or a NULL names[i]: INVALID_ARGUMENT and no handle (a NULL ins[i] or
 * outs[i] is a buffer, checked as above: every handle of the group fails). */
int troika_grouped_allreduce(troika_context* ctx, const char* group, int n, const char** names,
                             const void** ins, void** outs, const int* dtypes,
                             const int64_t** shapes, const int* ndims, int op, double prescale,
                             double postscale, troika_handle** handles);
/* Context::Join: this rank is out of data. After the handle's wait succeeds,
 * troika_handle_joined_last_rank gives the last rank to join. */
int troika_join(troika_context* ctx, troika_handle** handle);

/* A step's wall time split as troika::StepTiming, in seconds:
 * compute + negotiation_wait + communication == total. */
typedef struct troika_step_timing {
  double total_seconds;
  double compute_seconds;
  double negotiation_wait_seconds;
  double communication_seconds;
} troika_step_timing;

/* Context::MarkStep, once per training step: ends the step in progress (queued for the
 * coordinator) and starts the next. Writes the ended step's timing to *timing unless it is
 * NULL (all zeros on the first call, which only starts a step). Returns 0, or
 * INVALID_ARGUMENT (3) if ctx is NULL. Never blocks. */
int troika_mark_step(troika_context* ctx, troika_step_timing* timing);

/* 1 if done, 0 if not; -1 (INVALID_ARGUMENT) if handle is NULL. */
int troika_handle_poll(const troika_handle* handle);
/* Blocks until done; returns the operation's status code (message: troika_last_error).
 * INVALID_ARGUMENT if handle is NULL. */
int troika_handle_wait(troika_handle* handle);
/* Handle-owned result of allgather, alltoall, reducescatter; valid until troika_handle_free
 * (the *_into forms: the caller's `out`).
 * Writes its size to *bytes unless bytes is NULL. A NULL handle: NULL, *bytes = 0 and the
 * message in troika_last_error. */
const void* troika_handle_output(const troika_handle* handle, size_t* bytes);
/* Writes up to max_dims dims of the result's shape; returns the number of dims. -1
 * (INVALID_ARGUMENT) for a NULL handle, max_dims < 0, or dims == NULL with max_dims > 0
 * (max_dims == 0 only asks for the count). */
int troika_handle_output_shape(const troika_handle* handle, int64_t* dims, int max_dims);
/* Alltoall: writes up to max rows-received-per-rank; returns the count. -1 as
 * troika_handle_output_shape. */
int troika_handle_received_splits(const troika_handle* handle, int64_t* splits, int max);
/* A completed join: the last rank to join; -1 for any other handle, and for a NULL one (with
 * the message in troika_last_error). */
int troika_handle_joined_last_rank(const troika_handle* handle);
/* Frees the handle (the operation goes on); NULL: nothing. */
void troika_handle_free(troika_handle* handle);

#ifdef __cplusplus
}
#endif

#endif /* TROIKA_C_API_H_ */
