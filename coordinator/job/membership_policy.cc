#include "coordinator/job/membership_policy.h"

#include <string.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::coordinator {
namespace {

bool Failed(const RankExit& exit) { return exit.exit_code != 0 || exit.signal != 0; }

// The exit of a rank that had shut down (said goodbye) before its process ended.
std::string DescribeLeftRankExit(const RankExit& exit) {
  std::string who = absl::StrCat("rank ", exit.rank, exit.host.empty() ? "" : " on ", exit.host);
  if (exit.signal != 0) {
    return absl::StrCat(who, " was killed by signal ", exit.signal, " (", strsignal(exit.signal),
                        ") after it shut down");
  }
  return absl::StrCat(who, " exited with code ", exit.exit_code, " after it shut down",
                      exit.exit_code == 0 ? ", without attaching again" : "");
}

}  // namespace

MembershipPolicy::MembershipPolicy(std::string job, int size, const Lifecycle& lifecycle,
                                   const Roster& roster, const Sessions& sessions,
                                   const Generations& generations)
    : job_(std::move(job)),
      size_(size),
      lifecycle_(lifecycle),
      roster_(roster),
      sessions_(sessions),
      generations_(generations) {}

Verdict Verdict::Depart(int rank, std::string reason) {
  Verdict verdict;
  verdict.kind = Kind::kDepart;
  verdict.rank = rank;
  verdict.reason = std::move(reason);
  return verdict;
}

Verdict Verdict::Abort(AbortCause cause, std::string reason, std::optional<RankExit> exit,
                       bool finished_too) {
  Verdict verdict;
  verdict.kind = Kind::kAbort;
  verdict.cause = cause;
  verdict.reason = std::move(reason);
  verdict.exit = std::move(exit);
  verdict.finished_too = finished_too;
  return verdict;
}

Verdict Verdict::EndGeneration(MembershipChange change, AbortCause cause, std::string reason,
                               std::optional<RankExit> exit) {
  Verdict verdict = Abort(cause, std::move(reason), std::move(exit));
  verdict.kind = Kind::kEndGeneration;
  verdict.change = std::move(change);
  return verdict;
}

Verdict Verdict::FailAttaches(std::string reason) {
  Verdict verdict;
  verdict.kind = Kind::kFailAttaches;
  verdict.reason = std::move(reason);
  return verdict;
}

Verdict Verdict::LeftRankExited(RankExit exit) {
  Verdict verdict;
  verdict.kind = Kind::kLeftRankExited;
  verdict.rank = exit.rank;
  verdict.exit = std::move(exit);
  return verdict;
}

Verdict MembershipPolicy::Lose(const std::vector<int>& lost, AbortCause cause,
                               const std::string& reason, std::optional<RankExit> exit) const {
  if (!generations_.elastic() || !lifecycle_.running() || sessions_.resyncing() ||
      lifecycle_.detached()) {
    return Verdict::Abort(cause, reason, std::move(exit));
  }
  MembershipChange change = generations_.Survivors(lost, roster_.departed());
  const int min_size = generations_.min_size();
  if (change.size < min_size) {
    return Verdict::Abort(cause,
                          absl::StrCat(reason, "; ", change.size,
                                       change.size == 1 ? " rank remains" : " ranks remain",
                                       ", below the job's minimum of ", min_size),
                          std::move(exit));
  }
  return Verdict::EndGeneration(std::move(change), cause, reason, std::move(exit));
}

Verdict MembershipPolicy::SessionClosed(const std::vector<int>& ranks,
                                        const absl::Status& ended) const {
  std::vector<int> lost;
  for (int r : ranks) {
    if (!roster_.departed(r)) lost.push_back(r);
  }
  if (lost.empty() || !lifecycle_.running() || lifecycle_.detached()) return {};
  if (!ended.ok()) {
    return Verdict::Abort(AbortCause::kProtocolError,
                          absl::StrCat("the coordinator ended the session of ", FormatRanks(lost),
                                       ": ", ended.message()),
                          std::nullopt);
  }
  return Lose(lost, AbortCause::kConnectionLost, ConnectionLost(lost));
}

