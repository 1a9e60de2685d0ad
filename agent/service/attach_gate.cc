#include "agent/service/attach_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/messages.h"

namespace troika::agent {

void AttachGate::Wait(const std::vector<int>& ranks, Callback done) {
  Waiter waiter{ranks, std::move(done)};
  absl::StatusOr<std::map<int, Membership>> outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!outcome_.has_value()) {
      waiters_.push_back(std::move(waiter));
      return;
    }
    outcome = *outcome_;
  }
  Answer(outcome, waiter);
}

void AttachGate::Complete(absl::StatusOr<std::vector<Membership>> memberships,
                          std::optional<uint64_t> generation) {
  absl::StatusOr<std::map<int, Membership>> outcome = std::map<int, Membership>();
  if (memberships.ok()) {
    for (const Membership& m : *memberships) (*outcome)[m.rank] = m;
  } else {
    outcome = memberships.status();
  }
  std::vector<Waiter> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (outcome_.has_value() || (generation && *generation != generation_)) return;
    outcome_ = outcome;
    waiters.swap(waiters_);
  }
  for (const Waiter& waiter : waiters) Answer(outcome, waiter);
}

void AttachGate::Reset() {
  std::vector<Waiter> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcome_.reset();
    waiters.swap(waiters_);
    ++generation_;
  }
  for (const Waiter& waiter : waiters) {
    waiter.done(absl::AbortedError(
        absl::StrCat("the job's membership changed while ", FormatRanks(waiter.ranks),
                     " attached: attach with the numbers of its next generation")));
  }
}

uint64_t AttachGate::generation() {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

void AttachGate::Answer(const absl::StatusOr<std::map<int, Membership>>& outcome,
                        const Waiter& waiter) {
  if (!outcome.ok()) return waiter.done(outcome.status());
  std::vector<Membership> out;
  for (int rank : waiter.ranks) {
    auto it = outcome->find(rank);
    if (it == outcome->end()) {
      return waiter.done(
          absl::InternalError(absl::StrCat("the coordinator sent no membership for rank ", rank)));
    }
    out.push_back(it->second);
  }
  waiter.done(std::move(out));
}

}  // namespace troika::agent
