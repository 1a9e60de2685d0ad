#include "libclient/control/controller.h"

#include <algorithm>
#include <limits>
#include <set>
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
      on_failure_(std::move(on_failure)) {}

Controller::~Controller() { Shutdown(absl::ZeroDuration()); }

void Controller::TrackWaits(std::shared_ptr<WaitTracker> waits) {
  waits_ = std::move(waits);
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
      if (schedule_ && schedule_->WaitDeviates(name)) DeviateLocked();
      if (outbox_.empty() || flush_) return;
      flush_ = true;
    }
    cv_.notify_one();
  });
}

void Controller::LimitScheduledWaits(absl::Duration data_timeout) {
  scheduled_wait_limit_ = std::min(kMaxScheduledWait, data_timeout / 4);
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
    const int tensor = schedule_ ? schedule_->Match(entry.request) : -1;
    if (tensor >= 0) {
      if (absl::Status s = table_.Insert(std::move(entry)); !s.ok()) return s;
      schedule_->Take(tensor, next_order_++, absl::Now(), waits_ ? waits_->Observations() : 0);
      EnqueueReadyLocked(!caller_waits);
      return absl::OkStatus();
    }
  }
  TensorRequest request = entry.request;
  // Into the table before the request leaves: its response can never arrive first.
  if (absl::Status s = table_.Insert(std::move(entry)); !s.ok()) return s;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = QueueLocked(std::move(request), next_order_++, !caller_waits);
  }
  if (wake) cv_.notify_one();
  return absl::OkStatus();
}

bool Controller::QueueLocked(TensorRequest request, uint64_t order, bool wake_executor) {
  if (schedule_) {
    if (!schedule_->deviated() &&
        schedule_->Submit(request, order, absl::Now(), waits_ ? waits_->Observations() : 0)) {
      EnqueueReadyLocked(wake_executor);
      return false;
    }
    DeviateLocked();
    held_.emplace_back(order, std::move(request));
    return false;
  }
  // Held back for the send cycle: only the first of a batch wakes the sender (to time it).
  const bool wake = outbox_.empty() || send_cycle_ == absl::ZeroDuration();
  if (outbox_.empty()) held_since_ = absl::Now();
  unanswered_[TensorTable::Key(request.process_set, request.name)] = {order, request};
  outbox_.push_back(std::move(request));
  return wake;
}

void Controller::EnqueueReadyLocked(bool wake_executor) {
  for (ClientSchedule::Step& step : schedule_->TakeReady()) {
    executor_.EnqueueScheduled(schedule_->id(), std::move(step), wake_executor);
  }
}

void Controller::DeviateLocked(bool tell) {
  if (!schedule_ || schedule_->deviated()) return;
  executor_.EnqueueScheduled(schedule_->id(), schedule_->Deviate());
  if (!tell) return;
  deviated_schedule_ = schedule_->id();
  cv_.notify_all();  // the sender tells the coordinator
}

void Controller::BeginSchedule(Schedule schedule) {
  const std::map<std::string, TensorRequest> expected = cache_.Expected(schedule);
  std::vector<std::string> absorbed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_sending_) return;
    if (schedule_) {
      // The coordinator publishes a schedule only once every rank ended the last one.
      on_failure_(absl::InternalError(absl::StrCat("the coordinator sent schedule ", schedule.id,
                                                   " while schedule ", schedule_->id(),
                                                   " was in force on this rank")));
      return;
    }
    schedule_.emplace(std::move(schedule), expected);
    if (!schedule_->complete()) {
      // Every tensor of a schedule was a cache hit for every rank: each knows its id.
      schedule_.reset();
      on_failure_(absl::InternalError(
          "the coordinator sent a schedule naming a cache id this rank does not know"));
      return;
    }
    // From now on the coordinator drops this rank's requests for the schedule's tensors
    // (until ScheduleEnded): those not answered yet are the schedule's, sent or not. So does
    // it a join submitted after one of them, which would otherwise reach it before they come
    // back (ScheduleEnded): the join is taken back too, and goes again after them.
    std::vector<Submission> taken;
    uint64_t first_taken = std::numeric_limits<uint64_t>::max();
    for (auto it = unanswered_.begin(); it != unanswered_.end();) {
      TensorRequest& request = it->second.second;
      if (request.process_set != 0 || !schedule_->Names(request.name)) {
        ++it;
        continue;
      }
      first_taken = std::min(first_taken, it->second.first);
      absorbed.push_back(request.name);
      taken.emplace_back(it->second.first, std::move(request));
      it = unanswered_.erase(it);
    }
    bool negotiated = false;
    for (auto it = unanswered_.begin(); it != unanswered_.end();) {
      const TensorRequest& request = it->second.second;
      if (request.process_set != 0 || request.type != CollectiveType::kJoin ||
          it->second.first < first_taken) {
        negotiated = true;
        ++it;
        continue;
      }
      absorbed.push_back(request.name);
      taken.emplace_back(it->second.first, std::move(it->second.second));
      it = unanswered_.erase(it);
    }
    if (!absorbed.empty()) {
      const std::set<std::string> names(absorbed.begin(), absorbed.end());
      std::vector<TensorRequest> kept;
      std::vector<size_t> kept_before(outbox_.size() + 1, 0);  // position -> kept before it
      for (size_t i = 0; i < outbox_.size(); ++i) {
        kept_before[i] = kept.size();
        if (outbox_[i].process_set != 0 || !names.contains(outbox_[i].name)) {
          kept.push_back(std::move(outbox_[i]));
        }
      }
      kept_before[outbox_.size()] = kept.size();
      for (auto& [position, state] : wait_states_) position = kept_before[position];
      outbox_ = std::move(kept);
      if (outbox_.empty()) held_since_ = absl::InfiniteFuture();
    }
    // A request still being negotiated is a tensor the schedule does not name.
    if (negotiated) DeviateLocked();
    SortBySubmission(taken);
    for (auto& [order, request] : taken) QueueLocked(std::move(request), order);
  }
  cv_.notify_all();  // the sender reports the schedule's progress from now on
  for (const std::string& name : absorbed) cache_.Absorbed(name);
  // A thread already blocked on a tensor the schedule took (its wait began before the
  // schedule came) would wait forever if the tensor's entry needs tensors not submitted yet.
  // Waits begun since see the schedule themselves (WaitTracker::Waiting, Blocked).
  if (!waits_) return;
  for (const std::string& name : waits_->BlockedNames()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (schedule_ && schedule_->WaitDeviates(name)) DeviateLocked();
  }
}

