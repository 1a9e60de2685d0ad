#include "agent/node/reformation.h"

#include <utility>

namespace troika::agent {

Reformation::Ask Reformation::Asked() {
  Ask ask;
  if (!current_) {
    current_.emplace();
    current_->id = ++count_;
    ask.began = true;
  }
  ask.id = current_->id;
  return ask;
}

Reformation::Outcome Reformation::Answered(
    uint64_t id, const absl::StatusOr<std::vector<Membership>>& memberships,
    std::vector<Membership>* all) {
  if (!current_ || current_->id != id) return Outcome::kStale;
  if (!memberships.ok()) {
    current_.reset();
    return Outcome::kFailed;
  }
  for (const Membership& m : *memberships) current_->attached[m.rank] = m;
  if (current_->attached.size() < labels_.size()) return Outcome::kWaiting;
  all->clear();
  for (int rank : labels_) all->push_back(current_->attached[rank]);
  current_.reset();
  return Outcome::kComplete;
}

std::vector<Membership> Reformation::TakeHeld() {
  std::vector<Membership> held = std::move(held_);
  held_.clear();
  return held;
}

}  // namespace troika::agent
