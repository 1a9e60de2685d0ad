#include "agent/node/node_end.h"

namespace troika::agent {

bool NodeEnd::Lost(std::string why) {
  if (stopping()) return false;
  lost_ = std::move(why);
  return true;
}

absl::Status NodeEnd::Refusal() const {
  if (abort_ != nullptr) return absl::AbortedError(abort_->abort_reason);
  if (!lost_.empty()) return absl::UnavailableError(lost_);
  if (!attach_error_.empty()) return absl::FailedPreconditionError(attach_error_);
  if (closing_) return absl::CancelledError("the troika-agent is shutting down");
  return absl::OkStatus();
}

}  // namespace troika::agent
