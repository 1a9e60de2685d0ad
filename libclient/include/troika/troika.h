#pragma once
// libtroika: the client library linked into each training process.
//
//   auto troika = troika::Context::Init(troika::Options::FromEnvironment().value()).value();
//   troika::Handle h = troika->Allreduce("grad/fc1", grad.data(), grad.data(),
//                                        troika::DataType::kFloat32, {128, 64},
//                                        {.op = troika::ReduceOp::kAverage});
//   absl::Status s = h.Wait();
//
// Every operation is asynchronous: it is queued, negotiated with the other ranks through the
// coordinator, executed in the job-wide order on the data plane, and completes its Handle.
// Operations are matched across ranks by name: every rank must submit each name, and a name
// may be in flight only once per rank. Buffers passed in must stay valid, and inputs
// unchanged, until the handle is done. A null buffer the operation would touch — the input of
// a tensor with elements (a broadcast reads it on the root only), the output of an allreduce
// or broadcast with elements — fails the handle at once with INVALID_ARGUMENT naming the op
// and the tensor; like every error found at submission it is this rank's alone (the op is
// not sent, and ranks that did submit it wait for it).
//
// Thread contract: Context is thread-safe; Handle is thread-safe.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "troika/types.h"

namespace troika {

namespace internal {
struct OpState;
class ContextImpl;
}  // namespace internal

// How a rank finds and joins its job. Every field can come from a TROIKA_* variable.
struct Options {
  // Coordinator or local agent address: "host:port" (a name, an IPv4 address or "[ipv6]";
  // port 1-65535), "dns:///host:port", or a Unix socket "unix:/path" ("unix:relative/path"
  // too). TROIKA_COORDINATOR. Init fails at once with INVALID_ARGUMENT naming the address and
  // what is wrong with it ("no port", "port 99999 is out of range", ...), and with UNAVAILABLE
  // "cannot reach the coordinator at ADDRESS: ..." if the socket does not exist or the host
  // name does not resolve.
  std::string coordinator;
  // Transport security toward a "host:port" coordinator (a "unix:" socket is local and needs
  // none): the PEM file of the CA that signed the coordinator's certificate (TROIKA_TLS_CA),
  // and for a coordinator that requires mutual TLS this rank's certificate and key
  // (TROIKA_TLS_CERT, TROIKA_TLS_KEY). Or plaintext, which must be asked for
  // (TROIKA_PLAINTEXT=1); Init refuses a network address with neither.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool plaintext = false;
  // The job's token, carried by every call on the job (docs/security.md); TROIKA_JOB_TOKEN,
  // or the contents of the file TROIKA_JOB_TOKEN_FILE. Empty: a job this rank creates gets a
  // generated token, and ranks joining an existing job are refused (PERMISSION_DENIED).
  // troikarun and troika-agent hand their ranks theirs.
  std::string job_token;
  // Job name; ranks of one job share it. TROIKA_JOB.
  std::string job;
  // This process's rank and the job's size. TROIKA_RANK, TROIKA_SIZE.
  int rank = -1;
  int size = -1;
  // An elastic rank's generation: the one its agent started it for (TROIKA_EPOCH), or the
  // epoch of the membership change that gave it `rank` and `size` (elastic::Run and
  // hvd.elastic set it); 0: not said. If the job changed before every rank attached (a rank
  // lost meanwhile, or ranks that never attached), Init follows the change: the context's
  // rank() and size() are then the generation in force's (docs/elastic.md).
  int64_t epoch = 0;
  // Name of this host, grouping ranks into local ranks. TROIKA_HOST; default gethostname().
  std::string host;
  // Address the other ranks reach this rank's data plane at. TROIKA_DATA_HOST; default
  // 127.0.0.1 when every rank of the job is on this host, else `host`.
  std::string data_host;
  // Data plane (docs/shm.md). "auto", the default, chooses for each communicator (the job's,
  // each process set's, each elastic generation's) from the hosts of its ranks (`host`):
  // shared memory when they are all on one host, hierarchical collectives (shared memory
  // within a host, Gloo between hosts) when they span hosts and some host has several, else
  // Gloo. Forced: "gloo" (TCP), "shm" (every rank of the job on one host, else Init fails
  // saying so), "hierarchical". TROIKA_TRANSPORT.
  std::string transport = "auto";
  // Where a communicator spans hosts ("auto" and "hierarchical"): allreduce (and
  // reducescatter), and allgather, through shared memory within each host and Gloo between
  // the hosts' first ranks (true), or flat over Gloo among every rank (false). Unset: "auto"
  // is hierarchical when some host has several of the communicator's ranks, "hierarchical"
  // always. TROIKA_HIERARCHICAL_ALLREDUCE / TROIKA_HIERARCHICAL_ALLGATHER, or Horovod's
  // HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER: 1 or 0 (true/false).
  std::optional<bool> hierarchical_allreduce;
  std::optional<bool> hierarchical_allgather;
  // How long Init waits for the connection to the coordinator (or agent) before failing with
  // UNAVAILABLE naming the address and the cause ("nothing accepts connections there
  // (connection refused)", a failed TLS handshake, ...); at most attach_timeout.
  // TROIKA_CONNECT_TIMEOUT (seconds); 10 s.
  absl::Duration connect_timeout = absl::Seconds(10);
  // How long Init then waits for every rank to attach. TROIKA_ATTACH_TIMEOUT (seconds); 60 s.
  absl::Duration attach_timeout = absl::Seconds(60);
  // Upper bound for data-plane connection set-up and for any single transfer.
  // TROIKA_DATA_TIMEOUT (seconds), or Horovod's HOROVOD_GLOO_TIMEOUT_SECONDS; default 300 s.
  absl::Duration data_timeout = absl::Seconds(300);
  // The wire format of float32 allreduces on GPU whose AllreduceOptions name none.
  // TROIKA_COMPRESSION: none, float16 or bfloat16; default none.
  Compression compression = Compression::kNone;
  // The NCCL library of the GPU data plane, loaded at its first GPU operation: a path (or a
  // file name for the dynamic loader's search), used instead of searching. TROIKA_NCCL_LIBRARY;
  // default empty: the libnccl.so.2 the process has already loaded (a framework's), else the
  // dynamic loader's, else the build's (docs/gpu.md).
  std::string nccl_library;

