#include "coordinator/session_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/wire.h"

namespace troika::coordinator {

SessionReactor::SessionReactor(JobRegistry& registry) : registry_(registry) { StartRead(&up_); }

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The peer half-closed, or the stream broke.
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(absl::OkStatus());
    return;
  }
  if (absl::Status status = Handle(up_); !status.ok()) {
    TROIKA_LOG(WARNING) << "session closed: " << status;
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(status);
    return;
  }
  StartRead(&up_);
}

absl::Status SessionReactor::Handle(const v1::Up& up) {
  if (up.has_hello()) {
    if (job_) return absl::FailedPreconditionError("a session says hello once");
    auto job = registry_.Find(up.hello().job());
    if (!job.ok()) return job.status();
    std::vector<int> ranks(up.hello().ranks().begin(), up.hello().ranks().end());
    if (absl::Status s = (*job)->OpenSession(ranks, up.hello().epoch(), this); !s.ok()) return s;
    job_ = *std::move(job);
    return absl::OkStatus();
  }
  if (!job_) return absl::FailedPreconditionError("a session must start with hello");
  if (up.has_requests()) {
    std::vector<TensorRequest> requests;
    requests.reserve(up.requests().requests_size());
    for (const v1::Request& r : up.requests().requests()) requests.push_back(FromWire(r));
    return job_->Submit(this, std::move(requests));
  }
  if (up.has_goodbye()) {
    std::vector<int> ranks(up.goodbye().ranks().begin(), up.goodbye().ranks().end());
    return job_->Goodbye(this, ranks);
  }
  return absl::InvalidArgumentError("empty session message");
}

void SessionReactor::Send(std::shared_ptr<const DownMessage> message) {
  v1::Down down;
  if (!message->abort_reason.empty()) {
    down.mutable_abort()->set_reason(message->abort_reason);
  } else {
    auto* batch = down.mutable_responses();
    for (const Response& r : message->responses) ToWire(r, batch->add_responses());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (finishing_) return;
  outbox_.push_back(std::move(down));
  if (!writing_) StartWriteLocked();
}

void SessionReactor::StartWriteLocked() {
  writing_ = true;
  StartWrite(&outbox_.front());
}

void SessionReactor::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  outbox_.pop_front();
  if (!ok) {
    outbox_.clear();
    FinishLocked(absl::UnavailableError("session stream broke while writing"));
    return;
  }
  if (!outbox_.empty()) {
    StartWriteLocked();
  } else if (finishing_ && !finished_) {
    finished_ = true;
    Finish(finish_status_);
  }
}

void SessionReactor::FinishLocked(const absl::Status& status) {
  if (finishing_) return;
  finishing_ = true;
  finish_status_ = ToGrpc(status);
  if (!writing_) {
    finished_ = true;
    Finish(finish_status_);
  }
}

void SessionReactor::OnDone() {
  if (job_) job_->CloseSession(this);
  delete this;
}

}  // namespace troika::coordinator
