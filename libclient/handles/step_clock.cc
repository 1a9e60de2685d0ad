#include "libclient/handles/step_clock.h"

#include "common/logging.h"

namespace troika::internal {

void StepClock::AdvanceLocked() {
  // Between steps nothing is charged and the clock is not read: a step's start sets last_.
  if (!in_step_) return;
  const absl::Time now = clock_.Now();
  // A wall clock stepped back charges nothing rather than a negative span.
  const absl::Duration elapsed = now > last_ ? now - last_ : absl::ZeroDuration();
  last_ = now;
  if (busy_ > 0) {
    step_.communication += elapsed;
  } else if (in_flight_ > 0) {
    step_.negotiation_wait += elapsed;
  } else {
    step_.compute += elapsed;
  }
}

void StepClock::OpStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked();
  ++in_flight_;
}

void StepClock::OpFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked();
  TROIKA_CHECK(in_flight_ > 0) << "StepClock: an operation finished that never started";
  --in_flight_;
}

void StepClock::ExecBegin() {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked();
  ++busy_;
}

void StepClock::ExecEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked();
  TROIKA_CHECK(busy_ > 0) << "StepClock: ExecEnd without ExecBegin";
  --busy_;
}

void StepClock::StartStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_step_) {
    AdvanceLocked();
  } else {
    last_ = clock_.Now();
  }
  StartLocked();
}

void StepClock::StartLocked() {
  in_step_ = true;  // from last_
  step_ = StepSample{};
}

std::optional<StepSample> StepClock::EndLocked() {
  AdvanceLocked();
  if (!in_step_) return std::nullopt;
  in_step_ = false;
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
  if (!in_step_) last_ = clock_.Now();
  std::optional<StepSample> ended = EndLocked();
  StartLocked();  // from where the ended step stopped
  return ended;
}

int64_t StepClock::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

}  // namespace troika::internal
