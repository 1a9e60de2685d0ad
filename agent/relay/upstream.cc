#include "agent/relay/upstream.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/wire.h"
#include "grpcpp/grpcpp.h"

namespace troika::agent {
namespace {

std::shared_ptr<const DownMessage> ToDownMessage(const v1::Down& down) {
  return std::make_shared<const DownMessage>(FromWire(down));
}

}  // namespace

// The session stream. Its reactions run on gRPC threads, never inline from a Start* call.
class Upstream::Session final : public grpc::ClientBidiReactor<v1::Up, v1::Down> {
 public:
  Session(Upstream& owner, DownCallback on_down) : owner_(owner), on_down_(std::move(on_down)) {}

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream is over; OnDone says why
    on_down_(ToDownMessage(down_));
    StartRead(&down_);
  }
  void OnWriteDone(bool ok) override { owner_.OnWriteDone(ok); }
  void OnDone(const grpc::Status& status) override { owner_.OnSessionDone(*this, status); }

  grpc::ClientContext context;
  v1::Down down_;
  bool over = false;  // guarded by the owner's mu_: OnDone is returning; it may be deleted

 private:
  Upstream& owner_;
  const DownCallback on_down_;
};

template <typename Request, typename Response>
struct Upstream::Call {
  grpc::ClientContext context;
  Request request;
  Response response;
};

absl::StatusOr<std::unique_ptr<Upstream>> Upstream::Create(UpstreamOptions options) {
  absl::StatusOr<CoordinatorAddress> address = ParseCoordinatorAddress(options.address);
  if (!address.ok()) return address.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Pings every half timeout, each answered within the other half, or the connection dies.
  const int half_ms =
      std::max(100, static_cast<int>(absl::ToInt64Milliseconds(options.liveness_timeout) / 2));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, half_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, half_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A coordinator that is still starting is found quickly (RegisterNode waits for it).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  auto credentials = MakeChannelCredentials(options.tls, options.address);
  if (!credentials.ok()) return credentials.status();
  auto channel = grpc::CreateCustomChannel(options.address, *credentials, args);
  return std::unique_ptr<Upstream>(
      new Upstream(std::move(options), *std::move(address), std::move(channel)));
}

Upstream::Upstream(UpstreamOptions options, CoordinatorAddress address,
                   std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      address_(std::move(address)),
      channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)),
      job_token_(options_.job_token) {}

Upstream::~Upstream() {
  Cancel();
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return calls_.empty() && live_sessions_ == 0; });
}

absl::Status Upstream::WaitForConnection(absl::Duration timeout,
                                         const std::function<bool()>& cancelled) {
  if (absl::Status s = CheckCoordinatorEndpoint(address_, timeout); !s.ok()) return s;
  return WaitForCoordinator(channel_, address_, timeout, cancelled);
}