  // Reads every TROIKA_* variable that is set; INVALID_ARGUMENT names a malformed one or a
  // missing required one (TROIKA_COORDINATOR, TROIKA_JOB, TROIKA_RANK, TROIKA_SIZE).
  static absl::StatusOr<Options> FromEnvironment();
  // Only the security variables (TROIKA_TLS_CA, TROIKA_TLS_CERT, TROIKA_TLS_KEY,
  // TROIKA_PLAINTEXT, TROIKA_JOB_TOKEN, TROIKA_JOB_TOKEN_FILE), into `options`.
  static absl::Status SecurityFromEnvironment(Options& options);
};

// Where an operation's buffers live. GPU operations need a libtroika built with CUDA and NCCL
// (docs/gpu.md); every GPU operation of a context uses the same device.
struct Device {
  // -1: host memory. >= 0: memory of CUDA device `ordinal`; results that the handle owns
  // (allgather, alltoall, reducescatter) are then device memory too.
  int ordinal = -1;
  // GPU only, optional: what produced the inputs. Troika's stream waits for `ready_event` (a
  // cudaEvent_t recorded after the producer's writes) if set, else for the work queued on
  // `ready_stream` (a cudaStream_t) when the operation is submitted, not for what is queued
  // there later — on the device, without blocking the CPU. (Submitted from a thread whose
  // current device is another, when the operation is issued: a later point.) Neither: the
  // inputs must be ready when the operation is submitted. nullptr means none, so the legacy
  // default stream is named `cudaStreamLegacy`, not 0.
  void* ready_stream = nullptr;
  void* ready_event = nullptr;
};

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;   // applied to the input before reduction
  double postscale = 1.0;  // applied to the result (after averaging)
  // The process set (Context::AddProcessSet) to run in; 0: every rank of the job. kAverage
  // divides by the set's size.
  int process_set = 0;
  Device device{};
  // float32 on GPU only: the wire format; unset: Options::compression (for float32 GPU
  // allreduces; none for everything else). Every rank must pass the same.
  std::optional<Compression> compression{};
  // true: the call returns once the operation finished (as Allreduce(...).Wait(); the
  // outcome is in the returned handle). Under a steady-state schedule (docs/protocol.md,
  // Schedules) the collective then runs on the calling thread, with no hand-off to Troika's
  // executor thread: the fastest way to run a small synchronous allreduce.
  bool wait = false;
};

