#include "libclient/control/grpc_control_channel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/address.h"
#include "common/grpc_status.h"
#include "common/wire.h"
#include "grpcpp/grpcpp.h"

namespace troika::internal {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

void AddToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata(kJobTokenHeader, token);
}

absl::Status Annotate(const grpc::Status& status, const std::string& what,
                      const std::string& address) {
  absl::Status s = FromGrpc(status);
  if (s.code() == absl::StatusCode::kUnavailable ||
      (s.code() == absl::StatusCode::kDeadlineExceeded && s.message() == "Deadline Exceeded")) {
    // gRPC's own transport-level failure, not an answer from the coordinator.
    return absl::UnavailableError(
        absl::StrCat(what, ": cannot reach the coordinator at ", address, " (", s.message(), ")"));
  }
  return s;
}

// The job went on past the generation rank `rank` attached for (CreateJobResponse.change from
// its agent, AttachResponse.change): ABORTED with the renumbering, which Context::Init follows.
absl::Status ChangedWhileAttaching(const std::string& job, int rank,
                                   const v1::MembershipChange& change) {
  return MembershipChanged(
      absl::StrCat("job '", job, "' went on as generation ", change.epoch(), " of ", change.size(),
                   " ranks while rank ", rank, " attached"),
      change);
}

}  // namespace

// The job's key-value store through the coordinator.
class GrpcStore final : public transport::Store {
 public:
  // `epoch`: the rank's generation (Membership.epoch), which every call carries.
  GrpcStore(v1::Coordinator::Stub& stub, std::string job, const std::string& token, int64_t epoch)
      : stub_(stub), job_(std::move(job)), token_(token), epoch_(epoch) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(30));
    AddToken(context, token_);
    v1::KvSetRequest request;
    request.set_job(job_);
    request.set_epoch(epoch_);
    request.set_key(key);
    request.set_value(value);
    v1::KvSetResponse response;
    return FromGrpc(stub_.KvSet(&context, request, &response));
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    grpc::ClientContext context;
    SetDeadline(context, timeout + absl::Seconds(5));
    AddToken(context, token_);
    v1::KvGetRequest request;
    request.set_job(job_);
    request.set_epoch(epoch_);
    request.set_key(key);
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    v1::KvGetResponse response;
    if (absl::Status s = FromGrpc(stub_.KvGet(&context, request, &response)); !s.ok()) return s;
    return std::move(*response.mutable_value());
  }

  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    grpc::ClientContext context;
    SetDeadline(context, timeout + absl::Seconds(5));
    AddToken(context, token_);
    v1::KvWaitRequest request;
    request.set_job(job_);
    request.set_epoch(epoch_);
    for (const std::string& k : keys) request.add_keys(k);
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    v1::KvWaitResponse response;
    return FromGrpc(stub_.KvWait(&context, request, &response));
  }

 private:
  v1::Coordinator::Stub& stub_;
  const std::string job_;
  const std::string& token_;  // the channel's
  const int64_t epoch_;
};

absl::StatusOr<std::unique_ptr<GrpcControlChannel>> GrpcControlChannel::Connect(
    const std::string& address, const ClientTls& tls, std::string job_token,
    absl::Duration connect_timeout) {
  // A malformed address, a missing socket or a name that does not resolve fail at once.
  absl::StatusOr<CoordinatorAddress> parsed = CheckCoordinatorAddress(address, connect_timeout);
  if (!parsed.ok()) return parsed.status();
  auto credentials = MakeChannelCredentials(tls, address);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  auto channel = grpc::CreateCustomChannel(address, *credentials, args);
  // Anything else that keeps the channel from connecting (nothing listening, a TLS handshake
  // that fails) within the connect timeout, rather than within the attach timeout.
  if (absl::Status s = WaitForCoordinator(channel, *parsed, connect_timeout); !s.ok()) return s;
  return std::unique_ptr<GrpcControlChannel>(
      new GrpcControlChannel(address, std::move(channel), std::move(job_token)));
}

GrpcControlChannel::GrpcControlChannel(std::string address, std::shared_ptr<grpc::Channel> channel,
                                       std::string job_token)
    : address_(std::move(address)),
      job_token_(std::move(job_token)),
      channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

GrpcControlChannel::~GrpcControlChannel() {
  if (stream_) {
    Cancel();
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!closed_) stream_->Finish().IgnoreError();
  }
}

