#pragma once
// Generations: where one job goes after this generation (docs/elastic.md, docs/protocol.md
// "Shutting down and attaching again"):
//  - an elastic job's next generation — the survivors renumbered in order when ranks are lost,
//    and the nodes waiting to join (admitted at a commit barrier, their ranks after the
//    survivors');
//  - a job that is not elastic: its next incarnation, formed by ranks that shut down and attach
//    again, and the exits of ranks that left this one (they will never attach again).
// It makes the successor (through the job's factories), moves the job's lineage on to it, and
// hands it the joining nodes.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/messages.h"
#include "coordinator/job/roster.h"

namespace troika::coordinator {

class Job;
class JobLineage;
enum class AbortCause;

class Generations {
 public:
  using RegisterCallback = std::function<void(absl::StatusOr<NodeBlock>)>;
  // Makes an elastic job's next generation: `size` ranks, epoch `epoch`, begun because ranks
  // were lost (`cause`, `why`) or nodes were admitted (no cause).
  using NextGeneration = std::function<std::shared_ptr<Job>(
      int size, int64_t epoch, std::optional<AbortCause> cause, const std::string& why)>;
  // Makes a job's next incarnation, epoch `epoch`.
  using NextIncarnation = std::function<std::shared_ptr<Job>(int64_t epoch)>;

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

  // `min_size` > 0 with `next_generation`: an elastic job. `next_incarnation` null: ranks
  // cannot attach again.
  Generations(int size, int64_t epoch, int min_size, NextGeneration next_generation,
              NextIncarnation next_incarnation);

  bool elastic() const { return min_size_ > 0 && next_generation_ != nullptr; }
  bool forms_again() const { return next_incarnation_ != nullptr; }
  int min_size() const { return min_size_; }

  // The next generation's ranks without `lost` and `departed` (survivors keep their order).
  MembershipChange Survivors(const std::vector<int>& lost, const std::set<int>& departed) const;
  // Makes the next generation of `self` for `change`; the joining nodes wait on in it.
  std::shared_ptr<Job> NextGenerationOf(const std::shared_ptr<Job>& self,
                                        const MembershipChange& change,
                                        std::optional<AbortCause> cause, const std::string& why);
  // The next incarnation of `self`, made on first use.
  std::shared_ptr<Job> NextIncarnationOf(const std::shared_ptr<Job>& self, bool* made);
  // The generation or incarnation that replaced this one, or null.
  const std::shared_ptr<Job>& successor() const { return successor_; }
  // From now on the successors move `lineage` on (JobLineage).
  void Track(const std::shared_ptr<JobLineage>& lineage) { lineage_ = lineage; }

  // Joining nodes (elastic jobs).
  void Join(Joiner joiner) { joining_.push_back(std::move(joiner)); }
  // The ranks of the joining nodes that still wait; cancelled ones are let go.
  int JoiningRanks();
  // Nodes wait to join and `responses` (about to be sent) hold the commit barrier: cuts them
  // before it and returns true — the generation is to end there (Admit).
  bool CutAtCommit(std::vector<Response>& responses);
  // Every joining node, with the ranks after the survivors (not `departed`).
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
  const int min_size_;
  const NextGeneration next_generation_;
  const NextIncarnation next_incarnation_;
  std::shared_ptr<Job> successor_;
  std::weak_ptr<JobLineage> lineage_;  // Track(); its holder keeps it
  std::vector<Joiner> joining_;        // nodes waiting for a commit
  std::map<int, RankExit> left_exits_;
};

}  // namespace troika::coordinator
