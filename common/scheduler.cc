#include "common/scheduler.h"

#include <chrono>

#include "absl/time/clock.h"
#include "common/thread_name.h"

namespace troika {

Scheduler::Scheduler()
    : thread_([this] {
        NameThisThread("troika-timers");
        Loop();
      }) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
    due_.clear();
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

Scheduler::TaskId Scheduler::RunAt(absl::Time when, std::function<void()> fn) {
  TaskId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    if (stop_) return id;
    queue_.emplace(std::make_pair(when, id), std::move(fn));
    due_.emplace(id, when);
  }
  cv_.notify_all();
  return id;
}

Scheduler::TaskId Scheduler::RunAfter(absl::Duration delay, std::function<void()> fn) {
  return RunAt(absl::Now() + delay, std::move(fn));
}

bool Scheduler::Cancel(TaskId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = due_.find(id);
  if (it == due_.end()) return false;
  queue_.erase(std::make_pair(it->second, id));
  due_.erase(it);
  return true;
}

size_t Scheduler::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Scheduler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = queue_.begin();
    absl::Time now = absl::Now();
    if (first->first.first > now) {
      cv_.wait_for(lock, absl::ToChronoNanoseconds(first->first.first - now));
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    due_.erase(first->first.second);
    queue_.erase(first);
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace troika