// Options of the other operations.
struct OpOptions {
  // The process set (Context::AddProcessSet) to run in; 0: every rank of the job. Within a
  // set, ranks are positions in the set: a broadcast `root` and alltoall `splits` index the
  // set's ranks in ascending order, not the job's.
  int process_set = 0;
  Device device{};
  // AllgatherInto and AlltoallInto only (ignored elsewhere): a result larger than the caller's
  // `out` is received into a handle-owned buffer instead, as Allgather's and Alltoall's are,
  // and the operation succeeds — output() is then that buffer, not `out`, which stays
  // untouched — rather than failing with OUT_OF_RANGE. For a caller that can size `out` for
  // the usual result (every rank's dim 0 equal to its own) but learns the actual one only
  // after negotiation: the usual case is received in place, any other still succeeds.
  bool handle_owned_if_too_small = false;
};

// One tensor of a grouped operation (Context::GroupedAllreduce, GroupedAllgather,
// GroupedReducescatter); as that operation's arguments.
struct GroupTensor {
  std::string name;
  const void* in = nullptr;
  void* out = nullptr;  // GroupedAllgather: unused (the handle owns the result)
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  size_t out_bytes = 0;  // GroupedReducescatter: the capacity of `out`, as ReducescatterInto's
};

// One training step of this rank (Context::MarkStep), its wall time split by what the rank
// was doing (docs/metrics.md, "Step timing"): compute + negotiation_wait + communication ==
// total exactly.
struct StepTiming {
  absl::Duration total;
  // Neither of the others: the application's own work.
  absl::Duration compute;
  // Operations were in flight and the data plane idle: waiting for the coordinator's decision
  // or for slower ranks.
  absl::Duration negotiation_wait;
  // The data plane moved bytes (copy in, collective, copy out).
  absl::Duration communication;
};

// The completion of one operation. Cheap to copy; copies share the operation.
class Handle {
 public:
  Handle() = default;
  // True once the operation finished, successfully or not. Never blocks. Polling counts as
  // waiting for deadlock detection (docs/protocol.md, Deadlocks) while it goes on: once polls
  // of an unfinished operation have spanned 50 ms, the rank counts as blocked on it until the
  // operation finishes or 500 ms pass without a poll of it. A single poll (then computing)
  // never counts.
  bool Poll() const;
  // The outcome if the operation has finished, else nullopt. Never blocks and, unlike Poll,
  // says nothing to the runtime (no waiting for deadlock detection, no early send).
  std::optional<absl::Status> Peek() const;
  // Why the submission was refused at once (an invalid argument, a name already in flight on
  // this rank, a job that failed or shut down): the operation never ran, and this is its
  // outcome. nullopt for an operation that was accepted, whether it has finished since (with
  // success or not) or not: a front end raising refusals at submission asks this, not Peek,
  // since an accepted operation may already have finished when the call returns. Never blocks.
  std::optional<absl::Status> Refusal() const;
  // Blocks until the operation finished; returns its outcome.
  absl::Status Wait() const;
  // Like Wait(), but gives up after `timeout` with DEADLINE_EXCEEDED (the op continues).
  absl::Status WaitFor(absl::Duration timeout) const;
  // Runs `callback` with the outcome once the operation finished: at once, on this thread, if
  // it already has; else on the thread that completes it (Troika's executor, or a submitting
  // thread for an operation refused at once), after Wait() would have returned. Never blocks.
  // The callback must be short and must not wait for another handle (it holds up that
  // thread); it may submit. For front ends whose framework completes an asynchronous kernel
  // by a callback (troika.tensorflow's ops). `caller_waits`: a thread of the application is
  // blocked until the callback runs (an eager TensorFlow op), so the rank counts as waiting
  // for the operation for deadlock detection (docs/protocol.md, Deadlocks) until then, as in
  // Wait() (and the request leaves at once, as for a Wait); false: the rank may be computing
  // meanwhile (an op of a graph still running), and the request leaves with the send cycle's
  // batch. Either way, what the rank submits after the callback ran may depend on the result,
  // as after a Wait(): a steady-state schedule never puts it in one collective with this
  // operation (docs/design/schedules.md, Buckets).
  void OnDone(std::function<void(const absl::Status&)> callback, bool caller_waits = false) const;
  // GPU operations: blocks only until the operation has been issued on the device (or has
  // failed), then makes `stream` (a cudaStream_t; null: the legacy default stream) wait for
  // its completion on the device — the CPU does not wait for the transfer. Work queued on
  // `stream` afterwards sees the results. Returns the failure if the operation failed before
  // it was issued; a later failure surfaces in Wait(). FAILED_PRECONDITION for a host op.
  absl::Status WaitOnStream(void* stream) const;

