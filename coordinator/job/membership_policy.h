#pragma once
// MembershipPolicy: what a change in who belongs to a job means for it. It reads the job's
// parts (Lifecycle, Roster, Sessions, Generations) and returns a decision that the Job
// carries out — a Verdict, or where an attach goes; it changes nothing itself.
//
//  - Ranks lost (a failed exit, a session's lost connection): an elastic job that runs, with
//    at least its minimum of ranks left, ends its generation (the survivors renumbered in
//    order); any other job aborts (docs/elastic.md).
//  - A rank's process ended (its agent's report): one that exited cleanly before joining
//    departs; a failure is a loss. One that had left (goodbye) a job that forms again is a left
//    rank's exit: the next incarnation cannot form without it, and a failure aborts the
//    incarnation it left too, even finished (docs/protocol.md, "Shutting down and attaching
//    again").
//  - The attach phase timed out: an elastic job with its minimum attached ends the generation
//    without the missing ranks; any other fails every attach, naming them. Ranks attached
//    whose session never opened are lost when the job's session timeout passes.
//  - An attach is refused, answered at once (the job runs), sent to the next incarnation (ranks
//    that left attach again), or waits; a node registering reserves a block or joins at a
//    commit, up to the job's maximum.
//
// Thread contract: not thread-safe; the owning Job calls under its lock. The parts outlive it.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/lifecycle.h"
#include "coordinator/job/roster.h"
#include "coordinator/job/sessions.h"

namespace troika::coordinator {

// What the Job does about a change in its membership.
struct Verdict {
  enum class Kind {
    kNone,            // nothing
    kDepart,          // `rank` leaves for good: `reason` says how ("has shut down", ...)
    kAbort,           // Lifecycle::Abort(cause, reason, exit, finished_too)
    kEndGeneration,   // the generation ends for `change` (cause, reason, exit)
    kFailAttaches,    // every waiting attach fails with DEADLINE_EXCEEDED `reason`
    kLeftRankExited,  // `exit`'s rank had left this incarnation; its process ended
  };
  Kind kind = Kind::kNone;
  int rank = -1;
  AbortCause cause = AbortCause::kRankExit;
  std::string reason;
  std::optional<RankExit> exit;
  MembershipChange change;
  bool finished_too = false;

  static Verdict Depart(int rank, std::string reason);
  static Verdict Abort(AbortCause cause, std::string reason, std::optional<RankExit> exit,
                       bool finished_too = false);
  static Verdict EndGeneration(MembershipChange change, AbortCause cause, std::string reason,
                               std::optional<RankExit> exit);
  static Verdict FailAttaches(std::string reason);
  static Verdict LeftRankExited(RankExit exit);
};

class MembershipPolicy {
 public:
  // `job` and `size`: the job's name (for messages) and its number of ranks.
  MembershipPolicy(std::string job, int size, const Lifecycle& lifecycle, const Roster& roster,
                   const Sessions& sessions, const Generations& generations);

  // Ranks `lost` are gone (`cause`, `reason`, the `exit` that says so): kEndGeneration or
  // kAbort (the reason then says when too few ranks remain).
  Verdict Lose(const std::vector<int>& lost, AbortCause cause, const std::string& reason,
               std::optional<RankExit> exit = std::nullopt) const;
  // A session of `ranks` closed (`ended`: OK when its connection was lost, else why the
  // coordinator ended it). Of its ranks, those that had not left are lost (Lose) or, for a
  // session ended for what it sent, the job aborts (kProtocolError). kNone unless the job
  // runs and is not detached.
  Verdict SessionClosed(const std::vector<int>& ranks, const absl::Status& ended) const;
  // "ranks 2-3 on h lost the connection to the coordinator": what SessionClosed says of them.
  std::string ConnectionLost(const std::vector<int>& ranks) const;
  // `timeout` after the job formed (its agents open their sessions at once): the ranks that
  // neither have a session nor left are lost (Lose, kAttachTimeout: "rank 2 on h attached but
  // opened no session within 1m"; their agent died between its attach and its session).
  // kNone while every one has, or unless the job runs (not detached, not resuming).
  Verdict SessionsNotOpened(absl::Duration timeout) const;
  // Said to an elastic generation that attaches: its `ranks` were lost before they attached
  // (the peer of their session in the generation before went away after that generation
  // ended for another loss: a second loss during recovery). Those still missing are lost
  // (`reason`): kEndGeneration, or kAbort below the minimum; kNone once it no longer attaches.
  Verdict LostBeforeAttach(const std::vector<int>& ranks, const std::string& reason) const;
  // A rank's process ended: kDepart, a loss (Lose), kLeftRankExited (a rank that had left
  // failed, in any job, or exited in a job that forms again) or kNone.
  Verdict Exit(const RankExit& exit) const;
  // The process of a rank that had left this incarnation ended (kLeftRankExited): a failure
  // aborts this incarnation, finished or not (kAbort); else kNone.
  Verdict LeftRankExited(const RankExit& exit) const;
  // Said to a next incarnation: `exit`'s rank, which had left the one before, ended. Still
  // attaching, it cannot form (kAbort); else as Exit.
  Verdict RankGone(const RankExit& exit) const;
  // The first waiting attach timed out after `timeout`: kEndGeneration or kFailAttaches.
  Verdict AttachTimedOut(absl::Duration timeout) const;

  struct AttachRoute {
    enum class Kind { kRefuse, kNextIncarnation, kAnswer, kWait };
    Kind kind = Kind::kWait;
    absl::Status refusal;  // kRefuse
  };
  // Where an attach of `ranks` goes (Job::Attach): refused (INVALID_ARGUMENT, UNAVAILABLE while
  // detached, FAILED_PRECONDITION once over or, attaching again, aborted; ABORTED with the
  // change once the generation ended: Lifecycle::CheckAttachable); to the next
  // incarnation (a job that forms again, runs or finished, and the ranks left it or say
  // `again`); answered at once (it runs); or it waits for the other ranks.
  AttachRoute RouteAttach(const std::vector<int>& ranks, bool again) const;

  // Whether a session may bind at `epoch`: the job runs (UNAVAILABLE while detached,
  // FAILED_PRECONDITION naming its state otherwise), at that epoch (FAILED_PRECONDITION).
  absl::Status AcceptsSession(int64_t epoch) const;
  // Whether a node of `nproc` ranks may register at all (UNAVAILABLE while detached,
  // INVALID_ARGUMENT for no ranks).
  absl::Status CheckNode(int nproc) const;
  // Whether a node registering reserves a block of this generation: a job that is not elastic,
  // or an elastic one's first generation while it attaches. Else it joins at a commit.
  bool TakesBlocks() const;
  // Whether a node of `nproc` ranks can wait to join, `joining` ranks waiting already:
  // FAILED_PRECONDITION once the job is over, RESOURCE_EXHAUSTED past its maximum.
  absl::Status CheckJoin(int nproc, int joining) const;

 private:
  // "ranks 2-3 on h" (the hosts they attached from).
  std::string OnHosts(const std::vector<int>& ranks) const;

  const std::string job_;
  const int size_;
  const Lifecycle& lifecycle_;
  const Roster& roster_;
  const Sessions& sessions_;
  const Generations& generations_;
};

}  // namespace troika::coordinator
