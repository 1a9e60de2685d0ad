#pragma once
// Clock: the source of time for everything that measures or waits, injected so tests can
// advance time by hand.

#include <mutex>

#include "absl/time/time.h"

namespace troika {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The process-wide real clock; never destroyed.
  static Clock& Real();
};

// A clock that moves only when told. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24)) : now_(start) {}
  absl::Time Now() const override;
  void Advance(absl::Duration d);

 private:
  mutable std::mutex mu_;
  absl::Time now_;  // guarded by mu_
};

}  // namespace troika
