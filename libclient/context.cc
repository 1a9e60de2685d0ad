// ContextImpl (checks, submission, failure, shutdown) and Context's life over it:
// Init, Shutdown, steps. Context's operations are in context_ops.cc.

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/request_check.h"
#include "libclient/context_impl.h"
#include "libclient/control/grpc_control_channel.h"
#include "troika/elastic.h"

namespace troika {
namespace internal {

absl::StatusOr<std::unique_ptr<Context>> ContextImpl::Create(
    const Options& options, std::unique_ptr<ControlChannel> channel,
    std::unique_ptr<transport::Transport> transport) {
  std::unique_ptr<ContextImpl> impl(new ContextImpl);
  impl->channel_ = std::move(channel);
  impl->transport_ = std::move(transport);
  if (absl::Status s = impl->Start(options); !s.ok()) return s;
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

absl::Status ContextImpl::Start(const Options& options) {
  if (options.job.empty()) return absl::InvalidArgumentError("no job name given");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not in [0, ", options.size, ")"));
  }
  auto membership = channel_->Join(options.job, options.size, options.rank, options.epoch,
                                   options.host, options.attach_timeout);
  if (!membership.ok()) return membership.status();
  membership_ = *membership;

  transport::CommunicatorSpec spec;
  spec.rank = membership_.rank;
  spec.size = membership_.size;
  spec.store_prefix = absl::StrCat("data/", membership_.epoch, "/");
  spec.timeout = options.data_timeout;
  spec.node = options.host;  // groups ranks by host as the membership does
  spec.host = !options.data_host.empty()            ? options.data_host
              : membership_.local_size == spec.size ? std::string("127.0.0.1")
                                                    : options.host;
  auto communicator = transport_->Connect(spec, channel_->store());
  if (!communicator.ok()) {
    return absl::Status(
        communicator.status().code(),
        absl::StrCat("connecting the data plane: ", communicator.status().message()));
  }
  communicator_ = *std::move(communicator);
  data_spec_ = spec;
  process_sets_ = std::make_unique<ProcessSetTable>(membership_.rank);

  if (absl::Status s = channel_->OpenSession(options.job, {membership_.rank}, membership_.epoch);
      !s.ok()) {
    return s;
  }
  placement_ = std::make_unique<DevicePlacement>(
      CreateDevicePlane({&channel_->store(), absl::StrCat("gpu/", membership_.epoch, "/"),
                         options.data_timeout,
                         [this](absl::Status status) { return FailFromDataPlane(status); },
                         options.nccl_library}),
      options.compression);
  auto fail = [this](absl::Status status) { Fail(status); };
  // A set's communicator: its own store prefix, so its addresses never mix with another's.
  auto connect = [this](int id, int index, int size) {
    transport::CommunicatorSpec spec = data_spec_;
    spec.rank = index;
    spec.size = size;
    spec.store_prefix = absl::StrCat("data/", membership_.epoch, "/ps", id, "/");
    return transport_->Connect(spec, channel_->store());
  };
  executor_ = std::make_unique<Executor>(
      table_, *communicator_, *process_sets_, std::move(connect), *outputs_, stats_, *steps_,
      placement_->plane(), [this](absl::Status status) { return FailFromDataPlane(status); });
  const std::string peer =
      absl::StartsWith(options.coordinator, "unix:")
          ? absl::StrCat("the troika-agent (or coordinator) at ", options.coordinator)
          : absl::StrCat("the coordinator at ", options.coordinator);
  controller_ = std::make_unique<Controller>(membership_.rank, peer, *channel_, table_, *executor_,
                                             stats_, fail);
  waits_ = std::make_shared<WaitTracker>(membership_.rank,
                                         [controller = controller_.get()](WaitState state) {
                                           controller->SendWaitState(std::move(state));
                                         });
  controller_->TrackWaits(waits_);  // lapses registrations by polling when the polls stop
  controller_->LimitScheduledWaits(options.data_timeout);
  executor_->Start();
  controller_->Start();
  return absl::OkStatus();
}

ContextImpl::~ContextImpl() { Shutdown().IgnoreError(); }

void ContextImpl::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (!failure_.ok()) return;
    failure_ = status;
  }
  fail_cv_.notify_all();
  if (status.GetPayload(kMembershipChangePayload)) {
    // An elastic job goes on without some ranks (elastic::Run carries on): not an error.
    TROIKA_LOG(WARNING) << "rank " << membership_.rank << ": " << status.message();
  } else {
    TROIKA_LOG(ERROR) << "rank " << membership_.rank << ": " << status;
  }
  table_.Close(status);
  if (executor_) executor_->Abort();
}