absl::Status Upstream::Describe(const grpc::Status& status, const std::string& what) const {
  absl::Status s = FromGrpc(status);
  if (s.code() == absl::StatusCode::kUnavailable ||
      (s.code() == absl::StatusCode::kDeadlineExceeded && s.message() == "Deadline Exceeded")) {
    // gRPC's own transport-level failure, not an answer from the coordinator.
    return absl::UnavailableError(absl::StrCat(what, ": cannot reach the coordinator at ",
                                               options_.address, " (", s.message(), ")"));
  }
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

void Upstream::RegisterNode(const std::string& job, int size, const std::string& host, int nproc,
                            int node_rank, absl::Duration timeout, RegisterCallback done,
                            const std::string& join_id) {
  v1::RegisterNodeRequest request;
  request.set_job(job);
  request.set_size(size);
  request.set_host(host);
  request.set_nproc(nproc);
  request.set_node_rank(node_rank);
  request.set_min_size(options_.min_size);
  request.set_max_size(options_.max_size);
  request.set_join_id(join_id);
  StartUnary<v1::RegisterNodeRequest, v1::RegisterNodeResponse>(
      request, absl::Now() + timeout,
      [this](auto* context, auto* req, auto* resp, auto callback) {
        context->set_wait_for_ready(true);  // the coordinator may still be starting
        stub_->async()->RegisterNode(context, req, resp, std::move(callback));
      },
      [this, done = std::move(done), what = absl::StrCat("registering with job '", job, "'")](
          const absl::Status& s, v1::RegisterNodeResponse& response) {
        if (!s.ok()) return done(Describe(ToGrpc(s), what));
        if (!response.token().empty()) {  // this node created the job
          std::lock_guard<std::mutex> lock(mu_);
          job_token_ = response.token();
        }
        NodeBlock block{
            response.first_rank(), response.node_rank(), response.size(), response.epoch(), {}};
        for (const v1::Admitted& a : response.admitted()) block.admitted.push_back(FromWire(a));
        done(std::move(block));
      });
}

template <typename Request, typename Response, typename Start>
void Upstream::StartUnary(const Request& request, absl::Time deadline, Start start,
                          UnaryCallback<Response> done) {
  auto call = std::make_shared<Call<Request, Response>>();
  call->request = request;
  if (deadline != absl::InfiniteFuture()) call->context.set_deadline(absl::ToChronoTime(deadline));
  bool started = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job_token_.empty()) call->context.AddMetadata(kJobTokenHeader, job_token_);
    if (!cancelled_) started = calls_.emplace(&call->context, call).second;
  }
  if (!started) {
    done(absl::CancelledError("the agent is shutting down"), call->response);
    return;
  }
  // The callback may run inline, here: no lock is held.
  start(&call->context, &call->request, &call->response,
        [this, call, done = std::move(done)](grpc::Status status) {
          done(FromGrpc(status), call->response);
          std::lock_guard<std::mutex> lock(mu_);
          calls_.erase(&call->context);
          idle_cv_.notify_all();
        });
}

void Upstream::Attach(const std::string& job, const std::vector<int>& ranks,
                      const std::string& host, int64_t epoch, absl::Duration timeout,
                      AttachCallback done, bool again) {
  v1::AttachRequest request;
  request.set_job(job);
  request.set_rank(ranks.front());
  for (size_t i = 1; i < ranks.size(); ++i) request.add_more_ranks(ranks[i]);
  request.set_host(host);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  request.set_epoch(epoch);
  request.set_again(again);
  auto describe = [this, what = absl::StrCat("attaching to job '", job, "'")](
                      const absl::Status& s) { return Describe(ToGrpc(s), what); };
  StartUnary<v1::AttachRequest, v1::AttachResponse>(
      request, absl::Now() + timeout + absl::Seconds(5),  // the coordinator times out first
      [this](auto* context, auto* req, auto* resp, auto callback) {
        stub_->async()->Attach(context, req, resp, std::move(callback));
      },
      [done = std::move(done), describe, job](const absl::Status& s, v1::AttachResponse& response) {
        if (!s.ok()) return done(describe(s));
        if (response.has_change()) {
          return done(MembershipChanged(
              absl::StrCat("job '", job, "' went on as generation ", response.change().epoch(),
                           " of ", response.change().size(), " ranks while this node attached"),
              response.change()));
        }
        std::vector<Membership> memberships = {FromWire(response.membership())};
        for (const v1::Membership& m : response.more()) memberships.push_back(FromWire(m));
        done(std::move(memberships));
      });
}

template <typename Request, typename Response, typename Start>
void Upstream::ForwardKv(const Request& request, absl::Time deadline, Start start,
                         UnaryCallback<Response> done) {
  StartUnary<Request, Response>(
      request, deadline,
      [start](auto* context, auto* req, auto* resp, auto callback) {
        context->set_wait_for_ready(true);  // a restarting coordinator is waited for
        start(context, req, resp, std::move(callback));
      },
      [this, request, deadline, start, done = std::move(done)](const absl::Status& s,
                                                               Response& response) {
        // The connection broke under the call, or a stopping coordinator cut it: it restarts.
        if ((absl::IsUnavailable(s) || (absl::IsCancelled(s) && !cancelled())) &&
            absl::Now() < deadline) {
          return ForwardKv<Request, Response>(request, deadline, start, done);
        }
        if constexpr (std::is_same_v<Request, v1::KvSetRequest>) {
          if (s.ok()) RememberKvSet(request);
        }
        done(s, response);
      });
}

