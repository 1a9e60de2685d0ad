#include "common/clock.h"

#include "absl/time/clock.h"

namespace troika {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock& Clock::Real() {
  static RealClock* clock = new RealClock;
  return *clock;
}

absl::Time FakeClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += d;
}

}  // namespace troika
