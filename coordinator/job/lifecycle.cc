#include "coordinator/job/lifecycle.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/wire.h"

namespace troika::coordinator {

const char* JobStateName(Lifecycle::State state) {
  switch (state) {
    case Lifecycle::State::kAttaching:
      return "attaching";
    case Lifecycle::State::kRunning:
      return "running";
    case Lifecycle::State::kFinished:
      return "finished";
    case Lifecycle::State::kAborted:
      return "aborted";
  }
  return "unknown";
}

Lifecycle::Lifecycle(std::string job, Roster& roster, Sessions& sessions, Generations& generations,
                     KvStore& kv, Scheduler& scheduler, std::function<void(AbortCause)> on_abort,
                     std::function<void()> on_done)
    : job_(std::move(job)),
      roster_(roster),
      sessions_(sessions),
      generations_(generations),
      kv_(kv),
      scheduler_(scheduler),
      on_abort_(std::move(on_abort)),
      on_done_(std::move(on_done)) {}

absl::Status Lifecycle::NotTaking(absl::string_view what) const {
  return absl::FailedPreconditionError(
      absl::StrCat("job '", job_, "' is ", JobStateName(state_),
                   state_ == State::kAborted ? absl::StrCat(" (", abort_reason_, ")") : "",
                   what.empty() ? "" : "; ", what));
}

absl::Status Lifecycle::CheckRunning(absl::string_view what) const {
  if (detached_) return absl::UnavailableError("the coordinator is restarting");
  return running() ? absl::OkStatus() : NotTaking(what);
}

absl::Status Lifecycle::CheckNotOver(absl::string_view what) const {
  return over() ? NotTaking(what) : absl::OkStatus();
}

absl::Status Lifecycle::CheckAttachable(absl::string_view what) const {
  if (!generation_ended()) return CheckNotOver(what);
  return MembershipChanged(abort_message_->abort_reason, *abort_message_->membership_change);
}

void Lifecycle::Run() {
  if (state_ == State::kAttaching) state_ = State::kRunning;
}

bool Lifecycle::FinishIfAllDeparted() {
  if (state_ != State::kRunning || !roster_.all_departed()) return false;
  state_ = State::kFinished;
  TROIKA_LOG(INFO) << "job '" << job_ << "' finished";
  generations_.FailJoiners(absl::FailedPreconditionError(
      absl::StrCat("job '", job_, "' finished before this node was admitted")));
  return true;
}

bool Lifecycle::Abort(AbortCause cause, const std::string& reason, std::optional<RankExit> exit,
                      bool finished_too) {
  if (state_ == State::kAborted || (state_ == State::kFinished && !finished_too)) return false;
  state_ = State::kAborted;
  abort_reason_ = reason;
  sessions_.CancelResync();
  if (on_abort_) on_abort_(cause);
  const std::string message = absl::StrCat("job '", job_, "' aborted: ", reason);
  TROIKA_LOG(WARNING) << message;
  auto down = std::make_shared<DownMessage>();
  down->abort_reason = message;
  down->abort_cause = std::move(exit);
  abort_message_ = down;
  sessions_.Broadcast(std::move(down));
  FailWaiting(absl::AbortedError(message));
  kv_.Close(absl::AbortedError(message));
  generations_.AbortForming(cause, reason);
  return true;
}

std::shared_ptr<const DownMessage> Lifecycle::EndGeneration(MembershipChange change,
                                                            const std::string& reason,
                                                            std::optional<RankExit> exit) {
  state_ = State::kAborted;
  abort_reason_ =
      absl::StrCat(reason, "; the job goes on with ", change.size,
                   change.size == 1 ? " rank" : " ranks", " as generation ", change.epoch);
  const std::string message =
      absl::StrCat("membership of job '", job_, "' changed: ", abort_reason_);
  TROIKA_LOG(WARNING) << message;
  // Ranks still attaching (a generation ended at its attach timeout) learn the renumbering
  // from their attach's answer, and so do those that come later. The joining nodes wait on
  // in the successor.
  roster_.FailWaiters(MembershipChanged(message, change));
  auto down = std::make_shared<DownMessage>();
  down->abort_reason = message;
  down->abort_cause = std::move(exit);
  down->membership_change = std::move(change);
  abort_message_ = down;
  sessions_.Broadcast(down);
  kv_.Close(absl::AbortedError(message));
  return down;
}

void Lifecycle::Detach(const std::string& reason) {
  if (over()) return;
  detached_ = true;
  const absl::Status status = absl::UnavailableError(reason);
  sessions_.EndAll(status);  // agents reconnect and resume
  FailWaiting(status);
  kv_.Close(status);
}

void Lifecycle::FailWaiting(const absl::Status& status) {
  roster_.FailWaiters(status);
  generations_.FailJoiners(status);
}

bool Lifecycle::done() const {
  if (detached_) return false;  // kept for a restarted coordinator
  const bool abandoned = state_ == State::kAttaching && !roster_.has_hosts();
  return (over() || abandoned) && sessions_.empty() && !roster_.has_waiters();
}

void Lifecycle::MaybeDone() {
  if (done_reported_ || !done()) return;
  done_reported_ = true;
  // Posted, not called: the owner may drop the job, and with it the lock its caller holds.
  scheduler_.RunAfter(absl::ZeroDuration(), on_done_);
}

}  // namespace troika::coordinator
