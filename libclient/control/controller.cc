#include "libclient/control/controller.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace troika::internal {

Controller::Controller(int rank, std::string peer, ControlChannel& channel, TensorTable& table,
                       Executor& executor, ExecStats& stats,
                       std::function<void(absl::Status)> on_failure)
    : rank_(rank),
      peer_(std::move(peer)),
      channel_(channel),
      table_(table),
      executor_(executor),
      stats_(stats),
      on_failure_(std::move(on_failure)),
      schedules_(
          Clock::Real(),
          [this](int64_t schedule, ScheduledStep step, bool wake) {
            executor_.EnqueueScheduled(schedule, std::move(step), wake);
          },
          [this] { cv_.notify_all(); }) {}  // the sender tells the coordinator

Controller::~Controller() { Shutdown(absl::ZeroDuration()); }

void Controller::TrackWaits(std::shared_ptr<WaitTracker> waits) {
  waits_ = std::move(waits);
  schedules_.TrackWaits(waits_.get());
  if (!waits_) return;
  waits_->SetWake([this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      polls_registered_ = true;
    }
    cv_.notify_one();
  });
  waits_->SetFlush([this](const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Waiting for a tensor whose entry this rank cannot enter yet would never end.
      if (schedules_.WaitDeviates(name)) schedules_.Deviate();
      if (outbox_.empty() || flush_) return;
      flush_ = true;
    }
    cv_.notify_one();
  });
}

void Controller::LimitScheduledWaits(absl::Duration data_timeout) {
  schedules_.LimitWaits(data_timeout);
}

void Controller::Start() {
  executor_.OnScheduled(
      [this](int64_t id, int64_t position, bool go) { Scheduled(id, position, go); });
  sender_ = std::thread([this] {
    NameThisThread("troika-send");
    SendLoop();
  });
  receiver_ = std::thread([this] {
    NameThisThread("troika-receive");
    ReceiveLoop();
  });
}

absl::Status Controller::Submit(Entry&& entry, bool caller_waits) {
  {
    // A tensor the schedule in force takes goes into the table and the schedule under one
    // lock (its entry cannot run before the table has it), and its request is not copied.
    std::lock_guard<std::mutex> lock(mu_);
    const int tensor = schedules_.Match(entry.request);
    if (tensor >= 0) {
      if (absl::Status s = table_.Insert(std::move(entry)); !s.ok()) return s;
      schedules_.Take(tensor, !caller_waits);
      return absl::OkStatus();
    }
  }
  TensorRequest request = entry.request;
  // Into the table before the request leaves: its response can never arrive first.
  if (absl::Status s = table_.Insert(std::move(entry)); !s.ok()) return s;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = QueueLocked(std::move(request), schedules_.NextOrder(), !caller_waits);
  }
  if (wake) cv_.notify_one();
  return absl::OkStatus();
}

bool Controller::RunNow(Entry& entry, const Executor::AdoptFn& adopt) {
  std::unique_lock<std::mutex> lock(mu_);
  const int tensor = schedules_.Match(entry.request);
  // The executor's turn taken while the schedule cannot change.
  if (tensor < 0 || !schedules_.RunsAlone(tensor) || !table_.open() || !executor_.TryClaim()) {
    return false;
  }
  auto [schedule, step] = schedules_.TakeToRun(tensor);
  lock.unlock();
  executor_.RunClaimed(schedule, std::move(step), absl::MakeSpan(&entry, 1), adopt);
  return true;
}

bool Controller::QueueLocked(TensorRequest request, uint64_t order, bool wake_executor) {
  std::optional<TensorRequest> negotiate =
      schedules_.Route(std::move(request), order, wake_executor);
  if (!negotiate) return false;
  // Held back for the send cycle: only the first of a batch wakes the sender (to time it).
  const bool wake = outbox_.empty() || send_cycle_ == absl::ZeroDuration();
  if (outbox_.empty()) held_since_ = absl::Now();
  outbox_.push_back(*std::move(negotiate));
  return wake;
}

