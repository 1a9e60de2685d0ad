#include "coordinator/job/generations.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

Generations::Generations(int size, JobOptions& options, absl::Time created_at)
    : size_(size),
      epoch_(options.epoch),
      cause_(std::move(options.generation_cause)),
      min_size_(options.min_size),
      max_size_(options.max_size > 0 ? options.max_size : size),
      created_at_(created_at),
      next_generation_(std::move(options.next_generation)),
      next_incarnation_(std::move(options.next_incarnation)),
      on_recovered_(std::move(options.on_recovered)) {}

void Generations::Sending(absl::Time now) {
  if (on_recovered_) std::exchange(on_recovered_, nullptr)(now - created_at_);
}

void Generations::Describe(JobInfo& info, absl::Time now) const {
  info.epoch = epoch_;
  info.min_size = min_size_;
  info.max_size = max_size_;
  info.generation_cause = cause_;
  info.age = now - created_at_;
}

MembershipChange Generations::Survivors(const std::vector<int>& lost,
                                        const std::set<int>& departed) const {
  MembershipChange change;
  change.epoch = epoch_ + 1;
  change.next_rank.assign(size_, -1);
  for (int r = 0; r < size_; ++r) {
    if (!departed.count(r) && std::find(lost.begin(), lost.end(), r) == lost.end()) {
      change.next_rank[r] = change.size++;
    }
  }
  return change;
}

std::shared_ptr<Job> Generations::NextGenerationOf(const std::shared_ptr<Job>& self,
                                                   const MembershipChange& change,
                                                   std::optional<AbortCause> cause,
                                                   const std::string& why) {
  successor_ = next_generation_(change.size, change.epoch, cause, why);
  PassLineage(self);
  return successor_;
}

std::shared_ptr<Job> Generations::NextIncarnationOf(const std::shared_ptr<Job>& self, bool* made) {
  *made = successor_ == nullptr;
  if (*made) {
    successor_ = next_incarnation_(epoch_ + 1);
    PassLineage(self);
  }
  return successor_;
}

void Generations::AbortForming(AbortCause cause, const std::string& reason) {
  if (forms_again() && successor_) successor_->Abort(cause, reason);  // lock order: job, successor
}

void Generations::PassLineage(const std::shared_ptr<Job>& self) {
  std::shared_ptr<JobLineage> lineage = lineage_.lock();
  if (!lineage) return;
  lineage->Set(self);
  successor_->Track(lineage);  // lock order: a job, then its successor
}

int Generations::JoiningRanks() {
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

int Generations::DrainingRanks(const std::string& besides) const {
  int ranks = 0;
  for (const auto& [host, block] : draining_) {
    if (host != besides) ranks += static_cast<int>(block.size());
  }
  return ranks;
}

bool Generations::CutAtCommit(std::vector<Response>& responses) {
  if ((joining_.empty() && draining_.empty()) || !next_generation_) return false;
  auto commit = std::find_if(responses.begin(), responses.end(), [](const Response& r) {
    return r.type == CollectiveType::kBarrier && r.process_set == 0 && !r.is_error() &&
           r.names.size() == 1 && absl::StartsWith(r.names.front(), kElasticCommitPrefix);
  });
  if (commit == responses.end() || (JoiningRanks() == 0 && draining_.empty())) return false;
  // What came before the commit completes; the commit and what follows fail with the change.
  responses.erase(commit, responses.end());
  return true;
}

Generations::Admission Generations::Admit(const std::set<int>& departed) {
  Admission admission;
  std::vector<int> leaving;
  std::vector<std::string> left;
  for (const auto& [host, ranks] : draining_) {
    leaving.insert(leaving.end(), ranks.begin(), ranks.end());
    left.push_back(absl::StrCat(FormatRanks(ranks), " on ", host));
  }
  draining_.clear();
  admission.change = Survivors(leaving, departed);
  admission.change.at_commit = true;
  admission.joiners = std::move(joining_);
  joining_.clear();
  std::set<std::string> hosts;
  for (const Joiner& joiner : admission.joiners) {
    MembershipChange& change = admission.change;
    if (!joiner.join_id.empty()) change.admitted.push_back({joiner.join_id, change.size});
    admission.first_ranks.push_back(change.size);
    change.size += joiner.nproc;
    change.joined += joiner.nproc;
    hosts.insert(joiner.host);
  }
  std::vector<std::string> reasons;
  if (admission.change.joined > 0) {
    reasons.push_back(absl::StrCat(admission.change.joined,
                                   admission.change.joined == 1 ? " rank" : " ranks", " on ",
                                   absl::StrJoin(hosts, ", "), " joined"));
  }
  if (!left.empty()) reasons.push_back(absl::StrCat(absl::StrJoin(left, ", "), " left"));
  admission.reason = absl::StrCat(absl::StrJoin(reasons, " and "), " at a commit");
  return admission;
}

void Generations::FailJoiners(const absl::Status& status) {
  for (Joiner& joiner : joining_) joiner.done(status);
  joining_.clear();
}

}  // namespace troika::coordinator