void Controller::Scheduled(int64_t id, int64_t position, bool go) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!schedule_ || schedule_->id() != id) return;
    if (go) {
      schedule_->Completed(position, absl::Now());
      return;
    }
    // The rounds it completed go up before ScheduleEnded, while the coordinator still has it.
    ended_at_ = absl::Now();
    ended_progress_ = schedule_->TakeProgress(ended_at_, absl::InfiniteDuration());
    // Every rank stops at this entry: negotiate what the schedule had taken from it on, and
    // what was submitted since this rank deviated, in the order submitted.
    std::vector<Submission> back = schedule_->Ended(position);
    back.insert(back.end(), std::make_move_iterator(held_.begin()),
                std::make_move_iterator(held_.end()));
    held_.clear();
    SortBySubmission(back);
    schedule_.reset();
    ended_schedule_ = id;  // goes up before those requests
    for (auto& [order, request] : back) QueueLocked(std::move(request), order);
    flush_ = true;
  }
  cv_.notify_all();
}

bool Controller::LeaveSchedule(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!schedule_) return true;
  DeviateLocked();
  cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
               [&] { return !schedule_ || stream_closed_; });
  return !schedule_;
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
    for (TensorRequest& request : requests) QueueLocked(std::move(request), next_order_++);
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
  auto outbox_due = [&] {
    return !outbox_.empty() && (send_cycle_ == absl::ZeroDuration() || flush_ ||
                                absl::Now() >= held_since_ + send_cycle_);
  };
  // A schedule that began must have its progress reported: the sender may be waiting with no
  // report due.
  auto reporting = [&] { return schedule_ && !schedule_->deviated(); };
  auto wake = [&] {
    return stop_sending_ || settings_changed_ || steps_queued_ || polls_registered_ ||
           outbox_due() || !wait_states_.empty() || ended_schedule_ != 0 ||
           deviated_schedule_ != 0 || (reporting() && next_steps == absl::InfiniteFuture());
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

void Controller::SendLoop() {
  std::vector<TensorRequest> batch;
  std::vector<std::pair<size_t, WaitState>> waits;
  absl::Time next_report = absl::InfiniteFuture();
  absl::Time next_steps = absl::InfiniteFuture();
  for (;;) {
    bool report_due = false;
    int64_t ended_schedule = 0, deviated_schedule = 0;
    ScheduleProgress progress;
    absl::Time now;
    // Registrations by polling whose polls stopped lapse here (a changed wait set is queued
    // through SendWaitState); outside mu_, which the tracker's sink takes.
    const absl::Time expire_waits = waits_ ? waits_->Expire(absl::Now()) : absl::InfiniteFuture();
    {
      std::unique_lock<std::mutex> lock(mu_);
      report_due = WaitForWork(lock, next_report, next_steps, expire_waits);
      if (stop_sending_) break;
      if (report_due && schedule_ && schedule_->BlockedFor(absl::Now()) >= scheduled_wait_limit_) {
        DeviateLocked();  // every rank deviates, the one that keeps this one waiting too
      }
      batch.swap(outbox_);
      held_since_ = absl::InfiniteFuture();
      flush_ = false;
      waits.swap(wait_states_);
      ended_schedule = std::exchange(ended_schedule_, 0);
      deviated_schedule = std::exchange(deviated_schedule_, 0);
      now = absl::Now();
      if (ended_schedule != 0) {
        progress = std::exchange(ended_progress_, {});
        now = ended_at_;  // the times in `progress` are before it
      } else if (report_due && schedule_ && !schedule_->deviated()) {
        progress = schedule_->TakeProgress(now, kScheduleStalling);
      }
    }
    absl::Status sent = deviated_schedule != 0
                            ? channel_.SendScheduleDeviated(deviated_schedule, {rank_})
                            : absl::OkStatus();
    if (sent.ok() && (report_due || !progress.empty())) {
      sent = SendReport(now, std::move(progress));
    }
    if (sent.ok() && ended_schedule != 0)
      sent = channel_.SendScheduleEnded(ended_schedule, {rank_});
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
    progress = std::exchange(ended_progress_, {});
    ended_at = ended_at_;
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
            for (const Response& response : event.down.responses) {
              for (const std::string& name : response.names) {
                unanswered_.erase(TensorTable::Key(response.process_set, name));
              }
            }
          }
          executor_.Enqueue(std::move(event.down.responses));
        }
        if (event.down.schedule) BeginSchedule(*std::move(event.down.schedule));
        if (event.down.end_schedule != 0) {
          std::lock_guard<std::mutex> lock(mu_);
          if (schedule_ && schedule_->id() == event.down.end_schedule) DeviateLocked(false);
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