std::string MembershipPolicy::OnHosts(const std::vector<int>& ranks) const {
  std::set<std::string> hosts;
  for (int r : ranks) {
    if (const std::string* host = roster_.host(r); host != nullptr) hosts.insert(*host);
  }
  return absl::StrCat(FormatRanks(ranks), hosts.empty() ? "" : " on ", absl::StrJoin(hosts, ", "));
}

std::string MembershipPolicy::ConnectionLost(const std::vector<int>& ranks) const {
  // Where they were: a lost session is most often a lost node (its agent, or the host).
  return absl::StrCat(OnHosts(ranks), " lost the connection to the coordinator");
}

Verdict MembershipPolicy::SessionsNotOpened(absl::Duration timeout) const {
  if (!lifecycle_.running() || lifecycle_.detached() || sessions_.resyncing()) return {};
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!sessions_.connected(r) && !roster_.departed(r)) missing.push_back(r);
  }
  if (missing.empty()) return {};
  return Lose(missing, AbortCause::kAttachTimeout,
              absl::StrCat(OnHosts(missing), " attached but opened no session within ",
                           absl::FormatDuration(timeout)));
}

Verdict MembershipPolicy::LostBeforeAttach(const std::vector<int>& ranks,
                                           const std::string& reason) const {
  if (lifecycle_.state() != Lifecycle::State::kAttaching || lifecycle_.detached() ||
      !generations_.elastic()) {
    return {};
  }
  std::vector<int> missing, attached;
  roster_.Split(&missing, &attached);
  std::vector<int> lost;
  for (int r : ranks) {
    if (std::find(missing.begin(), missing.end(), r) != missing.end()) lost.push_back(r);
  }
  if (lost.empty()) return {};
  MembershipChange change = generations_.Survivors(lost, roster_.departed());
  if (change.size < generations_.min_size()) {
    return Verdict::Abort(AbortCause::kConnectionLost,
                          absl::StrCat(reason, "; ", change.size,
                                       change.size == 1 ? " rank remains" : " ranks remain",
                                       ", below the job's minimum of ", generations_.min_size()),
                          std::nullopt);
  }
  return Verdict::EndGeneration(std::move(change), AbortCause::kConnectionLost, reason,
                                std::nullopt);
}

Verdict MembershipPolicy::Exit(const RankExit& exit) const {
  if (roster_.departed(exit.rank)) {
    // It had left cleanly, but its process failed after that: the job failed, whatever kind
    // it is (an elastic job's last ranks exiting 1 after shutdown did not finish it). A clean
    // exit matters only to a job that forms again: that rank will not attach again.
    if (!Failed(exit) && !generations_.forms_again()) return {};
    return Verdict::LeftRankExited(exit);
  }
  if (!Failed(exit)) {
    // Its agent saw it exit cleanly without ever joining: it leaves, and the ranks waiting for
    // it to connect fail at once, naming it (a job of processes that never use Troika just
    // finishes).
    return Verdict::Depart(exit.rank, absl::StrCat(exit.host.empty() ? "" : "on ", exit.host,
                                                   exit.host.empty() ? "" : " ",
                                                   "exited with code 0 before joining the job"));
  }
  return Lose({exit.rank}, AbortCause::kRankExit, DescribeRankExit(exit), exit);
}

Verdict MembershipPolicy::LeftRankExited(const RankExit& exit) const {
  if (!Failed(exit)) return {};
  // A failure fails the job, as any rank's does (its agent stops the node's ranks): every rank,
  // running here or attaching to a next incarnation, learns why at once, and every agent the
  // exit code to end with, even once every rank had left.
  return Verdict::Abort(AbortCause::kRankExit, DescribeLeftRankExit(exit), exit,
                        /*finished_too=*/true);
}

Verdict MembershipPolicy::RankGone(const RankExit& exit) const {
  if (lifecycle_.state() == Lifecycle::State::kAttaching) {
    // It cannot attach here any more, and this incarnation cannot form without it.
    return Verdict::Abort(AbortCause::kRankExit, DescribeLeftRankExit(exit),
                          Failed(exit) ? std::optional<RankExit>(exit) : std::nullopt);
  }
  // It had attached again (its agent reported the exit to the incarnation it left): as any
  // rank's exit here.
  return Exit(exit);
}