absl::Status ContextImpl::FailFromDataPlane(const absl::Status& status) {
  {
    std::unique_lock<std::mutex> lock(fail_mu_);
    fail_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return !failure_.ok(); });
  }
  Fail(status);  // no-op if the reason arrived
  std::lock_guard<std::mutex> lock(fail_mu_);
  return failure_;
}

std::shared_ptr<OpState> ContextImpl::NewState(std::string name) const {
  auto state = std::make_shared<OpState>();
  state->name = std::move(name);
  state->tracker = waits_;
  return state;
}

absl::Status ContextImpl::CheckNotJoined() const {
  // No join in flight when last looked (every submission asks): no lock.
  if (!join_in_flight_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(join_mu_);
  std::lock_guard<std::mutex> state_lock(join_->mu);
  if (join_->done) {
    join_in_flight_.store(false, std::memory_order_relaxed);  // until the next join
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      "rank has joined (Context::Join); it submits nothing until every rank joined");
}

std::string ContextImpl::NextBarrierName(int process_set) {
  std::lock_guard<std::mutex> lock(barriers_mu_);
  return "troika/barrier/" + std::to_string(barriers_[process_set]++);
}

int ContextImpl::ProcessSetId(const Handle& handle) { return handle.state_->process_set_id; }

void ContextImpl::StartOp(OpState& state) const {
  // A submission that then fails completes the state at once: a zero-length op.
  steps_->OpStarted();
  state.step_clock = steps_;
}

StepTiming ContextImpl::Report(const std::optional<StepSample>& step) {
  if (!step) return StepTiming{};
  if (stats_.AddStep(*step) && controller_) controller_->StepsQueued();
  return {step->duration, step->compute, step->negotiation_wait, step->communication};
}

absl::StatusOr<std::pair<int, int>> ContextImpl::ProcessSetMember(int process_set) const {
  if (process_set == 0) return std::make_pair(membership_.rank, membership_.size);
  std::optional<int> size = process_sets_->SizeOf(process_set);
  if (!size) {
    return absl::NotFoundError(
        absl::StrCat("there is no process set ", process_set, " (never added, or removed)"));
  }
  absl::StatusOr<std::pair<int, int>> member = process_sets_->Member(process_set);
  return member.ok() ? *member : std::make_pair(-1, *size);
}

absl::Status ContextImpl::CheckInSet(const TensorRequest& request) const {
  if (request.process_set == 0) return CheckRequest(request, membership_.size);
  absl::StatusOr<std::pair<int, int>> member = process_sets_->Member(request.process_set);
  if (!member.ok()) {
    return absl::Status(member.status().code(),
                        absl::StrCat("'", request.name, "': ", member.status().message()));
  }
  TensorRequest in_set = request;  // as the set's negotiator sees it
  in_set.rank = member->first;
  return CheckRequest(in_set, member->second);
}

absl::Status ContextImpl::CheckBuffers(const Entry& entry) const {
  const TensorRequest& r = entry.request;
  const int64_t elements = NumElements(r.shape);
  auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveName(r.type), " '", r.name,
                                                   "' on rank ", membership_.rank, ": ", what));
  };
  if (entry.caller_output) {
    if (entry.out == nullptr && entry.out_bytes > 0) {
      return invalid(absl::StrCat("the output buffer is null, but its size is given as ",
                                  entry.out_bytes, " bytes"));
    }
  }
  if (elements == 0) return absl::OkStatus();
  auto shape = [&] {  // for messages only: not built on the fast path
    return absl::StrCat(" (shape ", ShapeString(r.shape), ", ", elements,
                        elements == 1 ? " element)" : " elements)");
  };
  switch (r.type) {
    case CollectiveType::kBarrier:
    case CollectiveType::kJoin:
      return absl::OkStatus();
    case CollectiveType::kBroadcast: {
      // The root is a position in the request's set; CheckInSet found this rank in it.
      int position = membership_.rank;
      if (r.process_set != 0) {
        absl::StatusOr<std::pair<int, int>> member = process_sets_->Member(r.process_set);
        if (member.ok()) position = member->first;
      }
      if (position == r.root && entry.in == nullptr) {
        return invalid(absl::StrCat("the input buffer is null on the root", shape()));
      }
      break;
    }
    default:
      if (entry.in == nullptr) return invalid(absl::StrCat("the input buffer is null", shape()));
  }
  const bool writes_out =
      r.type == CollectiveType::kAllreduce || r.type == CollectiveType::kBroadcast;
  if (writes_out && entry.out == nullptr) {
    return invalid(absl::StrCat("the output buffer is null", shape()));
  }
  return absl::OkStatus();
}

