// Handle and OpState: completion of one operation.

#include <algorithm>
#include <atomic>

#include "absl/time/clock.h"
#include "libclient/handles/op_state.h"
#include "libclient/handles/step_clock.h"
#include "libclient/handles/wait_tracker.h"
#include "troika/troika.h"

namespace troika {
namespace internal {

bool OpState::Finish(absl::Status s, bool refusal) {
  uint64_t polled = 0;
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return false;
    status = std::move(s);
    refused = refusal;
    done.store(true, std::memory_order_release);
    polled = poll_id;
    callbacks.swap(on_done);
  }
  cv.notify_all();
  if (polled != 0) {
    // Polled while not done: end the run (and any registration as blocked) now, not a lease
    // later. Outside mu: the tracker's sink takes other locks.
    if (std::shared_ptr<WaitTracker> t = tracker.lock()) t->PollEnded(polled);
  }
  if (step_clock) step_clock->OpFinished();
  // A callback hands the completion to the application (a graph's kernel, whose downstream
  // ops may submit what depends on the result; an eager op's waiting thread): seen, as a
  // Wait's is (WaitTracker::Observed), and before the callback runs, so that whatever it
  // leads to is submitted after the count moved.
  if (!callbacks.empty()) {
    if (std::shared_ptr<WaitTracker> t = tracker.lock()) t->Observed();
  }
  // `status` is final once done: read without mu.
  for (auto& callback : callbacks) callback(status);
  return true;
}

uint8_t* OpState::SetOutput(std::shared_ptr<uint8_t> buffer, size_t bytes) {
  output = std::move(buffer);
  output_bytes = bytes;
  return output.get();
}

namespace {

// Ids of polled ops with their wait tracker (OpState::poll_id): unique in the process.
uint64_t NextPollId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// Waits until `state` is done (true) or `deadline` passes (false). A wait still going after
// kBlockedAfter registers with the op's wait tracker until it ends.
bool WaitUntil(OpState& state, absl::Time deadline) {
  auto done = [&] { return state.done.load(); };
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (state.done) return true;
  }
  // About to wait: requests held back for the send cycle leave now (the tracker's flush takes
  // the controller's lock; never under an op's).
  if (std::shared_ptr<WaitTracker> tracker = state.tracker.lock()) tracker->Waiting(state.name);
  std::unique_lock<std::mutex> lock(state.mu);
  const absl::Time now = absl::Now();
  const absl::Time blocked_at = std::min(deadline, now + kBlockedAfter);
  if (state.cv.wait_for(lock, absl::ToChronoNanoseconds(blocked_at - now), done)) return true;
  if (blocked_at == deadline) return false;
  std::shared_ptr<WaitTracker> tracker = state.tracker.lock();
  uint64_t token = 0;
  if (tracker) {
    lock.unlock();  // the tracker's sink takes other locks; never under an op's
    token = tracker->Blocked(state.name);
    lock.lock();
  }
  bool finished = true;
  if (deadline == absl::InfiniteFuture()) {
    state.cv.wait(lock, done);
  } else {
    finished = state.cv.wait_for(
        lock, absl::ToChronoNanoseconds(std::max(deadline - absl::Now(), absl::ZeroDuration())),
        done);
  }
  lock.unlock();
  if (tracker) tracker->Unblocked(token);
  return finished;
}

// The caller saw `state` complete: tells the op's wait tracker (WaitTracker::Observed).
void Observed(const OpState& state) {
  if (std::shared_ptr<WaitTracker> tracker = state.tracker.lock()) tracker->Observed();
}

}  // namespace
}  // namespace internal

namespace {
const std::vector<int64_t> kEmpty;
}  // namespace

std::optional<absl::Status> Handle::Peek() const {
  if (!state_) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return std::nullopt;
  return state_->status;
}

std::optional<absl::Status> Handle::Refusal() const {
  if (!state_) return std::nullopt;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->refused) return std::nullopt;
  return state_->status;
}

