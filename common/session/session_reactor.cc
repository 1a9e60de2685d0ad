#include "common/session/session_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/wire.h"

namespace troika::session {

SessionReactor::SessionReactor(Lookup lookup, std::string server, ControlStats* stats)
    : lookup_(std::move(lookup)), server_(std::move(server)), stats_(stats) {
  if (stats_) stats_->sessions_opened.fetch_add(1, std::memory_order_relaxed);
  StartRead(&up_);
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The peer half-closed, or the stream broke.
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(absl::OkStatus());
    return;
  }
  if (stats_) {
    stats_->up_messages.fetch_add(1, std::memory_order_relaxed);
    stats_->up_bytes.fetch_add(static_cast<int64_t>(up_.ByteSizeLong()), std::memory_order_relaxed);
  }
  if (absl::Status status = Handle(up_); !status.ok()) {
    TROIKA_LOG(WARNING) << "session closed: " << status;
    std::lock_guard<std::mutex> lock(mu_);
    if (!finishing_) verdict_ = status;
    FinishLocked(absl::Status(status.code(),
                              absl::StrCat(server_, " ended the session: ", status.message())));
    return;
  }
  StartRead(&up_);
}

absl::Status SessionReactor::Handle(const v1::Up& up) {
  if (up.has_hello()) {
    if (handler_) return absl::FailedPreconditionError("a session says hello once");
    auto handler = lookup_(up.hello().job());
    if (!handler.ok()) return handler.status();
    std::vector<int> ranks(up.hello().ranks().begin(), up.hello().ranks().end());
    absl::Status s;
    if (up.hello().has_resume()) {
      const SessionResume resume{up.hello().resume().received(), up.hello().resume().max_cache_id(),
                                 up.hello().resume().max_schedule_id()};
      s = (*handler)->ResumeSession(ranks, up.hello().epoch(), resume, this);
    } else {
      s = (*handler)->OpenSession(ranks, up.hello().epoch(), this);
    }
    if (!s.ok()) return s;
    handler_ = *std::move(handler);
    return absl::OkStatus();
  }
  if (!handler_) return absl::FailedPreconditionError("a session must start with hello");
  switch (up.kind_case()) {
    case v1::Up::kRequests: {
      std::vector<TensorRequest> requests;
      requests.reserve(up.requests().requests_size());
      for (const v1::Request& r : up.requests().requests()) {
        if (absl::Status s = AppendFromWire(r, &requests); !s.ok()) return s;
      }
      return handler_->Submit(this, std::move(requests));
    }
    case v1::Up::kGoodbye: {
      std::vector<int> ranks(up.goodbye().ranks().begin(), up.goodbye().ranks().end());
      return handler_->Goodbye(this, ranks);
    }
    case v1::Up::kRankExit:
      return handler_->ReportExit(this, FromWire(up.rank_exit()));
    case v1::Up::kWaitState:
      return handler_->ReportWaitState(this, FromWire(up.wait_state()));
    case v1::Up::kExecReport:
      return handler_->ReportExec(this, FromWire(up.exec_report()));
    case v1::Up::kScheduleEnded: {
      std::vector<int> ranks(up.schedule_ended().ranks().begin(),
                             up.schedule_ended().ranks().end());
      return handler_->EndSchedule(this, up.schedule_ended().schedule(), ranks);
    }
    case v1::Up::kScheduleDeviated: {
      std::vector<int> ranks(up.schedule_deviated().ranks().begin(),
                             up.schedule_deviated().ranks().end());
      return handler_->DeviateSchedule(this, up.schedule_deviated().schedule(), ranks);
    }
    case v1::Up::kReplay: {
      std::vector<Response> responses;
      responses.reserve(up.replay().responses_size());
      for (const v1::Response& r : up.replay().responses()) responses.push_back(FromWire(r));
      return handler_->Replay(this, up.replay().seq(), std::move(responses));
    }
    default:
      return absl::InvalidArgumentError("empty session message");
  }
}

void SessionReactor::Send(std::shared_ptr<const DownMessage> message) {
  v1::Down down;
  ToWire(*message, &down);
  if (stats_) {
    stats_->down_messages.fetch_add(1, std::memory_order_relaxed);
    stats_->down_bytes.fetch_add(static_cast<int64_t>(down.ByteSizeLong()),
                                 std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (finishing_) return;
  outbox_.push_back(std::move(down));
  if (!writing_) StartWriteLocked();
}

void SessionReactor::End(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(status);
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
    // The stream is broken: nothing more can be written, and Finish() must still be called
    // (even if finishing began before this write failed) or the server never lets go of it.
    outbox_.clear();
    if (!finishing_) {
      finishing_ = true;
      finish_status_ = ToGrpc(absl::UnavailableError("session stream broke while writing"));
    }
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
  if (handler_) handler_->CloseSession(this, verdict_);
  delete this;
}

}  // namespace troika::session
