#include "libclient/control/client_schedule.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace troika::internal {

void SortBySubmission(std::vector<Submission>& submissions) {
  std::ranges::sort(submissions, {}, &Submission::first);
}

ClientSchedule::ClientSchedule(Schedule schedule,
                               const std::map<std::string, TensorRequest>& expected)
    : id_(schedule.id) {
  entries_.reserve(schedule.entries.size());
  for (Response& entry : schedule.entries) {
    first_tensor_.push_back(tensors_.size());
    entry.elements.clear();
    for (const std::string& name : entry.names) {
      auto it = expected.find(name);
      if (it == expected.end()) {
        complete_ = false;
        entry.elements.push_back(0);
        continue;
      }
      entry.elements.push_back(it->second.ByteSize() /
                               static_cast<int64_t>(DataTypeSize(it->second.dtype)));
      slot_[name] = static_cast<int>(tensors_.size());
      tensors_.push_back({entries_.size(), it->second});
    }
    entries_.push_back(std::make_shared<const Response>(std::move(entry)));
  }
  if (entries_.empty()) complete_ = false;
  submitted_.assign(entries_.size(), 0);
  taken_.resize(tensors_.size());
}

void ClientSchedule::GrowRing(size_t rounds) {
  std::vector<Round> grown(std::bit_ceil(std::max(rounds, 2 * ring_.size())));
  for (Round& r : grown) {
    r.submitted.resize(tensors_.size());
    r.observed.resize(tensors_.size());
    r.completed.resize(entries_.size());
  }
  for (size_t i = 0; i < open_rounds_; ++i) {
    const int64_t number = rounds_begin_ + static_cast<int64_t>(i);
    std::swap(grown[static_cast<size_t>(number) & (grown.size() - 1)], RoundAt(number));
  }
  ring_ = std::move(grown);
}

ClientSchedule::Round& ClientSchedule::OpenRound(int64_t round) {
  if (open_rounds_ == 0) rounds_begin_ = round;
  const int64_t first = std::min(rounds_begin_, round);
  const int64_t end = std::max(rounds_begin_ + static_cast<int64_t>(open_rounds_), round + 1);
  const size_t needed = static_cast<size_t>(end - first);
  if (needed > open_rounds_) {
    if (needed > ring_.size()) GrowRing(needed);
    // The slots of the rounds opened now. Their times are not cleared: a round is read only
    // once every entry completed, and by then Take wrote every tensor's and Completed every
    // entry's (a void entry ends the schedule and its rounds unread).
    const int64_t open_end = rounds_begin_ + static_cast<int64_t>(open_rounds_);
    for (int64_t n = first; n < end; ++n) {
      if (n < rounds_begin_ || n >= open_end) RoundAt(n).entries_completed = 0;
    }
    rounds_begin_ = first;
    open_rounds_ = needed;
  }
  return RoundAt(round);
}

bool ClientSchedule::Submit(const TensorRequest& request, uint64_t order, absl::Time now,
                            uint64_t observed) {
  const int tensor = Match(request);
  if (tensor < 0) return false;
  Take(tensor, order, now, observed);
  return true;
}

int ClientSchedule::Match(const TensorRequest& request) const {
  if (deviated_ || request.process_set != 0) return -1;
  // A rank in step submits in the period's order: the tensor after the last one taken is
  // compared first, with no lookup (a request equal to it is its: a name is in the period
  // once).
  if (next_tensor_ < tensors_.size() && tensors_[next_tensor_].request == request) {
    return static_cast<int>(next_tensor_);
  }
  auto slot = slot_.find(request.name);
  if (slot == slot_.end()) return -1;
  return tensors_[static_cast<size_t>(slot->second)].request == request ? slot->second : -1;
}

void ClientSchedule::Take(int tensor, uint64_t order, absl::Time now, uint64_t observed) {
  const int64_t k = static_cast<int64_t>(entries_.size());
  const int64_t e = static_cast<int64_t>(tensors_[static_cast<size_t>(tensor)].entry);
  // The name's first occurrence not entered yet (a name is in flight once, so its previous
  // occurrence was entered before it could be submitted again).
  int64_t position = next_ - next_ % k + e;
  if (position < next_) position += k;
  ++submitted_[static_cast<size_t>(e)];
  taken_[static_cast<size_t>(tensor)] = Taken{position, order, now};
  next_tensor_ =
      static_cast<size_t>(tensor) + 1 < tensors_.size() ? static_cast<size_t>(tensor) + 1 : 0;
  Round& round = OpenRound(position / k);
  round.submitted[static_cast<size_t>(tensor)] = now;
  round.observed[static_cast<size_t>(tensor)] = observed;
}

ClientSchedule::Step ClientSchedule::MakeStep(int64_t position, bool vote_void) const {
  const int64_t k = static_cast<int64_t>(entries_.size());
  return {position, entries_[static_cast<size_t>(position % k)], vote_void};
}

absl::InlinedVector<ClientSchedule::Step, 1> ClientSchedule::TakeReady() {
  absl::InlinedVector<Step, 1> ready;
  if (deviated_) return ready;
  const int64_t k = static_cast<int64_t>(entries_.size());
  for (;;) {
    const size_t e = static_cast<size_t>(next_ % k);
    if (submitted_[e] < entries_[e]->names.size()) break;
    submitted_[e] = 0;
    ready.push_back(MakeStep(next_++, false));
  }
  return ready;
}

