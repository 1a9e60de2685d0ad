// Job: elastic jobs (docs/elastic.md) — losing ranks ends a generation instead of the job.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job.h"

namespace troika::coordinator {

void Job::LoseRanksLocked(const std::vector<int>& lost, AbortCause cause, const std::string& reason,
                          std::optional<RankExit> exit) {
  if (min_size_ == 0 || !next_generation_ || state_ != State::kRunning || resync_ || detached_) {
    return AbortLocked(cause, reason, std::move(exit));
  }
  MembershipChange change;
  change.epoch = epoch_ + 1;
  change.next_rank.assign(size_, -1);
  for (int r = 0; r < size_; ++r) {
    if (!departed_.count(r) && std::find(lost.begin(), lost.end(), r) == lost.end()) {
      change.next_rank[r] = change.size++;
    }
  }
  if (change.size < min_size_) {
    return AbortLocked(cause,
                       absl::StrCat(reason, "; ", change.size,
                                    change.size == 1 ? " rank remains" : " ranks remain",
                                    ", below the job's minimum of ", min_size_),
                       std::move(exit));
  }
  // The generation ends as an abort does (every session told, attaches and key-value waits
  // failed), but the job goes on: the owner serves successor_ under its name from now on.
  state_ = State::kAborted;
  successor_ = next_generation_(change.size, change.epoch, cause, reason);
  abort_reason_ =
      absl::StrCat(reason, "; the job goes on with ", change.size,
                   change.size == 1 ? " rank" : " ranks", " as generation ", change.epoch);
  const std::string message =
      absl::StrCat("membership of job '", name_, "' changed: ", abort_reason_);
  TROIKA_LOG(WARNING) << message;
  auto down = std::make_shared<DownMessage>();
  down->abort_reason = message;
  down->abort_cause = std::move(exit);
  down->membership_change = std::move(change);
  BroadcastLocked(std::move(down));
  FailAttachWaitersLocked(absl::AbortedError(message));
  kv_.Close(absl::AbortedError(message));
}

std::shared_ptr<Job> Job::successor() const {
  std::lock_guard<std::mutex> lock(mu_);
  return successor_;
}

}  // namespace troika::coordinator
