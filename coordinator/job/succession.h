#pragma once
// Succession: how one job hands over to the job after it, which Generations makes:
//  - an elastic generation ends for a membership change as an abort does (Lifecycle), and
//    its successor inherits the nodes waiting to join and the timeline, marked with the
//    change; at a commit barrier every joining node is admitted, its ranks after every other
//    rank's, and told its block;
//  - a job that is not elastic forms anew when ranks attach again: its next incarnation, made
//    on first use, inherits the node blocks, the timeline and the exits of ranks that left
//    (they will never attach again);
//  - the successor serves the job's name once it no longer waits for this one's ranks.
// The job before hands over under its lock, and the successor takes over under its own
// (Job::Inherit): a job, then its successor, is the only lock order between jobs.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/messages.h"
#include "coordinator/inspection/timeline.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/inspection.h"
#include "coordinator/job/lifecycle.h"
#include "coordinator/job/roster.h"
#include "coordinator/job/sessions.h"

namespace troika::coordinator {

class Job;

class Succession {
 public:
  // What a successor takes over from the job before it.
  struct Inheritance {
    std::vector<Generations::Joiner> joiners;  // an elastic generation's
    std::map<int, std::string> nodes;          // an incarnation's node blocks
    std::map<int, RankExit> left_exits;        // ranks that left an incarnation, then ended
    std::unique_ptr<Timeline> timeline;
    // An elastic generation's: what the sessions of the generation that ended were told, and
    // its epoch (Sessions::Follows).
    std::shared_ptr<const DownMessage> change;
    int64_t ended_epoch = 0;
  };

  // The parts are the job's own and outlive this.
  Succession(std::string job, Generations& generations, Lifecycle& lifecycle, Roster& roster,
             Sessions& sessions, Inspection& inspection, Clock& clock);
  Succession(const Succession&) = delete;
  Succession& operator=(const Succession&) = delete;

  // Ends the generation of `self` for `change`, once its successor is made: every session is
  // told the change, and the job goes on as the successor under its name.
  void EndGeneration(const std::shared_ptr<Job>& self, MembershipChange change,
                     std::optional<AbortCause> cause, const std::string& reason,
                     std::optional<RankExit> exit);
  // At a commit: ends the generation of `self` admitting every joining node.
  void AdmitJoiners(const std::shared_ptr<Job>& self);
  // The next incarnation of `self`, made on first use.
  std::shared_ptr<Job> NextIncarnation(const std::shared_ptr<Job>& self);
  // `ranks` of the generation `self` ended (their session's peer went away after the end:
  // `reason`) will not attach to the successor: it learns so now rather than at its attach
  // timeout (MembershipPolicy::LostBeforeAttach). Nothing for ranks without a place there.
  void LostAfterEnd(const std::vector<int>& ranks, const std::string& reason);
  // The successor that serves the job's name now: null before there is one, and while a next
  // incarnation still attaches and this one runs (this one's ranks still use the job's
  // key-value store; attaches reach that incarnation through this one).
  std::shared_ptr<Job> Serving() const;
  // The generation after this one once this one ended (EndGeneration), or null.
  std::shared_ptr<Job> NextGeneration() const;
  // Takes `inheritance` over (the successor's side). Returns the exits of ranks that left the
  // job before: the job carries out MembershipPolicy::RankGone for each.
  std::map<int, RankExit> Inherit(Inheritance inheritance);

 private:
  const std::string job_;
  Generations& generations_;
  Lifecycle& lifecycle_;
  Roster& roster_;
  Sessions& sessions_;
  Inspection& inspection_;
  Clock& clock_;
  // The change this generation ended for (EndGeneration): rank -> the successor's rank, or -1.
  std::vector<int> next_rank_;
};

}  // namespace troika::coordinator