bool ClientSchedule::EntersAlone(int tensor) const {
  const size_t e = tensors_[static_cast<size_t>(tensor)].entry;
  // Alone in its entry, that entry has no tensor submitted yet: none, or it would have run.
  return !deviated_ && static_cast<int64_t>(e) == next_ % static_cast<int64_t>(entries_.size()) &&
         entries_[e]->names.size() == 1;
}

ClientSchedule::Step ClientSchedule::Deviate() {
  deviated_ = true;
  if (entries_.empty()) return {};
  return MakeStep(next_, true);
}

absl::Duration ClientSchedule::BlockedFor(absl::Time now) const {
  std::map<int64_t, absl::Time> entered;  // position -> its last submission
  for (const std::optional<Taken>& taken : taken_) {
    if (!taken || taken->position >= next_) continue;
    auto [it, fresh] = entered.try_emplace(taken->position, taken->submitted);
    it->second = std::max(it->second, taken->submitted);
  }
  return entered.empty() ? absl::ZeroDuration() : now - entered.begin()->second;
}

bool ClientSchedule::WaitDeviates(const std::string& name) const {
  if (deviated_) return false;
  auto slot = slot_.find(name);
  if (slot == slot_.end()) return false;
  const std::optional<Taken>& taken = taken_[static_cast<size_t>(slot->second)];
  return taken && taken->position >= next_;
}

void ClientSchedule::Completed(int64_t position, absl::Time now) {
  const int64_t k = static_cast<int64_t>(entries_.size());
  const size_t e = static_cast<size_t>(position % k);
  for (size_t t = first_tensor_[e]; t < first_tensor_[e] + entries_[e]->names.size(); ++t) {
    if (taken_[t] && taken_[t]->position == position) taken_[t].reset();
  }
  const int64_t number = position / k;
  if (number < rounds_begin_ || number >= rounds_begin_ + static_cast<int64_t>(open_rounds_)) {
    return;
  }
  Round& round = RoundAt(number);
  round.completed[e] = now;
  if (++round.entries_completed < entries_.size()) return;
  // Rounds complete in order, and a report's rounds are consecutive: once one does not fit,
  // it and those after it are left out until the next report.
  const int64_t done = static_cast<int64_t>(done_completed_.size() / entries_.size());
  if (done == 0) first_round_ = number;
  if (number == first_round_ + done &&
      done_submitted_.size() + round.submitted.size() <= kMaxReportedTensors) {
    done_submitted_.insert(done_submitted_.end(), round.submitted.begin(), round.submitted.end());
    done_completed_.insert(done_completed_.end(), round.completed.begin(), round.completed.end());
    for (size_t n = 0; n + 1 < round.observed.size(); ++n) {
      if (round.observed[n] != round.observed[n + 1]) {
        done_cut_after_.insert(static_cast<int32_t>(n));
      }
    }
    // The last tensor of the round before and this round's first.
    if (tail_round_ == number - 1 && tail_observed_ != round.observed.front()) {
      done_cut_after_.insert(static_cast<int32_t>(tensors_.size()) - 1);
    }
  }
  tail_round_ = number;
  tail_observed_ = round.observed.back();
  while (open_rounds_ > 0 && RoundAt(rounds_begin_).entries_completed == entries_.size()) {
    ++rounds_begin_;
    --open_rounds_;
  }
}

std::vector<Submission> ClientSchedule::Ended(int64_t position) {
  deviated_ = true;
  std::vector<Submission> back;
  for (size_t t = 0; t < taken_.size(); ++t) {
    if (taken_[t] && taken_[t]->position >= position) {
      back.emplace_back(taken_[t]->order, tensors_[t].request);
    }
    taken_[t].reset();
  }
  std::ranges::fill(submitted_, 0);
  open_rounds_ = 0;
  SortBySubmission(back);
  return back;
}

ScheduleProgress ClientSchedule::TakeProgress(absl::Time now, absl::Duration stalling) {
  ScheduleProgress progress;
  progress.schedule = id_;
  progress.first_round = first_round_;
  progress.submitted_ago.reserve(done_submitted_.size());
  for (absl::Time t : done_submitted_) progress.submitted_ago.push_back(now - t);
  progress.completed_ago.reserve(done_completed_.size());
  for (absl::Time t : done_completed_) progress.completed_ago.push_back(now - t);
  done_submitted_.clear();
  done_completed_.clear();
  progress.cut_after.assign(done_cut_after_.begin(), done_cut_after_.end());
  done_cut_after_.clear();
  const int64_t k = static_cast<int64_t>(entries_.size());
  const bool stalled = std::ranges::any_of(taken_, [&](const std::optional<Taken>& taken) {
    return taken && now - taken->submitted >= stalling;
  });
  if (stalled) {
    for (size_t t = 0; t < taken_.size(); ++t) {
      if (!taken_[t]) continue;
      progress.waiting.push_back(
          {static_cast<int>(t), taken_[t]->position / k, now - taken_[t]->submitted});
    }
  }
  return progress;
}

}  // namespace troika::internal