void Controller::BeginSchedule(Schedule schedule) {
  const std::map<std::string, TensorRequest> expected = cache_.Expected(schedule);
  std::vector<std::string> absorbed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_sending_) return;
    absl::StatusOr<std::vector<std::string>> taken =
        schedules_.Begin(std::move(schedule), expected);
    if (!taken.ok()) {
      on_failure_(taken.status());
      return;
    }
    absorbed = *std::move(taken);
    if (!absorbed.empty()) WithdrawLocked(absorbed);
  }
  cv_.notify_all();  // the sender reports the schedule's progress from now on
  for (const std::string& name : absorbed) cache_.Absorbed(name);
  // A thread already blocked on a tensor the schedule took (its wait began before the
  // schedule came) would wait forever if the tensor's entry needs tensors not submitted yet.
  // Waits begun since see the schedule themselves (WaitTracker::Waiting, Blocked).
  if (!waits_) return;
  for (const std::string& name : waits_->BlockedNames()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (schedules_.WaitDeviates(name)) schedules_.Deviate();
  }
}

void Controller::WithdrawLocked(const std::vector<std::string>& names) {
  const std::set<std::string> withdrawn(names.begin(), names.end());
  std::vector<TensorRequest> kept;
  std::vector<size_t> kept_before(outbox_.size() + 1, 0);  // position -> kept before it
  for (size_t i = 0; i < outbox_.size(); ++i) {
    kept_before[i] = kept.size();
    if (outbox_[i].process_set != 0 || !withdrawn.contains(outbox_[i].name)) {
      kept.push_back(std::move(outbox_[i]));
    }
  }
  kept_before[outbox_.size()] = kept.size();
  for (auto& [position, state] : wait_states_) position = kept_before[position];
  outbox_ = std::move(kept);
  if (outbox_.empty()) held_since_ = absl::InfiniteFuture();
}

void Controller::Scheduled(int64_t id, int64_t position, bool go) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<std::vector<Submission>> back = schedules_.Scheduled(id, position, go);
    if (!back) return;
    for (auto& [order, request] : *back) QueueLocked(std::move(request), order);
    flush_ = true;
  }
  cv_.notify_all();
}

bool Controller::LeaveSchedule(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!schedules_.in_force()) return true;
  schedules_.Deviate();
  cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
               [&] { return !schedules_.in_force() || stream_closed_; });
  return !schedules_.in_force();
}

absl::Status Controller::SubmitAll(std::vector<Entry> entries) {
  std::vector<TensorRequest> requests;
  requests.reserve(entries.size());
  for (Entry& entry : entries) {
    TensorRequest request = entry.request;
    if (absl::Status s = table_.Insert(std::move(entry)); !s.ok()) {
      for (const TensorRequest& inserted : requests) {
        table_.Take(inserted.process_set, inserted.name);
      }
      return s;
    }
    requests.push_back(std::move(request));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (TensorRequest& request : requests) QueueLocked(std::move(request), schedules_.NextOrder());
  }
  cv_.notify_one();
  return absl::OkStatus();
}

void Controller::SendWaitState(WaitState state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_sending_) return;
    wait_states_.emplace_back(outbox_.size(), std::move(state));
  }
  cv_.notify_one();
}

void Controller::StepsQueued() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_sending_) return;  // the last report before goodbye takes them, if any
    steps_queued_ = true;
  }
  cv_.notify_one();
}

bool Controller::WaitForWork(std::unique_lock<std::mutex>& lock, absl::Time& next_report,
                             absl::Time& next_steps, absl::Time expire_waits) {
  // A schedule that began must have its progress reported: the sender may be waiting with no
  // report due.
  auto reporting = [&] { return schedules_.reporting(); };
  auto wake = [&] {
    return stop_sending_ || settings_changed_ || steps_queued_ || polls_registered_ ||
           OutboxDueLocked() || !wait_states_.empty() || schedules_.has_notices() ||
           (reporting() && next_steps == absl::InfiniteFuture());
  };
  const int interval_ms = stats_.settings().report_interval_ms;
  const absl::Time now = absl::Now();
  if (interval_ms <= 0) {
    next_report = absl::InfiniteFuture();
  } else if (next_report == absl::InfiniteFuture()) {
    next_report = now + absl::Milliseconds(interval_ms);
  }
  // Only the first step after a report schedules one; later steps ride along with it. A
  // schedule in force reports its progress as often.
  if ((steps_queued_ || reporting()) && next_steps == absl::InfiniteFuture()) {
    next_steps = now + kStepReportInterval;
  }
  steps_queued_ = false;
  const absl::Time others = std::min({next_report, next_steps, expire_waits});
  for (;;) {
    const absl::Time send_due =
        outbox_.empty() ? absl::InfiniteFuture() : held_since_ + send_cycle_;
    const absl::Time deadline = std::min(others, send_due);
    // A request queued while waiting starts a send cycle that may end before `deadline`:
    // wake up to wait for it instead.
    auto woken = [&] {
      return wake() || (!outbox_.empty() && held_since_ + send_cycle_ < deadline);
    };
    if (deadline == absl::InfiniteFuture()) {
      cv_.wait(lock, woken);
    } else {
      cv_.wait_until(lock, absl::ToChronoTime(deadline), woken);
    }
    if (wake() || absl::Now() >= others) break;
  }
  settings_changed_ = false;
  polls_registered_ = false;
  const absl::Time after = absl::Now();
  if (after < next_report && after < next_steps) return false;
  // The report takes every pending step, whichever deadline brought it.
  next_steps = absl::InfiniteFuture();
  if (after >= next_report) next_report = after + absl::Milliseconds(interval_ms);
  return true;
}