  // After a successful Wait(), for allgather, alltoall and reducescatter: the result, owned
  // by the handle — or, for AllgatherInto / AlltoallInto / ReducescatterInto, the caller's
  // buffer it was written to (output() is then that pointer, output_bytes() the result's
  // size, which may be less than the buffer's) — and its shape (dim 0 is known only after
  // negotiation). When an *Into op failed with OUT_OF_RANGE, output() is null and
  // output_shape() (and received_splits()) describe the result that did not fit. With
  // OpOptions::handle_owned_if_too_small, such a result is handle-owned instead: output() !=
  // `out` tells the two apart.
  const void* output() const;
  size_t output_bytes() const;
  const std::vector<int64_t>& output_shape() const;
  // Alltoall: rows received from each rank.
  const std::vector<int64_t>& received_splits() const;
  // After a successful Wait() on Context::Join(): the last rank to join; -1 otherwise.
  int joined_last_rank() const;

 private:
  friend class internal::ContextImpl;
  explicit Handle(std::shared_ptr<internal::OpState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::OpState> state_;
};

class Context {
 public:
  // Connects to the coordinator (or agent), joins the job, waits for every rank to attach and
  // connects the data plane. Blocks; fails with a message naming what is missing. An elastic
  // rank's (options.epoch set) follows a change of the job made while it attached: rank()
  // and size() may then differ from options'.
  static absl::StatusOr<std::unique_ptr<Context>> Init(const Options& options);
  ~Context();  // Shutdown()
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Membership& membership() const;
  int rank() const { return membership().rank; }
  int size() const { return membership().size; }
  int local_rank() const { return membership().local_rank; }
  int local_size() const { return membership().local_size; }
  int cross_rank() const { return membership().cross_rank; }
  int cross_size() const { return membership().cross_size; }

