#include "coordinator/job/job_timer.h"

#include <utility>

namespace troika::coordinator {

JobTimer::JobTimer(Scheduler& scheduler, Clock& clock, std::mutex& mu, Rearm rearm,
                   std::function<std::weak_ptr<const void>()> owner, std::function<void()> fire)
    : scheduler_(scheduler),
      clock_(clock),
      mu_(mu),
      rearm_(rearm),
      owner_(std::move(owner)),
      fire_(std::move(fire)) {}

JobTimer::~JobTimer() { Cancel(); }

void JobTimer::Arm(absl::Time due) {
  if (due == absl::InfiniteFuture()) return;
  if (task_ != 0 && rearm_ == Rearm::kKeepEarlier && due_ <= due) return;
  Cancel();
  due_ = due;
  // The task's own id is known only once RunAfter returns: the task reads it under the lock,
  // which is held here until then.
  auto id = std::make_shared<Scheduler::TaskId>(0);
  task_ = scheduler_.RunAfter(due - clock_.Now(), [this, owner = owner_(), id] {
    std::shared_ptr<const void> alive = owner.lock();
    if (!alive) return;
    std::lock_guard<std::mutex> lock(mu_);
    Fired(*id);
  });
  *id = task_;
}

void JobTimer::Fired(Scheduler::TaskId task) {
  // A task replaced or cancelled after it began (Scheduler::Cancel cannot stop it) does
  // nothing: the one armed instead, if any, does the work.
  if (task != task_) return;
  task_ = 0;
  due_ = absl::InfiniteFuture();
  fire_();
}

void JobTimer::Cancel() {
  if (task_ != 0) scheduler_.Cancel(task_);
  task_ = 0;
  due_ = absl::InfiniteFuture();
}

}  // namespace troika::coordinator