bool Controller::OutboxDueLocked() const {
  return !outbox_.empty() && (send_cycle_ == absl::ZeroDuration() || flush_ ||
                              absl::Now() >= held_since_ + send_cycle_);
}

void Controller::SendLoop() {
  std::vector<TensorRequest> batch;
  std::vector<std::pair<size_t, WaitState>> waits;
  absl::Time next_report = absl::InfiniteFuture();
  absl::Time next_steps = absl::InfiniteFuture();
  for (;;) {
    bool report_due = false;
    ScheduleState::Notices notices;
    // Registrations by polling whose polls stopped lapse here (a changed wait set is queued
    // through SendWaitState); outside mu_, which the tracker's sink takes.
    const absl::Time expire_waits = waits_ ? waits_->Expire(absl::Now()) : absl::InfiniteFuture();
    {
      std::unique_lock<std::mutex> lock(mu_);
      report_due = WaitForWork(lock, next_report, next_steps, expire_waits);
      if (stop_sending_) break;
      if (report_due && schedules_.BlockedTooLong()) {
        schedules_.Deviate();  // every rank deviates, the one that keeps this one waiting too
      }
      // Held requests stay held until their cycle is due, whatever else woke the sender (a
      // report, a wait state), so requests submitted within a cycle still leave in one message
      // (SendCycleTest). A wait state naming ops takes along the requests queued before it
      // (the coordinator must not take the rank for blocked on ops before it sees what the
      // rank submitted first); one naming none (the rank's threads no longer blocked) needs
      // none and goes ahead of them.
      size_t take = outbox_.size();
      if (!OutboxDueLocked()) {
        take = 0;
        for (const auto& [position, state] : wait_states_) {
          if (!state.waiting_for.empty()) take = std::max(take, position);
        }
      }
      for (auto& [position, state] : wait_states_) position = std::min(position, take);
      batch.assign(std::make_move_iterator(outbox_.begin()),
                   std::make_move_iterator(outbox_.begin() + static_cast<ptrdiff_t>(take)));
      outbox_.erase(outbox_.begin(), outbox_.begin() + static_cast<ptrdiff_t>(take));
      if (outbox_.empty()) {
        held_since_ = absl::InfiniteFuture();
        flush_ = false;
      }
      waits.swap(wait_states_);
      notices = schedules_.TakeNotices(report_due);
    }
    absl::Status sent = notices.deviated != 0
                            ? channel_.SendScheduleDeviated(notices.deviated, {rank_})
                            : absl::OkStatus();
    if (sent.ok() && (report_due || !notices.progress.empty())) {
      sent = SendReport(notices.at, std::move(notices.progress));
    }
    if (sent.ok() && notices.ended != 0) sent = channel_.SendScheduleEnded(notices.ended, {rank_});
    if (sent.ok() && !(batch.empty() && waits.empty())) sent = SendBatch(batch, waits);
    // On failure the receiver reports why the stream ended; nothing more can be sent.
    if (!sent.ok()) break;
    batch.clear();
    waits.clear();
  }
  bool goodbye;
  ScheduleProgress progress;  // of a schedule that ended as this rank shut down
  absl::Time ended_at;
  {
    std::lock_guard<std::mutex> lock(mu_);
    goodbye = shutting_down_;
    std::tie(progress, ended_at) = schedules_.TakeEndedProgress();
  }
  if (goodbye) {
    // The last steps' phases, bytes and samples, so a timeline and the step histograms cover
    // the whole run; the goodbye ends the rank's part in a schedule.
    if (!progress.empty()) {
      SendReport(ended_at, std::move(progress)).IgnoreError();
    } else if (stats_.settings().report_interval_ms > 0 || stats_.steps_pending()) {
      SendReport(absl::Now(), {}).IgnoreError();
    }
    channel_.Goodbye({rank_}).IgnoreError();
  }
}