  // Reduces `shape`-shaped `in` across ranks into `out` (`in == out`: in place).
  Handle Allreduce(const std::string& name, const void* in, void* out, DataType dtype,
                   std::vector<int64_t> shape, AllreduceOptions options = {});
  // Concatenates every rank's `in` along dim 0, which may differ per rank; the result is
  // handle-owned.
  Handle Allgather(const std::string& name, const void* in, DataType dtype,
                   std::vector<int64_t> shape, OpOptions options = {});
  // Copies `root`'s `in` to `out` on every rank (`in == out`: in place; `in` is read only on
  // the root).
  Handle Broadcast(const std::string& name, const void* in, void* out, DataType dtype,
                   std::vector<int64_t> shape, int root, OpOptions options = {});
  // Sends splits[j] rows of `in` (consecutively, in rank order) to rank j; empty `splits`:
  // an even split of dim 0. The received rows are handle-owned, with received_splits().
  Handle Alltoall(const std::string& name, const void* in, DataType dtype,
                  std::vector<int64_t> shape, std::vector<int64_t> splits = {},
                  OpOptions options = {});
  // Reduces `in` across ranks and scatters dim 0: rank r receives rows
  // [offset_r, offset_r + n_r), the first (dim0 % size) ranks one row more. `options.op` is
  // kSum or kAverage. Result handle-owned.
  Handle Reducescatter(const std::string& name, const void* in, DataType dtype,
                       std::vector<int64_t> shape, AllreduceOptions options = {});
  // Allgather, Alltoall and Reducescatter writing the result into the caller's `out`, which
  // holds `out_bytes` bytes (host memory; `out` may be null only with 0 bytes), instead of a
  // handle-owned buffer: no copy beyond what the handle-owned form makes (allgather and
  // alltoall receive straight into `out`). The result must fit: the result of allgather and
  // alltoall is sized only after negotiation (the other ranks' dim 0 and splits), so the size
  // is checked when the operation runs. If it does not fit, this rank still takes part in the
  // collective — it receives into a scratch buffer and discards the result, leaving `out`
  // untouched — and then its handle fails with OUT_OF_RANGE naming the bytes needed and
  // given (unless options.handle_owned_if_too_small: then the result is handle-owned); the other
  // ranks' results are unaffected and nothing waits on this rank, so the job goes on (failing
  // before the collective instead would leave the others waiting for it). Reducescatter's size is
  // known here (dim0 / n rows, one more on the first dim0 % n ranks of the set of n) but is checked
  // the same way, for the same reason. A null `out` with a nonzero `out_bytes` is INVALID_ARGUMENT
  // at once. On GPU (options.device) `out` is device memory of that GPU.
  Handle AllgatherInto(const std::string& name, const void* in, void* out, size_t out_bytes,
                       DataType dtype, std::vector<int64_t> shape, OpOptions options = {});
  Handle AlltoallInto(const std::string& name, const void* in, void* out, size_t out_bytes,
                      DataType dtype, std::vector<int64_t> shape, std::vector<int64_t> splits = {},
                      OpOptions options = {});
  Handle ReducescatterInto(const std::string& name, const void* in, void* out, size_t out_bytes,
                           DataType dtype, std::vector<int64_t> shape,
                           AllreduceOptions options = {});
  // Completes once every rank (of `options.process_set`) has reached the barrier.
  Handle Barrier(OpOptions options = {});
  // An elastic job's commit point (docs/elastic.md): a barrier of every rank, at which the
  // coordinator admits the nodes waiting to join. It then fails on every rank alike with
  // the membership change that admits them (GetMembershipChange: at_commit set), which
  // elastic::Run goes on from without going back. elastic::Commit calls it.
  Handle ElasticCommit();

  // Process sets: subsets of the job's ranks with their own negotiation (names are matched
  // within a set, ordered per set) and their own data-plane communicator, so collectives in
  // different sets run concurrently. Set 0 is the whole job.
  //
  // Adds a set of the job's `ranks` (ascending, distinct, in [0, size()); empty is allowed,
  // as in Horovod: a set with no member, on which nothing runs) and returns its id
  // (> 0). Every rank of the job must call it — members or not — with the same list, in the
  // same order relative to the other AddProcessSet / RemoveProcessSet calls; it is negotiated
  // in set 0 like a barrier and blocks until every rank called it (members connect the set's
  // communicator before it returns). A list that differs between ranks, or is invalid, fails
  // on every rank with FAILED_PRECONDITION naming what each rank passed. An op submitted to a
  // set this rank is not in fails at once.
  absl::StatusOr<int> AddProcessSet(std::vector<int> ranks);
  // Removes set `id` (every rank of the job calls it, as AddProcessSet): its operations that
  // are still negotiating fail, later ones fail at once, its communicator is closed.
  absl::Status RemoveProcessSet(int id);
  // {this rank's position in set `id`, the set's size}: {rank(), size()} for set 0, and a
  // position of -1 if this rank is not in the set; NOT_FOUND if there is no such set (never
  // added, or removed). For sizing a reducescatter's result (its rows per position) and for
  // queries such as Horovod's size_op.
  absl::StatusOr<std::pair<int, int>> ProcessSetMember(int process_set) const;

