// Handle and OpState: completion of one operation.

#include "absl/time/clock.h"
#include "libclient/op_state.h"
#include "troika/troika.h"

namespace troika {
namespace internal {

bool OpState::Complete(absl::Status s) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return false;
    done = true;
    status = std::move(s);
  }
  cv.notify_all();
  return true;
}

uint8_t* OpState::SetOutput(std::shared_ptr<uint8_t> buffer, size_t bytes) {
  output = std::move(buffer);
  output_bytes = bytes;
  return output.get();
}

}  // namespace internal

namespace {
const std::vector<int64_t> kEmpty;
}  // namespace

bool Handle::Poll() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

absl::Status Handle::Wait() const {
  if (!state_) return absl::FailedPreconditionError("empty handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

absl::Status Handle::WaitFor(absl::Duration timeout) const {
  if (!state_) return absl::FailedPreconditionError("empty handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                           [&] { return state_->done; })) {
    return absl::DeadlineExceededError("operation still in progress");
  }
  return state_->status;
}

const void* Handle::output() const { return state_ ? state_->output.get() : nullptr; }
size_t Handle::output_bytes() const { return state_ ? state_->output_bytes : 0; }
const std::vector<int64_t>& Handle::output_shape() const {
  return state_ ? state_->output_shape : kEmpty;
}
const std::vector<int64_t>& Handle::received_splits() const {
  return state_ ? state_->received_splits : kEmpty;
}

}  // namespace troika
