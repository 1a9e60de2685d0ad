#pragma once
// Roster: who belongs to one generation of a job — the nodes that reserved blocks of
// ranks (RegisterNode), the ranks that attached and from which host, the attaches waiting for
// the others, the memberships (local and cross ranks) once every rank attached, and the ranks
// that left for good (goodbye, or an exit before joining).
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.
// Attach callbacks run under that lock (they only finish RPCs).

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "common/scheduler.h"
#include "coordinator/job/job_info.h"

namespace troika::coordinator {

// A node's ranks: first_rank .. first_rank + nproc - 1 of a generation of `size` ranks.
struct NodeBlock {
  int first_rank = 0;
  int node_rank = 0;  // -1: a node admitted to a running elastic job
  int size = 0;
  int64_t epoch = 0;  // the generation of `size` ranks
  // A node admitted at a commit: every node admitted with it that gave a join id.
  std::vector<MembershipChange::Admitted> admitted;
};

class Roster {
 public:
  using AttachCallback = std::function<void(absl::StatusOr<std::vector<Membership>>)>;

  // `job`: the job's name, for messages. Attach timers run on `scheduler`.
  Roster(std::string job, int size, int64_t epoch, Scheduler& scheduler);
  ~Roster();  // cancels the attach timers (the waiters are not answered)

  // Ranks `ranks` attach from `host`: an attach that was waiting for any of them is void
  // (ABORTED), and this one waits, for `timeout` at most, after which `expire` is called
  // with its id (on the scheduler's thread). Returns that id.
  uint64_t Wait(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
                AttachCallback done, std::function<void(uint64_t)> expire);
  bool waiting(uint64_t id) const { return waiters_.count(id) > 0; }
  bool has_waiters() const { return !waiters_.empty(); }
  // Every rank attached.
  bool complete() const { return static_cast<int>(hosts_.size()) == size_; }
  // Computes the memberships (local ranks: position among the ranks of the same host; cross
  // ranks: among the ranks of the same local rank, as in Horovod) and answers every waiter.
  void Complete();
  // The memberships of `ranks` (after Complete).
  std::vector<Membership> Of(const std::vector<int>& ranks) const;
  // Fails every waiting attach with `status`.
  void FailWaiters(const absl::Status& status);
  // The ranks that did not attach, and those that did, ascending.
  void Split(std::vector<int>* missing, std::vector<int>* attached) const;
  // Forgets the attached ranks (an attach phase that timed out).
  void ClearHosts() { hosts_.clear(); }
  bool has_hosts() const { return !hosts_.empty(); }
  // Rank `rank`'s host, or nullptr if it did not attach.
  const std::string* host(int rank) const;
  // Rank `rank`'s membership, or nullptr before Complete.
  const Membership* membership(int rank) const;
  // Every rank for operators (JobInfo): its host once attached, local and cross rank once
  // complete, whether it departed. Not whether it is in session (Sessions knows).
  std::vector<RankInfo> Describe() const;

  // Reserves `nproc` consecutive ranks for a node: block `node_rank`, or the lowest free one
  // if -1 (the same host asking again gets its block again). RESOURCE_EXHAUSTED when no
  // block is left; `added` says whether the node is new.
  absl::StatusOr<NodeBlock> Reserve(const std::string& host, int nproc, int node_rank, bool* added);
  // Node rank -> host (the job's state record, a next incarnation).
  const std::map<int, std::string>& nodes() const { return nodes_; }
  void AddNodes(const std::map<int, std::string>& nodes);

  // `rank` left for good; false if it had already.
  bool Depart(int rank) { return departed_.insert(rank).second; }
  const std::set<int>& departed() const { return departed_; }
  bool departed(int rank) const { return departed_.count(rank) > 0; }
  bool all_departed() const { return static_cast<int>(departed_.size()) == size_; }

 private:
  struct Waiter {
    std::vector<int> ranks;
    AttachCallback done;
    Scheduler::TaskId timer = 0;
  };

  const std::string job_;
  const int size_;
  const int64_t epoch_;
  Scheduler& scheduler_;
  std::map<int, std::string> hosts_;    // attached rank -> host
  std::map<uint64_t, Waiter> waiters_;  // by id
  uint64_t next_waiter_ = 1;
  std::map<int, std::string> nodes_;     // node rank -> host
  std::vector<Membership> memberships_;  // by rank, once complete
  std::set<int> departed_;               // said goodbye, or exited 0 before joining
};

}  // namespace troika::coordinator