  // Allreduces `tensors` as one group named `group`: the coordinator schedules none of them
  // until every rank submitted all of them, then runs them together (fused as far as the
  // fusion threshold allows). Every rank must submit the same group: same name, same tensor
  // names. The group name may be reused once its handles completed. If any tensor is invalid
  // here, none is submitted and every handle fails with that error.
  std::vector<Handle> GroupedAllreduce(const std::string& group,
                                       const std::vector<GroupTensor>& tensors,
                                       AllreduceOptions options = {});
  // Allgathers (results owned by the handles, as Allgather's) and reducescatters (into each
  // tensor's `out`, as ReducescatterInto) as one group, with GroupedAllreduce's rules: none
  // runs until every rank submitted all of them, and a group that differs between ranks
  // (another size, other names) fails on every rank.
  std::vector<Handle> GroupedAllgather(const std::string& group,
                                       const std::vector<GroupTensor>& tensors,
                                       OpOptions options = {});
  std::vector<Handle> GroupedReducescatter(const std::string& group,
                                           const std::vector<GroupTensor>& tensors,
                                           AllreduceOptions options = {});

  // This rank is out of data (uneven inputs). Until every rank has joined, this rank submits
  // nothing (submissions fail at once) while its library keeps taking part in the other
  // ranks' work: allreduces proceed without waiting for it — it contributes zeros (to kMin,
  // kMax and kProduct too; see ReduceOp), and kAverage still divides by the set's size, as
  // Horovod's does — and barriers include it. Operations it submitted before joining run with
  // its data. Allgather, alltoall, reducescatter and broadcast fail on the other ranks while
  // it is joined (Horovod's rule). The handle completes once every rank has joined;
  // joined_last_rank() then names the last rank to join. Afterwards the job goes on as before
  // (a next epoch may join again).
  Handle Join();

  // Step timing. Marking the steps' boundaries lets each rank split every step's wall time
  // (StepTiming) and send it to the coordinator, which keeps every rank's steps in its step
  // histograms (docs/metrics.md): samples go up about once a second and at Shutdown().
  // Thread-safe, but there is one step per context, not per thread: mark it from the training
  // loop, and operations in flight from any thread count toward its negotiation wait.
  //
  // The one call per step: ends the step in progress (if any), queues it for the coordinator
  // and returns its timing, and starts the next one at the same instant. The first call only
  // starts a step and returns a zero StepTiming. Never blocks.
  StepTiming MarkStep();
  // Or bracket each step (see ScopedStep): StartStep() begins a step now, discarding one in
  // progress; EndStep() ends it, queues it and returns its timing (zero if none was started).
  // Time between EndStep() and the next StartStep() is in no step.
  void StartStep();
  StepTiming EndStep();

  // Leaves the job: pending operations fail, later ones fail at once, and the other ranks'
  // operations that need this rank fail with a message naming it. Returns the error that had
  // failed this context (an abort, a lost coordinator, a data-plane failure), if one did.
  // Idempotent: later calls return OK.
  absl::Status Shutdown();

 private:
  explicit Context(std::unique_ptr<internal::ContextImpl> impl);
  friend class internal::ContextImpl;
  std::unique_ptr<internal::ContextImpl> impl_;
};

// One step as a scope: StartStep() on construction, EndStep() on destruction.
//
//   for (...) {
//     troika::ScopedStep step(ctx);
//     ... forward, backward, allreduce, update ...
//   }
//
// The context must outlive it. Not copyable.
class ScopedStep {
 public:
  explicit ScopedStep(Context& context) : context_(context) { context_.StartStep(); }
  ~ScopedStep() { context_.EndStep(); }
  ScopedStep(const ScopedStep&) = delete;
  ScopedStep& operator=(const ScopedStep&) = delete;

 private:
  Context& context_;
};

}  // namespace troika
