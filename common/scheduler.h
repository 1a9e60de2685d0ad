#pragma once
// Scheduler: runs callbacks at points in (real) time on one thread of its own. The
// coordinator's timers — attach and key-value timeouts, fusion cycle deadlines — all go here,
// so nothing polls and an idle coordinator does no work.
//
// Thread-safe. Callbacks run on the scheduler's thread, one at a time, with no scheduler lock
// held; they must not block for long. Cancel() of a callback that is already running returns
// false and does not wait for it: owners re-check their own state inside the callback.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/time/time.h"

namespace troika {

class Scheduler {
 public:
  using TaskId = uint64_t;

  Scheduler();
  ~Scheduler();  // Stop()s
  // Drops pending callbacks and joins the thread (waiting for a running callback). Later
  // RunAt/RunAfter calls are dropped. Idempotent.
  void Stop();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  TaskId RunAt(absl::Time when, std::function<void()> fn);
  TaskId RunAfter(absl::Duration delay, std::function<void()> fn);
  // True if the callback was removed before it ran.
  bool Cancel(TaskId id);
  // Callbacks queued and not yet run (a long-lived owner's timers must not pile up).
  size_t pending() const;

 private:
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_: due time and id order the queue; ids are unique.
  std::map<std::pair<absl::Time, TaskId>, std::function<void()>> queue_;
  std::map<TaskId, absl::Time> due_;
  TaskId next_id_ = 1;
  bool stop_ = false;
  std::mutex join_mu_;  // serialises Stop()
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace troika