bool Handle::Poll() const {
  if (!state_) return true;
  internal::OpState& state = *state_;
  uint64_t id = 0;
  absl::Time now;
  bool done;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    done = state.done;
    // Not done: a run of polls counts as waiting (internal::WaitTracker::Polled). The tracker
    // hears of it at most every kPollNoticeEvery, so spinning costs this lock and a clock read.
    if (!done) {
      now = absl::Now();
      if (now - state.poll_noticed < internal::kPollNoticeEvery) return false;
      state.poll_noticed = now;
      if (state.poll_id == 0) state.poll_id = internal::NextPollId();
      id = state.poll_id;
    }
  }
  if (done) {
    internal::Observed(state);
    return true;
  }
  std::shared_ptr<internal::WaitTracker> tracker = state.tracker.lock();
  if (!tracker) return false;
  tracker->Waiting(
      state.name);  // a poll wants progress: requests held for the send cycle leave now
  tracker->Polled(id, state.name, now);  // outside mu: the tracker's sink takes other locks
  // If the op completed meanwhile, Complete() may have ended the run before Polled renewed it:
  // end it again.
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (!state.done) return false;
  }
  tracker->PollEnded(id);
  tracker->Observed();
  return true;
}

absl::Status Handle::Wait() const {
  if (!state_) return absl::FailedPreconditionError("empty handle");
  absl::Status status;
  if (state_->done.load(std::memory_order_acquire)) {
    // Done already (a synchronous submission's, most often): no lock.
    status = state_->status;  // final once done
  } else {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->done) {
      lock.unlock();
      internal::WaitUntil(*state_, absl::InfiniteFuture());
      lock.lock();
    }
    status = state_->status;  // final once done
  }
  internal::Observed(*state_);
  return status;
}

absl::Status Handle::WaitFor(absl::Duration timeout) const {
  if (!state_) return absl::FailedPreconditionError("empty handle");
  if (!internal::WaitUntil(*state_, absl::Now() + timeout)) {
    return absl::DeadlineExceededError("operation still in progress");
  }
  internal::Observed(*state_);
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->status;
}

void Handle::OnDone(std::function<void(const absl::Status&)> callback, bool caller_waits) const {
  if (!state_) {
    callback(absl::FailedPreconditionError("empty handle"));
    return;
  }
  std::shared_ptr<internal::WaitTracker> tracker = state_->tracker.lock();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done) tracker = nullptr;  // nothing to wait for
  }
  if (tracker && caller_waits) {
    // Someone now waits for it: requests held back for the send cycle leave now, as for a
    // Wait (the tracker takes the controller's lock: never under an op's). Not for a callback
    // alone (a graph's kernel): the rank goes on computing, and its requests leave with the
    // send cycle's batch.
    tracker->Waiting(state_->name);
    // Registered before the callback can run, so that it is unregistered by it.
    const uint64_t token = tracker->BlockedFrom(state_->name, absl::Now());
    callback = [weak = state_->tracker, token,
                inner = std::move(callback)](const absl::Status& status) {
      if (std::shared_ptr<internal::WaitTracker> t = weak.lock()) t->Unblocked(token);
      inner(status);
    };
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) {
      state_->on_done.push_back(std::move(callback));
      return;
    }
  }
  internal::Observed(*state_);
  callback(state_->status);  // final once done
}

absl::Status Handle::WaitOnStream(void* stream) const {
  if (!state_) return absl::FailedPreconditionError("empty handle");
  if (!state_->on_device) {
    return absl::FailedPreconditionError(
        "WaitOnStream is for GPU operations; this one runs on the host (use Wait)");
  }
  if (std::shared_ptr<internal::WaitTracker> tracker = state_->tracker.lock()) {
    tracker->Waiting(state_->name);  // held requests leave now
  }
  std::function<void(void*)> waiter;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done || state_->stream_waiter != nullptr; });
    if (!state_->stream_waiter) return state_->status;  // failed before it was issued
    waiter = state_->stream_waiter;
  }
  internal::Observed(*state_);  // what the stream runs next may depend on the result
  waiter(stream);
  return absl::OkStatus();
}

const void* Handle::output() const { return state_ ? state_->output.get() : nullptr; }
size_t Handle::output_bytes() const { return state_ ? state_->output_bytes : 0; }
const std::vector<int64_t>& Handle::output_shape() const {
  return state_ ? state_->output_shape : kEmpty;
}
const std::vector<int64_t>& Handle::received_splits() const {
  return state_ ? state_->received_splits : kEmpty;
}
int Handle::joined_last_rank() const { return state_ ? state_->joined_last_rank : -1; }

}  // namespace troika
