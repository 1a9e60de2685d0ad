#pragma once
// JobTimer: one of a job's re-arming timers — the flush at the negotiation's next deadline, the
// next stall inspection. Armed for a point on the job's clock, it runs `fire` once, on the
// scheduler's thread, under the job's lock, unless the job is gone by then or the timer was
// cancelled or re-armed meanwhile (even once its task began); `fire` arms it again if it
// must.
//
// The scheduler runs on real time while the job's clock may be a fake one (tests then call
// the work by hand): only the offset of `due` from the clock's now counts.
//
// Thread contract: Arm, Cancel, armed and due are called under `mu` (the job's lock), and
// `fire` runs under it. The destructor cancels; it runs once no one else can reach the job.

#include <functional>
#include <memory>
#include <mutex>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/scheduler.h"

namespace troika::coordinator {

class JobTimer {
 public:
  enum class Rearm {
    kKeepEarlier,  // arming for a later time than the armed one keeps the armed one
    kReplace,      // arming always replaces the armed one
  };

  // `scheduler`, `clock` and `mu` outlive this. `owner` gives what keeps the timer alive (the
  // job, weakly), asked only when a task is scheduled: once it is gone, the timer does
  // nothing. `fire` is called under `mu`, disarmed.
  JobTimer(Scheduler& scheduler, Clock& clock, std::mutex& mu, Rearm rearm,
           std::function<std::weak_ptr<const void>()> owner, std::function<void()> fire);
  ~JobTimer();
  JobTimer(const JobTimer&) = delete;
  JobTimer& operator=(const JobTimer&) = delete;

  // Arms the timer for `due` (as `rearm` says); InfiniteFuture arms nothing (an armed timer
  // stays).
  void Arm(absl::Time due);
  void Cancel();
  bool armed() const { return task_ != 0; }
  // When it fires; InfiniteFuture while disarmed.
  absl::Time due() const { return due_; }

 private:
  void Fired(Scheduler::TaskId task);

  Scheduler& scheduler_;
  Clock& clock_;
  std::mutex& mu_;
  const Rearm rearm_;
  const std::function<std::weak_ptr<const void>()> owner_;
  const std::function<void()> fire_;
  // Guarded by mu_.
  Scheduler::TaskId task_ = 0;
  absl::Time due_ = absl::InfiniteFuture();
};

}  // namespace troika::coordinator
