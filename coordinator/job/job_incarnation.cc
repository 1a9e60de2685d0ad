// Job: a job that is not elastic forms again after its ranks shut down (docs/protocol.md,
// "Shutting down and attaching again"): init → shutdown → init, as with Horovod's Gloo
// controller. Ranks that said goodbye and attach again attach to the job's next incarnation,
// a fresh Job (nothing negotiated, cached, pending or added before: no process set but the
// global one) of the same name, size, token and node blocks, one epoch on, made by the first
// of them. It runs once every rank attached again, as a Gloo rendezvous waits for every rank;
// one that never does fails the others at the attach timeout, naming it. A rank whose process
// ends after it left (its agent reports the exit) will never attach again: the forming
// incarnation is aborted at once, naming it; a failure (exit code or signal) aborts the
// incarnation it left too, even finished, so that every agent learns it.

#include <string.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {
namespace {

std::string DescribeLeftRankExit(const RankExit& exit) {
  std::string who = absl::StrCat("rank ", exit.rank, exit.host.empty() ? "" : " on ", exit.host);
  if (exit.signal != 0) {
    return absl::StrCat(who, " was killed by signal ", exit.signal, " (", strsignal(exit.signal),
                        ") after it shut down");
  }
  return absl::StrCat(who, " exited with code ", exit.exit_code, " after it shut down",
                      exit.exit_code == 0 ? ", without attaching again" : "");
}

bool Failed(const RankExit& exit) { return exit.exit_code != 0 || exit.signal != 0; }

}  // namespace

bool Job::AttachesAgainLocked(const std::vector<int>& ranks, bool again) const {
  if (!generations_.forms_again() || lifecycle_.detached() ||
      lifecycle_.state() == State::kAttaching || sessions_.resyncing()) {
    return false;
  }
  return again || std::all_of(ranks.begin(), ranks.end(),
                              [this](int rank) { return roster_.departed(rank); });
}

std::shared_ptr<Job> Job::NextIncarnationLocked() {
  bool made = false;
  std::shared_ptr<Job> next = generations_.NextIncarnationOf(shared_from_this(), &made);
  if (!made) return next;
  TROIKA_LOG(INFO) << "job '" << name_ << "': ranks attach again; it forms anew (epoch "
                   << generations_.epoch() + 1 << ")";
  // Lock order: an incarnation, then its successor (which never calls back).
  next->AdoptIncarnation(roster_.nodes(), telemetry_.TakeTimeline(), generations_.left_exits());
  return next;
}

void Job::AdoptIncarnation(std::map<int, std::string> nodes, std::unique_ptr<Timeline> timeline,
                           const std::map<int, RankExit>& left_exits) {
  std::lock_guard<std::mutex> lock(mu_);
  roster_.AddNodes(nodes);  // a restarted agent gets its block back (saved as it runs)
  if (timeline) {
    telemetry_.AdoptTimeline(std::move(timeline));
    SyncSettingsLocked();
  }
  for (const auto& [rank, exit] : left_exits) RankGoneLocked(exit);
}

void Job::LeftRankExitedLocked(const RankExit& exit) {
  generations_.LeftRankExited(exit);
  const std::shared_ptr<Job>& next = generations_.successor();
  // The next incarnation failed already (another rank that left will not attach again): that
  // is the cause, which its ranks were told; this rank's exit followed.
  if (next && next->state() == State::kAborted) return;
  if (Failed(exit)) {
    // A failure fails the job, as any rank's does (its agent stops the node's ranks): every
    // rank, running here or attaching to a next incarnation, learns why at once, and every
    // agent the exit code to end with, even once every rank had left.
    AbortLocked(AbortCause::kRankExit, DescribeLeftRankExit(exit), exit, /*finished_too=*/true);
  }
  if (!next) return;  // one made later learns it when it is made
  std::lock_guard<std::mutex> lock(next->mu_);
  next->RankGoneLocked(exit);
  next->lifecycle_.MaybeDone();
}

void Job::RankGoneLocked(const RankExit& exit) {
  if (lifecycle_.state() == State::kAttaching) {
    // It cannot attach here any more, and this incarnation cannot form without it.
    AbortLocked(AbortCause::kRankExit, DescribeLeftRankExit(exit),
                Failed(exit) ? std::optional<RankExit>(exit) : std::nullopt);
    return;
  }
  // It had attached again (its agent reported the exit to the incarnation it left): as any
  // rank's exit here.
  ReportExitLocked(exit);
}

}  // namespace troika::coordinator
