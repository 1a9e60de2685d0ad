// Job: elastic jobs (docs/elastic.md) — losing ranks ends a generation instead of the job, and
// nodes that register while it runs are admitted at a commit.

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/wire.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

MembershipChange Job::SurvivorsLocked(const std::vector<int>& lost) const {
  MembershipChange change;
  change.epoch = epoch_ + 1;
  change.next_rank.assign(size_, -1);
  for (int r = 0; r < size_; ++r) {
    if (!departed_.count(r) && std::find(lost.begin(), lost.end(), r) == lost.end()) {
      change.next_rank[r] = change.size++;
    }
  }
  return change;
}

void Job::LoseRanksLocked(const std::vector<int>& lost, AbortCause cause, const std::string& reason,
                          std::optional<RankExit> exit) {
  if (min_size_ == 0 || !next_generation_ || state_ != State::kRunning || resync_ || detached_) {
    return AbortLocked(cause, reason, std::move(exit));
  }
  MembershipChange change = SurvivorsLocked(lost);
  if (change.size < min_size_) {
    return AbortLocked(cause,
                       absl::StrCat(reason, "; ", change.size,
                                    change.size == 1 ? " rank remains" : " ranks remain",
                                    ", below the job's minimum of ", min_size_),
                       std::move(exit));
  }
  EndGenerationLocked(std::move(change), cause, reason, std::move(exit));
}

void Job::EndGenerationLocked(MembershipChange change, std::optional<AbortCause> cause,
                              const std::string& reason, std::optional<RankExit> exit) {
  // The generation ends as an abort does (every session told, attaches and key-value waits
  // failed), but the job goes on: the owner serves successor_ under its name from now on.
  state_ = State::kAborted;
  successor_ = next_generation_(change.size, change.epoch, cause, reason);
  PassLineageLocked();
  successor_->AdoptJoiners(std::move(joining_));
  joining_.clear();
  abort_reason_ =
      absl::StrCat(reason, "; the job goes on with ", change.size,
                   change.size == 1 ? " rank" : " ranks", " as generation ", change.epoch);
  if (std::unique_ptr<Timeline> timeline = telemetry_.TakeTimeline()) {
    timeline->MembershipChange(clock_.Now(), abort_reason_, change.size);
    successor_->AdoptTimeline(std::move(timeline));
  }
  const std::string message =
      absl::StrCat("membership of job '", name_, "' changed: ", abort_reason_);
  TROIKA_LOG(WARNING) << message;
  // Ranks still attaching (a generation ended at its attach timeout) learn the renumbering
  // from their attach's answer.
  FailAttachWaitersLocked(MembershipChanged(message, change));
  auto down = std::make_shared<DownMessage>();
  down->abort_reason = message;
  down->abort_cause = std::move(exit);
  down->membership_change = std::move(change);
  BroadcastLocked(std::move(down));
  kv_.Close(absl::AbortedError(message));
}

int Job::JoiningRanksLocked() {
  int ranks = 0;
  for (auto it = joining_.begin(); it != joining_.end();) {
    if (it->cancelled && it->cancelled()) {
      it->done(absl::CancelledError("the node stopped waiting to join"));
      it = joining_.erase(it);
      continue;
    }
    ranks += it->nproc;
    ++it;
  }
  return ranks;
}

bool Job::CutAtCommitLocked(std::vector<Response>& responses) {
  if (joining_.empty() || !next_generation_ || state_ != State::kRunning || resync_ || detached_) {
    return false;
  }
  auto commit = std::find_if(responses.begin(), responses.end(), [](const Response& r) {
    return r.type == CollectiveType::kBarrier && r.process_set == 0 && !r.is_error() &&
           r.names.size() == 1 && absl::StartsWith(r.names.front(), kElasticCommitPrefix);
  });
  if (commit == responses.end() || JoiningRanksLocked() == 0) return false;
  // What came before the commit completes; the commit and what follows fail with the change.
  responses.erase(commit, responses.end());
  return true;
}

void Job::AdmitJoinersLocked() {
  MembershipChange change = SurvivorsLocked({});
  change.at_commit = true;
  std::vector<Joiner> admitted = std::move(joining_);
  joining_.clear();
  std::vector<int> first_ranks;
  std::set<std::string> hosts;
  for (const Joiner& joiner : admitted) {
    if (!joiner.join_id.empty()) change.admitted.push_back({joiner.join_id, change.size});
    first_ranks.push_back(change.size);
    change.size += joiner.nproc;
    change.joined += joiner.nproc;
    hosts.insert(joiner.host);
  }
  const int size = change.size;
  const int64_t epoch = change.epoch;
  const std::string reason =
      absl::StrCat(change.joined, change.joined == 1 ? " rank" : " ranks", " on ",
                   absl::StrJoin(hosts, ", "), " joined at a commit");
  EndGenerationLocked(std::move(change), std::nullopt, reason, std::nullopt);
  for (size_t i = 0; i < admitted.size(); ++i) {
    admitted[i].done(NodeBlock{first_ranks[i], -1, size, epoch});
  }
}

void Job::AdoptJoiners(std::vector<Joiner> joiners) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Joiner& joiner : joiners) joining_.push_back(std::move(joiner));
}

void Job::AdoptTimeline(std::unique_ptr<Timeline> timeline) {
  std::lock_guard<std::mutex> lock(mu_);
  telemetry_.AdoptTimeline(std::move(timeline));
  SyncSettingsLocked();  // the ranks report their phases
}

void Job::FailJoinersLocked(const absl::Status& status) {
  for (Joiner& joiner : joining_) joiner.done(status);
  joining_.clear();
}

void Job::Track(const std::shared_ptr<JobLineage>& lineage) {
  std::lock_guard<std::mutex> lock(mu_);
  lineage_ = lineage;
}

void Job::PassLineageLocked() {
  std::shared_ptr<JobLineage> lineage = lineage_.lock();
  if (!lineage) return;
  lineage->Set(shared_from_this());
  successor_->Track(lineage);  // lock order: a job, then its successor
}

std::shared_ptr<Job> Job::successor() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A next incarnation still attaching while this one runs (some ranks have not shut down
  // yet) does not serve the job's name yet: the ranks that run still use this one's
  // key-value store. Attaches reach it through this one (Attach). Lock order: an
  // incarnation, then its successor.
  if (successor_ && state_ == State::kRunning && successor_->state() == State::kAttaching) {
    return nullptr;
  }
  return successor_;
}

}  // namespace troika::coordinator