absl::StatusOr<Membership> GrpcControlChannel::Join(const std::string& job, int size, int rank,
                                                    int64_t epoch, const std::string& host,
                                                    absl::Duration timeout) {
  {
    grpc::ClientContext context;
    SetDeadline(context, timeout);
    context.set_wait_for_ready(true);  // the coordinator may still be starting
    AddToken(context, job_token_);
    v1::CreateJobRequest request;
    request.set_job(job);
    request.set_size(size);
    request.set_epoch(epoch);
    v1::CreateJobResponse response;
    grpc::Status s = stub_->CreateJob(&context, request, &response);
    if (!s.ok()) return Annotate(s, absl::StrCat("creating job '", job, "'"), address_);
    if (response.has_change()) return ChangedWhileAttaching(job, rank, response.change());
    if (!response.token().empty()) job_token_ = response.token();  // we created it
  }
  grpc::ClientContext context;
  SetDeadline(context, timeout + absl::Seconds(5));  // the server times the attach out first
  AddToken(context, job_token_);
  v1::AttachRequest request;
  request.set_job(job);
  request.set_rank(rank);
  request.set_host(host);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  request.set_epoch(epoch);
  v1::AttachResponse response;
  grpc::Status s = stub_->Attach(&context, request, &response);
  if (!s.ok())
    return Annotate(s, absl::StrCat("attaching rank ", rank, " to job '", job, "'"), address_);
  if (response.has_change()) return ChangedWhileAttaching(job, rank, response.change());
  store_ = std::make_unique<GrpcStore>(*stub_, job, job_token_, response.membership().epoch());
  return FromWire(response.membership());
}

absl::Status GrpcControlChannel::OpenSession(const std::string& job, const std::vector<int>& ranks,
                                             int64_t epoch) {
  session_context_ = std::make_unique<grpc::ClientContext>();
  AddToken(*session_context_, job_token_);
  stream_ = stub_->Session(session_context_.get());
  v1::Up up;
  up.mutable_hello()->set_job(job);
  for (int r : ranks) up.mutable_hello()->add_ranks(r);
  up.mutable_hello()->set_epoch(epoch);
  return Write(up);
}

absl::Status GrpcControlChannel::Write(const v1::Up& up) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (closed_ || !stream_->Write(up)) {
    return absl::UnavailableError("the session stream to the coordinator is closed");
  }
  return absl::OkStatus();
}

absl::Status GrpcControlChannel::Send(const std::vector<TensorRequest>& requests) {
  v1::Up up;
  auto* batch = up.mutable_requests();
  for (const TensorRequest& r : requests) ToWire(r, batch->add_requests());
  return Write(up);
}

absl::Status GrpcControlChannel::SendWaitState(const WaitState& state) {
  v1::Up up;
  ToWire(state, up.mutable_wait_state());
  return Write(up);
}

absl::Status GrpcControlChannel::SendExecReport(const ExecReport& report) {
  v1::Up up;
  ToWire(report, up.mutable_exec_report());
  return Write(up);
}

absl::Status GrpcControlChannel::SendScheduleEnded(int64_t id, const std::vector<int>& ranks) {
  v1::Up up;
  up.mutable_schedule_ended()->set_schedule(id);
  for (int r : ranks) up.mutable_schedule_ended()->add_ranks(r);
  return Write(up);
}

absl::Status GrpcControlChannel::SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) {
  v1::Up up;
  up.mutable_schedule_deviated()->set_schedule(id);
  for (int r : ranks) up.mutable_schedule_deviated()->add_ranks(r);
  return Write(up);
}

absl::Status GrpcControlChannel::Goodbye(const std::vector<int>& ranks) {
  v1::Up up;
  for (int r : ranks) up.mutable_goodbye()->add_ranks(r);
  absl::Status status = Write(up);
  std::lock_guard<std::mutex> lock(write_mu_);
  if (!closed_) stream_->WritesDone();
  return status;
}

SessionEvent GrpcControlChannel::Receive() {
  SessionEvent event;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    if (closed_) return event;  // kClosed
  }
  v1::Down down;
  if (stream_->Read(&down)) {
    if (down.has_abort()) {
      event.kind = SessionEvent::Kind::kAbort;
      // With a change, an elastic job goes on without some ranks: the renumbering, for
      // elastic::Run.
      event.status = down.abort().has_change()
                         ? MembershipChanged(down.abort().reason(), down.abort().change())
                         : absl::AbortedError(down.abort().reason());
    } else {
      event.kind = SessionEvent::Kind::kResponses;
      event.down = FromWire(down);
    }
    return event;
  }
  std::lock_guard<std::mutex> lock(write_mu_);
  event.kind = SessionEvent::Kind::kClosed;
  if (!closed_) {
    closed_ = true;
    event.status = FromGrpc(stream_->Finish());
  }
  return event;
}

void GrpcControlChannel::Cancel() {
  if (session_context_) session_context_->TryCancel();
}

transport::Store& GrpcControlChannel::store() { return *store_; }

}  // namespace troika::internal
