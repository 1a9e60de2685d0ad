#include "libclient/schedule.h"

#include <algorithm>
#include <utility>

namespace troika::internal {

void SortBySubmission(std::vector<Submission>& submissions) {
  std::ranges::sort(submissions, {}, &Submission::first);
}

ClientSchedule::ClientSchedule(Schedule schedule,
                               const std::map<std::string, TensorRequest>& expected)
    : id_(schedule.id), entries_(std::move(schedule.entries)) {
  for (size_t e = 0; e < entries_.size(); ++e) {
    Response& entry = entries_[e];
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
      slot_[name] = {e, it->second};
    }
  }
  if (entries_.empty()) complete_ = false;
}

bool ClientSchedule::Submit(const TensorRequest& request, uint64_t order) {
  if (deviated_ || request.process_set != 0) return false;
  auto slot = slot_.find(request.name);
  if (slot == slot_.end() || !(slot->second.second == request)) return false;
  const int64_t k = static_cast<int64_t>(entries_.size());
  const int64_t e = static_cast<int64_t>(slot->second.first);
  // The name's first occurrence not entered yet (a name is in flight once, so its previous
  // occurrence was entered before it could be submitted again).
  int64_t position = next_ - next_ % k + e;
  if (position < next_) position += k;
  ++submitted_[position];
  taken_[request.name] = {position, order, request};
  return true;
}

ClientSchedule::Step ClientSchedule::MakeStep(int64_t position, bool vote_void) const {
  const int64_t k = static_cast<int64_t>(entries_.size());
  return {position, entries_[static_cast<size_t>(position % k)], vote_void};
}

std::vector<ClientSchedule::Step> ClientSchedule::TakeReady() {
  std::vector<Step> ready;
  if (deviated_) return ready;
  const int64_t k = static_cast<int64_t>(entries_.size());
  for (;;) {
    auto it = submitted_.find(next_);
    if (it == submitted_.end() ||
        it->second < entries_[static_cast<size_t>(next_ % k)].names.size()) {
      break;
    }
    submitted_.erase(it);
    ready.push_back(MakeStep(next_++, false));
  }
  return ready;
}

ClientSchedule::Step ClientSchedule::Deviate() {
  deviated_ = true;
  if (entries_.empty()) return {};
  return MakeStep(next_, true);
}

bool ClientSchedule::WaitDeviates(const std::string& name) const {
  if (deviated_) return false;
  auto it = taken_.find(name);
  return it != taken_.end() && it->second.position >= next_;
}

void ClientSchedule::Completed(int64_t position) {
  for (auto it = taken_.begin(); it != taken_.end();) {
    it = it->second.position == position ? taken_.erase(it) : std::next(it);
  }
}

std::vector<Submission> ClientSchedule::Ended(int64_t position) {
  deviated_ = true;
  std::vector<Submission> back;
  for (auto& [name, taken] : taken_) {
    if (taken.position >= position) back.emplace_back(taken.order, std::move(taken.request));
  }
  taken_.clear();
  submitted_.clear();
  SortBySubmission(back);
  return back;
}

}  // namespace troika::internal