Handle ContextImpl::Submit(TensorRequest request, const void* in, void* out, const Device& device,
                           std::optional<Compression> compression, std::optional<size_t> out_bytes,
                           bool wait, bool owned_if_too_small) {
  request.rank = membership_.rank;
  auto state = NewState(ProcessSetTensorName(request.process_set, request.name));
  const bool join = request.type == CollectiveType::kJoin;
  Entry entry{std::move(request), in, out, state};
  entry.caller_output = out_bytes.has_value();
  entry.out_bytes = out_bytes.value_or(0);
  entry.owned_if_too_small = entry.caller_output && owned_if_too_small;
  absl::Status status = placement_->Place(entry, device, compression);
  if (status.ok()) status = CheckInSet(entry.request);
  if (status.ok()) status = CheckBuffers(entry);
  if (status.ok()) status = CheckNotJoined();
  if (status.ok()) {
    StartOp(*state);
    status = controller_->Submit(std::move(entry), wait);
  }
  if (!status.ok()) {
    state->Refuse(status);
  } else if (join) {
    std::lock_guard<std::mutex> lock(join_mu_);
    join_ = state;
    join_in_flight_.store(true, std::memory_order_release);
  }
  Handle handle(state);
  if (wait) {
    if (status.ok()) RunUntilDone(*state);
    handle.Wait().IgnoreError();  // the outcome stays in the handle
  }
  return handle;
}

void ContextImpl::RunUntilDone(OpState& state) {
  executor_->RunInline([&state] {
    std::lock_guard<std::mutex> lock(state.mu);
    return state.done.load();
  });
}

std::shared_ptr<OpState> ContextImpl::Succeeded() {
  // Never destroyed, so its handles need not own it: a shared_ptr without a control block,
  // copied and destroyed without an atomic operation. No wait tracker: AllreduceNow tells the
  // context's, so a Wait on the handle does not tell it again.
  static OpState* const state = [] {
    auto* s = new OpState;
    s->Complete(absl::OkStatus());
    return s;
  }();
  return std::shared_ptr<OpState>(std::shared_ptr<OpState>(), state);
}

ContextImpl::ThreadEntry& ContextImpl::ThisThreadEntry() {
  thread_local ThreadEntry mine;
  return mine;
}

std::optional<Handle> ContextImpl::AllreduceNow(const std::string& name, const void* in, void* out,
                                                DataType dtype, const std::vector<int64_t>& shape,
                                                const AllreduceOptions& options) {
  // A join in flight refuses it (Submit says why); placed on the host as Place would.
  if (!options.wait || options.process_set != 0 || options.device.ordinal >= 0 ||
      options.compression.value_or(Compression::kNone) != Compression::kNone || in == nullptr ||
      out == nullptr || !CheckNotJoined().ok()) {
    return std::nullopt;
  }
  // This thread's entry, made afresh for each call but for the storage of its request's name
  // and shape, which it keeps. A call made while this thread's is under way (from a callback
  // of it) takes Submit's path.
  ThreadEntry& mine = ThisThreadEntry();
  if (mine.busy) return std::nullopt;
  Entry& entry = mine.entry;
  std::string name_storage = std::move(entry.request.name);
  std::vector<int64_t> shape_storage = std::move(entry.request.shape);
  entry = Entry{};
  TensorRequest& r = entry.request;
  r.name = std::move(name_storage);
  r.name.assign(name);
  r.shape = std::move(shape_storage);
  r.shape.assign(shape.begin(), shape.end());
  r.rank = membership_.rank;
  r.type = CollectiveType::kAllreduce;
  r.dtype = dtype;
  SetReduction(r, options);
  entry.in = in;
  entry.out = out;
  std::shared_ptr<OpState> negotiated;
  auto adopt = [&](const Entry& e) {
    negotiated = NewState(e.request.name);
    StartOp(*negotiated);
    return negotiated;
  };
  mine.busy = true;
  const bool ran = controller_->RunNow(entry, adopt);
  mine.busy = false;
  if (!ran) return std::nullopt;
  if (negotiated) {  // the schedule ended at its entry: negotiated now, as Submit's would be
    Handle handle(negotiated);
    RunUntilDone(*negotiated);
    handle.Wait().IgnoreError();  // the outcome stays in the handle
    return handle;
  }
  waits_->Observed();  // the caller sees it done (WaitTracker::Observed)
  if (entry.outcome.ok()) return Handle(Succeeded());
  std::shared_ptr<OpState> failed = NewState(entry.request.name);
  failed->Complete(entry.outcome);
  return Handle(failed);
}