absl::Status Controller::SendReport(absl::Time now, ScheduleProgress progress) {
  ExecReport report;
  if (!stats_.Take(rank_, now, &report) && progress.empty()) return absl::OkStatus();
  if (!progress.empty()) report.schedule = std::move(progress);
  return channel_.SendExecReport(report);
}

absl::Status Controller::SendBatch(std::vector<TensorRequest>& batch,
                                   const std::vector<std::pair<size_t, WaitState>>& waits) {
  for (TensorRequest& request : batch) request = cache_.Compress(request);
  if (waits.empty()) return channel_.Send(batch);  // the steady state: one message
  size_t sent = 0;
  auto send_until = [&](size_t end) {
    if (end <= sent) return absl::OkStatus();
    std::vector<TensorRequest> part(batch.begin() + sent, batch.begin() + end);
    sent = end;
    return channel_.Send(part);
  };
  for (const auto& [position, state] : waits) {
    if (absl::Status s = send_until(position); !s.ok()) return s;
    if (absl::Status s = channel_.SendWaitState(state); !s.ok()) return s;
  }
  return send_until(batch.size());
}

void Controller::ReceiveLoop() {
  for (;;) {
    SessionEvent event = channel_.Receive();
    switch (event.kind) {
      case SessionEvent::Kind::kResponses: {
        std::vector<TensorRequest> resend;
        if (absl::Status s = cache_.Apply(rank_, event.down, &resend); !s.ok()) {
          on_failure_(s);
          channel_.Cancel();
          continue;
        }
        if (event.down.settings) {
          stats_.set_settings(*event.down.settings);
          {
            std::lock_guard<std::mutex> lock(mu_);
            settings_changed_ = true;
            send_cycle_ = absl::Microseconds(event.down.settings->send_cycle_us);
          }
          cv_.notify_one();
        }
        if (!event.down.responses.empty()) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            schedules_.Answered(event.down.responses);
          }
          executor_.Enqueue(std::move(event.down.responses));
        }
        if (event.down.schedule) BeginSchedule(*std::move(event.down.schedule));
        if (event.down.end_schedule != 0) {
          std::lock_guard<std::mutex> lock(mu_);
          schedules_.EndOrdered(event.down.end_schedule);
        }
        if (!resend.empty()) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (outbox_.empty()) held_since_ = absl::Now();
            outbox_.insert(outbox_.end(), resend.begin(), resend.end());
            flush_ = true;  // answers to the coordinator: never held back
          }
          cv_.notify_one();
        }
        continue;
      }
      case SessionEvent::Kind::kAbort:
        on_failure_(event.status);
        channel_.Cancel();
        continue;  // until the stream reports closed
      case SessionEvent::Kind::kClosed: {
        bool expected;
        {
          std::lock_guard<std::mutex> lock(mu_);
          stream_closed_ = true;
          stop_sending_ = true;
          expected = shutting_down_;
        }
        cv_.notify_all();
        if (!expected) {
          // The coordinator's verdict on what this rank sent (a limit, a malformed request, a
          // wrong token) keeps its code; anything else is a lost connection.
          // (Its message names who: "the coordinator ended the session: ...", "this node's
          // troika-agent ended the session: ..."); anything else is a lost connection.
          const absl::StatusCode code = event.status.code();
          const bool lost =
              event.status.ok() || code == absl::StatusCode::kUnavailable ||
              code == absl::StatusCode::kCancelled || code == absl::StatusCode::kDeadlineExceeded ||
              code == absl::StatusCode::kUnknown || code == absl::StatusCode::kInternal;
          on_failure_(lost ? absl::UnavailableError(absl::StrCat("lost the session with ", peer_,
                                                                 event.status.ok() ? "" : ": ",
                                                                 event.status.message()))
                           : event.status);
        }
        return;
      }
    }
  }
}

void Controller::Shutdown(absl::Duration grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ && !sender_.joinable()) return;
    shutting_down_ = true;
    stop_sending_ = true;
    outbox_.clear();
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();  // it says goodbye on the way out
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(grace), [&] { return stream_closed_; })) {
      lock.unlock();
      channel_.Cancel();
    }
  }
  if (receiver_.joinable()) receiver_.join();
}

}  // namespace troika::internal