Verdict MembershipPolicy::AttachTimedOut(absl::Duration timeout) const {
  // The first attach to time out ends the attach phase for every rank, with one message.
  std::vector<int> missing, attached;
  roster_.Split(&missing, &attached);
  const std::string missed =
      absl::StrCat(FormatRanks(missing), " did not attach within ", absl::FormatDuration(timeout));
  // An elastic job goes on without them, if enough attached: the generation ends and the
  // attached ranks' attach is answered with the renumbering (docs/elastic.md).
  if (generations_.elastic() && !lifecycle_.detached()) {
    MembershipChange change = generations_.Survivors(missing, roster_.departed());
    if (change.size >= generations_.min_size()) {
      return Verdict::EndGeneration(std::move(change), AbortCause::kAttachTimeout, missed,
                                    std::nullopt);
    }
  }
  std::string message =
      absl::StrCat("job '", job_, "': ", missed, " (attached: ", FormatRanks(attached), ")");
  if (generations_.forms_again() && generations_.epoch() > 1) {
    absl::StrAppend(&message, "; after a shutdown the job forms again only once every rank ",
                    "attached again (init)");
  }
  return Verdict::FailAttaches(std::move(message));
}

MembershipPolicy::AttachRoute MembershipPolicy::RouteAttach(const std::vector<int>& ranks,
                                                            bool again) const {
  using Kind = AttachRoute::Kind;
  absl::Status invalid;
  if (ranks.empty()) invalid = absl::InvalidArgumentError("an attach needs at least one rank");
  if (lifecycle_.detached()) invalid = absl::UnavailableError("the coordinator is restarting");
  for (int rank : ranks) {
    if (rank < 0 || rank >= size_) {
      invalid = absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is out of range for job '", job_, "' of size ", size_));
    }
  }
  if (!invalid.ok()) return {Kind::kRefuse, invalid};
  const Lifecycle::State state = lifecycle_.state();
  const bool attaches_again = generations_.forms_again() && !lifecycle_.detached() &&
                              state != Lifecycle::State::kAttaching && !sessions_.resyncing() &&
                              (again || std::all_of(ranks.begin(), ranks.end(), [this](int rank) {
                                 return roster_.departed(rank);
                               }));
  if (attaches_again) {
    if (state != Lifecycle::State::kAborted) return {Kind::kNextIncarnation, {}};
    return {Kind::kRefuse, absl::FailedPreconditionError(absl::StrCat(
                               "job '", job_, "' was aborted (", lifecycle_.abort_reason(),
                               "); it does not form again"))};
  }
  if (state == Lifecycle::State::kAttaching) return {Kind::kWait, {}};
  // Already complete: a repeated attach learns its memberships again.
  if (lifecycle_.running()) return {Kind::kAnswer, {}};
  return {Kind::kRefuse, lifecycle_.CheckAttachable("it takes no new ranks")};
}

absl::Status MembershipPolicy::AcceptsSession(int64_t epoch) const {
  if (absl::Status s = lifecycle_.CheckRunning("no session can open"); !s.ok()) return s;
  if (epoch != generations_.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", job_, "' is at epoch ", generations_.epoch(), ", the session asked for ", epoch));
  }
  return absl::OkStatus();
}

absl::Status MembershipPolicy::CheckNode(int nproc) const {
  if (lifecycle_.detached()) return absl::UnavailableError("the coordinator is restarting");
  if (nproc < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a node needs at least one process; it asked for ", nproc));
  }
  return absl::OkStatus();
}

bool MembershipPolicy::TakesBlocks() const {
  // An elastic job takes nodes into its first generation's blocks until it runs; later ones
  // join at a commit.
  return generations_.min_size() == 0 ||
         (generations_.epoch() == 1 && lifecycle_.state() == Lifecycle::State::kAttaching);
}

absl::Status MembershipPolicy::CheckJoin(int nproc, int joining) const {
  if (absl::Status s = lifecycle_.CheckNotOver("it admits no nodes"); !s.ok()) return s;
  const int ranks = size_ - static_cast<int>(roster_.departed().size());
  const int max_size = generations_.max_size();
  if (ranks + joining + nproc > max_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job '", job_, "' has ", ranks, " ranks",
                     joining ? absl::StrCat(" and ", joining, " joining") : "", "; ", nproc,
                     " more would exceed its maximum of ", max_size));
  }
  return absl::OkStatus();
}

}  // namespace troika::coordinator