std::vector<Handle> ContextImpl::SubmitGroup(std::vector<Entry> entries, const Device& device,
                                             std::optional<Compression> compression) {
  std::vector<Handle> handles;
  absl::Status status = CheckNotJoined();
  for (Entry& e : entries) {
    e.request.rank = membership_.rank;
    e.state = NewState(ProcessSetTensorName(e.request.process_set, e.request.name));
    handles.push_back(Handle(e.state));
    if (status.ok()) status = placement_->Place(e, device, compression);
    if (status.ok()) status = CheckInSet(e.request);
    if (status.ok()) status = CheckBuffers(e);
  }
  std::vector<std::shared_ptr<OpState>> states;
  for (const Entry& e : entries) states.push_back(e.state);
  if (status.ok()) {
    for (auto& state : states) StartOp(*state);
    status = controller_->SubmitAll(std::move(entries));
  }
  if (!status.ok()) {
    for (auto& state : states) state->Refuse(status);
  }
  return handles;
}

absl::Status ContextImpl::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  if (waits_) waits_->Detach();  // the controller stops sending
  absl::Status failure;
  {
    std::lock_guard<std::mutex> fail_lock(fail_mu_);
    failure = failure_;
  }
  // A schedule in force ends first: the other ranks may be waiting in its next entry.
  if (failure.ok() && controller_ && !controller_->LeaveSchedule(absl::Seconds(5)) && executor_) {
    executor_->Abort();  // the entry did not complete: do not wait for it
  }
  table_.Close(absl::CancelledError("this rank has shut down"));
  if (controller_) controller_->Shutdown(absl::Seconds(5));
  if (executor_) executor_->Stop();
  // The objects stay until destruction: a late Submit() finds the closed table.
  return failure;
}

}  // namespace internal

Context::Context(std::unique_ptr<internal::ContextImpl> impl) : impl_(std::move(impl)) {}
Context::~Context() = default;

namespace {

absl::StatusOr<std::unique_ptr<Context>> Attach(const Options& options) {
  auto channel = internal::GrpcControlChannel::Connect(
      options.coordinator, {options.tls_ca, options.tls_cert, options.tls_key, options.plaintext},
      options.job_token, std::min(options.connect_timeout, options.attach_timeout));
  if (!channel.ok()) return channel.status();
  auto transport = transport::CreateTransport(
      options.transport, {options.hierarchical_allreduce, options.hierarchical_allgather});
  if (!transport.ok()) return transport.status();
  return internal::ContextImpl::Create(options, *std::move(channel), *std::move(transport));
}

// An elastic rank's attach for a generation failing ABORTED with no renumbering: its
// generation ended while it attached (the data plane's rendezvous failed first). It asks its
// agent again this many times, this far apart: the agent answers with the renumbering once
// the change has reached it (a few milliseconds after the rendezvous failed).
constexpr int kAttachAgain = 5;
constexpr absl::Duration kAttachAgainPause = absl::Milliseconds(200);

// Whether an elastic rank's failed attach may mean that its generation ended meanwhile:
// ABORTED (the coordinator's store ends an ended generation's waits), or CANCELLED: a peer
// gave the generation's data plane up (ShmSync's abort) while this rank still connected it.
// A rank aborts its data plane only as its context ends, so that peer learnt of the change
// first (ElasticTest.ALossWhileTheSurvivorsAttachEndsTheNextGenerationToo, under load).
bool GenerationMayHaveEnded(const absl::Status& status) {
  return absl::IsAborted(status) || absl::IsCancelled(status);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Context>> Context::Init(const Options& given) {
  Options options = given;
  for (int again = 0;;) {
    absl::StatusOr<std::unique_ptr<Context>> context = Attach(options);
    // Only an elastic rank that knows its generation follows changes here (docs/elastic.md).
    if (context.ok() || options.epoch == 0 || !GenerationMayHaveEnded(context.status())) {
      return context;
    }
    std::optional<MembershipChange> change = GetMembershipChange(context.status());
    if (!change) {
      if (++again > kAttachAgain) return context;
      absl::SleepFor(kAttachAgainPause);
      continue;
    }
    const int next = change->NextRank(options.rank);
    if (next < 0) return context;  // the job went on without this rank
    TROIKA_LOG(WARNING) << "rank " << options.rank << " goes on as rank " << next << " of "
                        << change->size << " (generation " << change->epoch
                        << "): the job changed again while it attached";
    options.rank = next;
    options.size = change->size;
    options.epoch = change->epoch;
    again = 0;
  }
}

const Membership& Context::membership() const { return impl_->membership(); }

absl::Status Context::Shutdown() { return impl_->Shutdown(); }

void Context::StartStep() { impl_->StartStep(); }
StepTiming Context::EndStep() { return impl_->EndStep(); }
StepTiming Context::MarkStep() { return impl_->MarkStep(); }

}  // namespace troika