void Upstream::KvSet(const v1::KvSetRequest& request, absl::Time deadline,
                     UnaryCallback<v1::KvSetResponse> done) {
  ForwardKv<v1::KvSetRequest, v1::KvSetResponse>(
      request, deadline,
      [this](auto* context, auto* req, auto* resp, auto callback) {
        stub_->async()->KvSet(context, req, resp, std::move(callback));
      },
      std::move(done));
}

void Upstream::KvGet(const v1::KvGetRequest& request, absl::Time deadline,
                     UnaryCallback<v1::KvGetResponse> done) {
  ForwardKv<v1::KvGetRequest, v1::KvGetResponse>(
      request, deadline,
      [this](auto* context, auto* req, auto* resp, auto callback) {
        stub_->async()->KvGet(context, req, resp, std::move(callback));
      },
      std::move(done));
}

void Upstream::KvWait(const v1::KvWaitRequest& request, absl::Time deadline,
                      UnaryCallback<v1::KvWaitResponse> done) {
  ForwardKv<v1::KvWaitRequest, v1::KvWaitResponse>(
      request, deadline,
      [this](auto* context, auto* req, auto* resp, auto callback) {
        stub_->async()->KvWait(context, req, resp, std::move(callback));
      },
      std::move(done));
}

void Upstream::RememberKvSet(const v1::KvSetRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_sets_[request.key()] = request;
}

void Upstream::ForgetKvSets() {
  std::lock_guard<std::mutex> lock(mu_);
  kv_sets_.clear();
}

void Upstream::ReplayKvSets(absl::Time deadline, std::function<void(const absl::Status&)> done) {
  std::vector<v1::KvSetRequest> requests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, request] : kv_sets_) requests.push_back(request);
  }
  if (requests.empty()) return done(absl::OkStatus());
  struct Progress {
    std::mutex mu;
    size_t left;
    absl::Status first_error;
    std::function<void(const absl::Status&)> done;
  };
  auto progress = std::make_shared<Progress>();
  progress->left = requests.size();
  progress->done = std::move(done);
  for (const v1::KvSetRequest& request : requests) {
    StartUnary<v1::KvSetRequest, v1::KvSetResponse>(
        request, deadline,
        [this](auto* context, auto* req, auto* resp, auto callback) {
          context->set_wait_for_ready(true);
          stub_->async()->KvSet(context, req, resp, std::move(callback));
        },
        [progress](const absl::Status& s, v1::KvSetResponse&) {
          std::unique_lock<std::mutex> lock(progress->mu);
          if (!s.ok() && progress->first_error.ok()) progress->first_error = s;
          if (--progress->left > 0) return;
          const absl::Status result = progress->first_error;
          lock.unlock();
          progress->done(result);
        });
  }
}

void Upstream::OpenSession(const std::string& job, const std::vector<int>& ranks, int64_t epoch,
                           const std::optional<SessionResume>& resume, DownCallback on_down,
                           ClosedCallback on_closed) {
  v1::Up hello;
  hello.mutable_hello()->set_job(job);
  for (int rank : ranks) hello.mutable_hello()->add_ranks(rank);
  hello.mutable_hello()->set_epoch(epoch);
  if (resume) {
    hello.mutable_hello()->mutable_resume()->set_received(resume->received);
    hello.mutable_hello()->mutable_resume()->set_max_cache_id(resume->max_cache_id);
    hello.mutable_hello()->mutable_resume()->set_max_schedule_id(resume->max_schedule_id);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    TROIKA_CHECK(session_ == nullptr || session_done_) << "one session at a time";
    if (!cancelled_) {
      on_closed_ = std::move(on_closed);
      if (session_ != nullptr) {  // a session again: start from a clean stream
        outbox_.clear();
        writing_ = closing_ = writes_done_ = false;
      }
      // Sessions that are over go (a job formed anew many times opens as many).
      std::erase_if(sessions_, [](const std::unique_ptr<Session>& s) { return s->over; });
      sessions_.push_back(std::make_unique<Session>(*this, std::move(on_down)));
      session_ = sessions_.back().get();
      session_done_ = false;
      ++live_sessions_;
      if (!job_token_.empty()) session_->context.AddMetadata(kJobTokenHeader, job_token_);
      outbox_.push_front(std::move(hello));
      // Reactions never run inline from these calls, so the lock may be held.
      stub_->async()->Session(&session_->context, session_);
      session_->StartRead(&session_->down_);
      StartNextWriteLocked();
      session_->StartCall();
      return;
    }
  }
  if (on_closed) on_closed(absl::CancelledError("the agent is shutting down"));
}

