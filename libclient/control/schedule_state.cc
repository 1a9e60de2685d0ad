#include "libclient/control/schedule_state.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "libclient/execution/tensor_table.h"

namespace troika::internal {

ScheduleState::ScheduleState(Clock& clock, EnqueueFn enqueue, std::function<void()> wake_sender)
    : clock_(clock), enqueue_(std::move(enqueue)), wake_sender_(std::move(wake_sender)) {}

void ScheduleState::LimitWaits(absl::Duration data_timeout) {
  wait_limit_ = std::min(kMaxScheduledWait, data_timeout / 4);
}

int ScheduleState::Match(const TensorRequest& request) const {
  return schedule_ ? schedule_->Match(request) : -1;
}

void ScheduleState::Take(int tensor, bool wake) {
  schedule_->Take(tensor, next_order_++, clock_.Now(), Observed());
  EnqueueReady(wake);
}

std::pair<int64_t, ScheduledStep> ScheduleState::TakeToRun(int tensor) {
  schedule_->Take(tensor, next_order_++, clock_.Now(), Observed());
  absl::InlinedVector<ClientSchedule::Step, 1> ready = schedule_->TakeReady();
  TROIKA_CHECK(!ready.empty()) << "ScheduleState::TakeToRun: the tensor's entry is not ready";
  for (size_t i = 1; i < ready.size(); ++i) enqueue_(schedule_->id(), std::move(ready[i]), false);
  return {schedule_->id(), std::move(ready[0])};
}

std::optional<TensorRequest> ScheduleState::Route(TensorRequest request, uint64_t order,
                                                  bool wake) {
  if (schedule_) {
    if (!schedule_->deviated() && schedule_->Submit(request, order, clock_.Now(), Observed())) {
      EnqueueReady(wake);
      return std::nullopt;
    }
    Deviate();
    held_.emplace_back(order, std::move(request));
    return std::nullopt;
  }
  unanswered_[TensorTable::Key(request.process_set, request.name)] = {order, request};
  return request;
}

void ScheduleState::Answered(const std::vector<Response>& responses) {
  for (const Response& response : responses) {
    for (const std::string& name : response.names) {
      unanswered_.erase(TensorTable::Key(response.process_set, name));
    }
  }
}

void ScheduleState::EnqueueReady(bool wake) {
  for (ClientSchedule::Step& step : schedule_->TakeReady()) {
    enqueue_(schedule_->id(), std::move(step), wake);
  }
}

void ScheduleState::Deviate(bool tell) {
  if (!schedule_ || schedule_->deviated()) return;
  enqueue_(schedule_->id(), schedule_->Deviate(), true);
  if (!tell) return;
  deviated_schedule_ = schedule_->id();
  wake_sender_();
}

void ScheduleState::EndOrdered(int64_t id) {
  if (schedule_ && schedule_->id() == id) Deviate(false);
}

bool ScheduleState::WaitDeviates(const std::string& name) const {
  return schedule_ && schedule_->WaitDeviates(name);
}

bool ScheduleState::BlockedTooLong() const {
  return schedule_ && schedule_->BlockedFor(clock_.Now()) >= wait_limit_;
}

absl::StatusOr<std::vector<std::string>> ScheduleState::Begin(
    Schedule schedule, const std::map<std::string, TensorRequest>& expected) {
  if (schedule_) {
    return absl::InternalError(absl::StrCat("the coordinator sent schedule ", schedule.id,
                                            " while schedule ", schedule_->id(),
                                            " was in force on this rank"));
  }
  schedule_.emplace(std::move(schedule), expected);
  if (!schedule_->complete()) {
    // Every tensor of a schedule was a cache hit for every rank: each knows its id.
    schedule_.reset();
    return absl::InternalError(
        "the coordinator sent a schedule naming a cache id this rank does not know");
  }
  // From now on the coordinator drops this rank's requests for the schedule's tensors
  // (until ScheduleEnded): those not answered yet are the schedule's, sent or not. So does
  // it a join submitted after one of them, which would otherwise reach it before they come
  // back (ScheduleEnded): the join is taken back too, and goes again after them.
  std::vector<std::string> absorbed;
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
  // A request still being negotiated is a tensor the schedule does not name.
  if (negotiated) Deviate();
  SortBySubmission(taken);
  for (auto& [order, request] : taken) Route(std::move(request), order);
  return absorbed;
}

std::optional<std::vector<Submission>> ScheduleState::Scheduled(int64_t id, int64_t position,
                                                                bool go) {
  if (!schedule_ || schedule_->id() != id) return std::nullopt;
  if (go) {
    schedule_->Completed(position, clock_.Now());
    return std::nullopt;
  }
  // The rounds it completed go up before ScheduleEnded, while the coordinator still has it.
  ended_at_ = clock_.Now();
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
  return back;
}

ScheduleState::Notices ScheduleState::TakeNotices(bool report_due) {
  Notices notices;
  notices.ended = std::exchange(ended_schedule_, 0);
  notices.deviated = std::exchange(deviated_schedule_, 0);
  notices.at = clock_.Now();
  if (notices.ended != 0) {
    notices.progress = std::exchange(ended_progress_, {});
    notices.at = ended_at_;  // the times in `progress` are before it
  } else if (report_due && reporting()) {
    notices.progress = schedule_->TakeProgress(notices.at, kScheduleStalling);
  }
  return notices;
}

std::pair<ScheduleProgress, absl::Time> ScheduleState::TakeEndedProgress() {
  return {std::exchange(ended_progress_, {}), ended_at_};
}

}  // namespace troika::internal
