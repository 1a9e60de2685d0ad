#pragma once
// Generations: where one job goes after this generation (docs/elastic.md, docs/protocol.md
// "Shutting down and attaching again"):
//  - an elastic job's next generation — the survivors renumbered in order when ranks are lost,
//    and the nodes waiting to join (admitted at a commit barrier, their ranks after the
//    survivors') or to leave (drained at a commit barrier: their ranks have no place after it);
//  - a job that is not elastic: its next incarnation, formed by ranks that shut down and attach
//    again, and the exits of ranks that left this one (they will never attach again).
// It makes the successor (through the job's factories), moves the job's lineage on to it, and
// keeps the joining nodes until the job hands them over (TakeJoiners), and ends a next
// incarnation still forming when the job is aborted.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/messages.h"
#include "coordinator/job/job_info.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/roster.h"

namespace troika::coordinator {

class Job;

class Generations {
 public:
  using RegisterCallback = std::function<void(absl::StatusOr<NodeBlock>)>;

  // A node waiting to join an elastic job (Job::RegisterNode).
  struct Joiner {
    std::string host;
    int nproc = 0;
    RegisterCallback done;
    std::function<bool()> cancelled;
    std::string join_id;
  };
  // The change that admits every joining node, and the nodes with their first ranks.
  struct Admission {
    MembershipChange change;
    std::vector<Joiner> joiners;
    std::vector<int> first_ranks;
    std::string reason;
  };

  // This generation of a job of `size` ranks, begun at `created_at`: its epoch, cause, sizes
  // and factories from `options` (JobOptions: min_size > 0 with next_generation is an elastic
  // job; next_incarnation null: ranks cannot attach again).
  Generations(int size, JobOptions& options, absl::Time created_at);

  bool elastic() const { return min_size_ > 0 && next_generation_ != nullptr; }
  bool forms_again() const { return next_incarnation_ != nullptr; }
  int64_t epoch() const { return epoch_; }
  const std::string& cause() const { return cause_; }
  int min_size() const { return min_size_; }
  int max_size() const { return max_size_; }
  absl::Time created_at() const { return created_at_; }
  // Fills `info`'s epoch, sizes, cause and age (at `now`).
  void Describe(JobInfo& info, absl::Time now) const;
  // The generation sends responses at `now`: a generation after the first tells how long
  // after the one before ended it recovered (JobOptions::on_recovered), once.
  void Sending(absl::Time now);

  // The next generation's ranks without `lost` and `departed` (survivors keep their order).
  MembershipChange Survivors(const std::vector<int>& lost, const std::set<int>& departed) const;
  // Makes the next generation of `self` for `change` (the joining nodes wait on in it once
  // the job hands them over).
  std::shared_ptr<Job> NextGenerationOf(const std::shared_ptr<Job>& self,
                                        const MembershipChange& change,
                                        std::optional<AbortCause> cause, const std::string& why);
  // The next incarnation of `self`, made on first use.
  std::shared_ptr<Job> NextIncarnationOf(const std::shared_ptr<Job>& self, bool* made);
  // The generation or incarnation that replaced this one, or null.
  const std::shared_ptr<Job>& successor() const { return successor_; }
  // The job was aborted: a next incarnation still forming ends with it. (An elastic job's
  // successor begins as its generation ends, never by an abort.)
  void AbortForming(AbortCause cause, const std::string& reason);
  // From now on the successors move `lineage` on (JobLineage).
  void Track(const std::shared_ptr<JobLineage>& lineage) { lineage_ = lineage; }

  // Joining nodes (elastic jobs).
  void Join(Joiner joiner) { joining_.push_back(std::move(joiner)); }
  std::vector<Joiner> TakeJoiners() { return std::exchange(joining_, {}); }
  // The ranks of the joining nodes that still wait; cancelled ones are let go.
  int JoiningRanks();
  // Nodes leaving at the next commit (Job::Drain): `host`'s `ranks` of this generation.
  void Drain(const std::string& host, std::vector<int> ranks) {
    draining_[host] = std::move(ranks);
  }
  // The ranks of the nodes leaving at the next commit, but `besides`'s.
  int DrainingRanks(const std::string& besides = "") const;
  // Nodes wait to join or leave and `responses` (about to be sent) hold the commit barrier:
  // cuts them before it and returns true — the generation is to end there (Admit).
  bool CutAtCommit(std::vector<Response>& responses);
  // Every joining node, with the ranks after the survivors (not `departed`, nor draining).
  Admission Admit(const std::set<int>& departed);
  void FailJoiners(const absl::Status& status);

  // Ranks that left this incarnation and whose process then ended (by rank).
  void LeftRankExited(const RankExit& exit) { left_exits_[exit.rank] = exit; }
  const std::map<int, RankExit>& left_exits() const { return left_exits_; }

 private:
  // The successor was just made by `self`: the lineage moves on to `self`, which keeps the
  // successor, and the successor follows it.
  void PassLineage(const std::shared_ptr<Job>& self);

  const int size_;
  const int64_t epoch_;
  const std::string cause_;
  const int min_size_;
  const int max_size_;
  const absl::Time created_at_;
  const decltype(JobOptions::next_generation) next_generation_;
  const decltype(JobOptions::next_incarnation) next_incarnation_;
  std::function<void(absl::Duration)> on_recovered_;  // cleared once called
  std::shared_ptr<Job> successor_;
  std::weak_ptr<JobLineage> lineage_;                 // Track(); its holder keeps it
  std::vector<Joiner> joining_;                       // nodes waiting for a commit
  std::map<std::string, std::vector<int>> draining_;  // host -> its ranks, leaving at a commit
  std::map<int, RankExit> left_exits_;
};

}  // namespace troika::coordinator
