#include "libclient/handles/step_clock.h"

#include "common/logging.h"

namespace troika::internal {

void StepClock::AdvanceLocked() {
  // Between steps nothing is charged and the clock is not read: a step's start sets last_.
  if (!in_step_.load(std::memory_order_relaxed)) return;
  const absl::Time now = clock_.Now();
  // A wall clock stepped back charges nothing rather than a negative span.
  const absl::Duration elapsed = now > last_ ? now - last_ : absl::ZeroDuration();
  last_ = now;
  if (busy_.load(std::memory_order_relaxed) > 0) {
    step_.communication += elapsed;
  } else if (in_flight_.load(std::memory_order_relaxed) > 0) {
    step_.negotiation_wait += elapsed;
  } else {
    step_.compute += elapsed;
  }
}

void StepClock::Count(std::atomic<int64_t>& count, int64_t delta, const char* what) {
  int64_t before;
  if (!in_step_.load(std::memory_order_acquire)) {
    before = count.fetch_add(delta, std::memory_order_relaxed);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    AdvanceLocked();
    before = count.fetch_add(delta, std::memory_order_relaxed);
  }
  TROIKA_CHECK(before + delta >= 0) << "StepClock: " << what;
}

void StepClock::OpStarted() { Count(in_flight_, 1, "OpStarted"); }

void StepClock::OpFinished() { Count(in_flight_, -1, "an operation finished that never started"); }

void StepClock::ExecBegin() { Count(busy_, 1, "ExecBegin"); }

void StepClock::ExecEnd() { Count(busy_, -1, "ExecEnd without ExecBegin"); }

void StepClock::StartStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_step_.load(std::memory_order_relaxed)) {
    AdvanceLocked();
  } else {
    last_ = clock_.Now();
  }
  StartLocked();
}

void StepClock::StartLocked() {
  in_step_.store(true, std::memory_order_release);  // from last_
  step_ = StepSample{};
}

std::optional<StepSample> StepClock::EndLocked() {
  AdvanceLocked();
  if (!in_step_.load(std::memory_order_relaxed)) return std::nullopt;
  in_step_.store(false, std::memory_order_relaxed);
  StepSample sample = step_;
  sample.duration = sample.compute + sample.negotiation_wait + sample.communication;
  return sample;
}

std::optional<StepSample> StepClock::EndStep() {
  std::lock_guard<std::mutex> lock(mu_);
  return EndLocked();
}

std::optional<StepSample> StepClock::MarkStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_step_.load(std::memory_order_relaxed)) last_ = clock_.Now();
  std::optional<StepSample> ended = EndLocked();
  StartLocked();  // from where the ended step stopped
  return ended;
}

int64_t StepClock::in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

}  // namespace troika::internal