void Upstream::CloseSession() {
  std::lock_guard<std::mutex> lock(mu_);
  closing_ = true;
  StartNextWriteLocked();
}

void Upstream::Cancel() {
  // The references keep the calls alive while they are cancelled.
  std::vector<std::pair<grpc::ClientContext*, std::shared_ptr<void>>> calls;
  Session* session = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    calls.assign(calls_.begin(), calls_.end());
    if (session_ && !session_done_) session = session_;  // lives as long as we do
  }
  // Without the lock: a unary call's callback may run inline from TryCancel.
  for (auto& [context, call] : calls) context->TryCancel();
  if (session != nullptr) session->context.TryCancel();
}

void Upstream::SendRequests(v1::RequestBatch batch) {
  v1::Up up;
  *up.mutable_requests() = std::move(batch);
  Enqueue(std::move(up));
}

void Upstream::SendGoodbye(const std::vector<int>& ranks) {
  v1::Up up;
  for (int rank : ranks) up.mutable_goodbye()->add_ranks(rank);
  Enqueue(std::move(up));
}

void Upstream::SendWaitState(const WaitState& state) {
  v1::Up up;
  ToWire(state, up.mutable_wait_state());
  Enqueue(std::move(up));
}

void Upstream::SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) {
  v1::Up up;
  up.mutable_schedule_deviated()->set_schedule(id);
  for (int rank : ranks) up.mutable_schedule_deviated()->add_ranks(rank);
  Enqueue(std::move(up));
}

void Upstream::SendScheduleEnded(int64_t id, const std::vector<int>& ranks) {
  v1::Up up;
  up.mutable_schedule_ended()->set_schedule(id);
  for (int rank : ranks) up.mutable_schedule_ended()->add_ranks(rank);
  Enqueue(std::move(up));
}

void Upstream::SendExecReport(const ExecReport& report) {
  v1::Up up;
  ToWire(report, up.mutable_exec_report());
  Enqueue(std::move(up));
}

void Upstream::SendReplay(v1::ResponseBatch batch) {
  v1::Up up;
  *up.mutable_replay() = std::move(batch);
  Enqueue(std::move(up));
}

void Upstream::SendRankExit(const RankExit& exit) {
  v1::Up up;
  ToWire(exit, up.mutable_rank_exit());
  Enqueue(std::move(up));
}

void Upstream::Enqueue(v1::Up up) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_ || session_done_ || cancelled_) return;
  outbox_.push_back(std::move(up));
  StartNextWriteLocked();
}

void Upstream::StartNextWriteLocked() {
  if (!session_ || session_done_ || writing_) return;
  if (!outbox_.empty()) {
    writing_ = true;
    session_->StartWrite(&outbox_.front());
  } else if (closing_ && !writes_done_) {
    writes_done_ = true;
    session_->StartWritesDone();
  }
}

void Upstream::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  outbox_.pop_front();
  if (!ok) {
    outbox_.clear();  // the stream broke; OnDone follows and says why
    writes_done_ = true;
    closing_ = true;  // nothing more is written
    return;
  }
  StartNextWriteLocked();
}

void Upstream::OnSessionDone(Session& session, const grpc::Status& status) {
  ClosedCallback on_closed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_closed = std::move(on_closed_);
    outbox_.clear();
    writing_ = false;
    session_done_ = true;  // another session may open from on_closed on
  }
  if (on_closed) {
    on_closed(status.ok() ? absl::OkStatus() : Describe(status, "the session stream ended"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  session.over = true;  // nothing touches it from here on
  --live_sessions_;
  idle_cv_.notify_all();
}

}  // namespace troika::agent
