#pragma once
// RankTable: this node's ranks across a job's generations — each local rank's number in the
// generation in force (or none: an elastic job went on without it), the ranks the job left
// behind, how the ranks that exited ended, and the failed ranks that wait to rejoin the job
// (--max_restarts, docs/elastic.md). Plain state: not thread-safe (the Agent's lock guards it).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/launch/process_launcher.h"
#include "troika/types.h"

namespace troika::agent {

class RankTable {
 public:
  // The node's block `labels` (its ranks as registered), in generation `epoch`, with
  // `max_restarts` restarts for the whole node.
  void Start(std::vector<int> labels, int max_restarts, int64_t epoch);

  // The block as registered: the ranks' labels, local index -> label. Constant after Start.
  const std::vector<int>& labels() const { return labels_; }
  // The generation in force (the one this node attaches for or runs).
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // Local rank `local`'s number in the generation in force; -1: the job went on without it.
  int RankOf(int local) const { return current_[local]; }
  // This node's ranks in the generation in force, ascending with the local index.
  std::vector<int> LiveRanks() const;
  // Labels of the ranks the job went on without.
  const std::set<int>& left() const { return left_; }

  // Local rank `local`'s process ended (kept until it starts again).
  void RecordExit(int local, const ExitStatus& exit) { exited_[local] = exit; }
  void ForgetExit(int local) { exited_.erase(local); }
  // Every rank's exit as (label, how it ended): a job formed anew hears of them again.
  std::vector<std::pair<int, ExitStatus>> ExitsByLabel() const;

  // A failed rank takes one of the node's restarts: its join id (`who`/label/restarts left)
  // and the restarts left, or nullopt when none is left. It then waits to rejoin; it registers
  // to join only once a change dropped it (Apply's to_register).
  struct Restart {
    std::string join_id;
    int left = 0;
  };
  std::optional<Restart> TakeRestart(int local, const std::string& who);
  bool Restarting(int local) const { return restarting_.count(local) != 0; }
  // It could not rejoin: it stays out.
  void DropRestart(int local) { restarting_.erase(local); }

  // What a membership change does to this node: its ranks in the next generation; the
  // restarted ranks it admits (local index, rank); the failed ones it drops, which now
  // register to rejoin (local index, join id); the exited ones it keeps (rank, how it ended).
  struct Change {
    std::vector<int> live;
    std::vector<std::pair<int, int>> restarted;
    std::vector<std::pair<int, std::string>> to_register;
    std::vector<std::pair<int, ExitStatus>> exited;
  };
  // Whether any rank of this node in force is in `change`'s next generation.
  bool GoesOn(const MembershipChange& change) const;
  // Whether this node has ranks in `change`'s next generation: those in force that go on, or
  // restarting ones it admits.
  bool LiveAfter(const MembershipChange& change) const;
  // Renumbers this node's ranks for `change` and moves to its generation.
  Change Apply(const MembershipChange& change);
  // A node with no rank left rejoins: restarting rank `local` got `first_rank` in generation
  // `epoch`, and the others `admitted` names are admitted with it. Returns them all (local
  // index, rank), `local` first; empty if `local` is not restarting any more.
  std::vector<std::pair<int, int>> Rejoin(int local, int first_rank,
                                          const std::vector<MembershipChange::Admitted>& admitted,
                                          int64_t epoch);

 private:
  std::vector<int> labels_;
  std::vector<int> current_;  // by local index: the rank in force, or -1
  int64_t epoch_ = 0;
  std::set<int> left_;
  std::map<int, ExitStatus> exited_;       // local index -> how its process ended
  int restarts_left_ = 0;                  // counted down
  std::map<int, std::string> restarting_;  // local index -> join id, while it waits to rejoin
  // Of those, the ones no change has dropped yet: they register once one has (Apply), so
  // that the job has room for them.
  std::set<int> unregistered_;
};

}  // namespace troika::agent
