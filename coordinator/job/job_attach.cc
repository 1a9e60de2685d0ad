// Job: attaching ranks and registering nodes (the membership), until the job runs.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

void Job::Attach(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
                 AttachCallback done, bool again) {
  std::unique_lock<std::mutex> lock(mu_);
  absl::Status invalid;
  if (ranks.empty()) invalid = absl::InvalidArgumentError("an attach needs at least one rank");
  if (lifecycle_.detached()) invalid = absl::UnavailableError("the coordinator is restarting");
  for (int rank : ranks) {
    if (rank < 0 || rank >= size_) {
      invalid = absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is out of range for job '", name_, "' of size ", size_));
    }
  }
  if (invalid.ok() && AttachesAgainLocked(ranks, again)) {
    if (lifecycle_.state() != State::kAborted) {
      std::shared_ptr<Job> next = NextIncarnationLocked();
      lock.unlock();
      return next->Attach(ranks, host, timeout, std::move(done), again);
    }
    invalid = absl::FailedPreconditionError(absl::StrCat(
        "job '", name_, "' was aborted (", lifecycle_.abort_reason(), "); it does not form again"));
  }
  if (invalid.ok() && lifecycle_.state() != State::kAttaching) {
    if (lifecycle_.running()) {
      // Already complete: a repeated attach learns its memberships again.
      std::vector<Membership> out = roster_.Of(ranks);
      lock.unlock();
      done(std::move(out));
      return;
    }
    invalid = lifecycle_.CheckNotOver("it takes no new ranks");
  }
  if (!invalid.ok()) {
    lock.unlock();
    done(invalid);
    return;
  }
  lifecycle_.Reopen();  // a job that looked abandoned has ranks again
  std::weak_ptr<Job> weak = weak_from_this();
  // Callbacks run under the lock: they only finish RPCs and never call back into the job.
  roster_.Wait(ranks, host, timeout, std::move(done), [weak, timeout](uint64_t id) {
    if (auto job = weak.lock()) job->ExpireAttach(id, timeout);
  });
  if (!roster_.complete()) return;
  lifecycle_.Run();
  // A job formed anew takes over its record (--state_dir) once it runs: a restarted
  // coordinator resumes the incarnation in force.
  if (generations_.epoch() > 1 && min_size() == 0) recorder_.Save();
  TROIKA_LOG(INFO) << "job '" << name_ << "': all " << size_ << " ranks attached";
  roster_.Complete();
}

void Job::RegisterNode(const std::string& host, int nproc, int node_rank, RegisterCallback done,
                       std::function<bool()> cancelled, std::string join_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lifecycle_.detached()) return done(absl::UnavailableError("the coordinator is restarting"));
  if (nproc < 1) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("a node needs at least one process; it asked for ", nproc)));
  }
  // An elastic job takes nodes into its first generation's blocks until it runs; later ones
  // join at a commit.
  const bool elastic = min_size() > 0;
  if (!elastic || (generations_.epoch() == 1 && lifecycle_.state() == State::kAttaching)) {
    bool added = false;
    absl::StatusOr<NodeBlock> block = roster_.Reserve(host, nproc, node_rank, &added);
    if (added) recorder_.Save();
    if (!elastic || !absl::IsResourceExhausted(block.status())) return done(std::move(block));
  }
  if (absl::Status s = lifecycle_.CheckNotOver("it admits no nodes"); !s.ok()) return done(s);
  const int ranks = size_ - static_cast<int>(roster_.departed().size());
  const int joining = generations_.JoiningRanks();
  if (ranks + joining + nproc > generations_.max_size()) {
    return done(absl::ResourceExhaustedError(
        absl::StrCat("job '", name_, "' has ", ranks, " ranks",
                     joining ? absl::StrCat(" and ", joining, " joining") : "", "; ", nproc,
                     " more would exceed its maximum of ", generations_.max_size())));
  }
  TROIKA_LOG(INFO) << "job '" << name_ << "': " << nproc << (nproc == 1 ? " rank" : " ranks")
                   << " on " << host << " wait to join at the next commit";
  generations_.Join({host, nproc, std::move(done), std::move(cancelled), std::move(join_id)});
}

void Job::ExpireAttach(uint64_t id, absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!roster_.waiting(id) || lifecycle_.state() != State::kAttaching) return;
  // The first attach to time out ends the attach phase for every rank, with one message.
  std::vector<int> missing, attached;
  roster_.Split(&missing, &attached);
  const std::string missed =
      absl::StrCat(FormatRanks(missing), " did not attach within ", absl::FormatDuration(timeout));
  // An elastic job goes on without them, if enough attached: the generation ends and the
  // attached ranks' attach is answered with the renumbering (docs/elastic.md).
  if (generations_.elastic() && !lifecycle_.detached()) {
    MembershipChange change = generations_.Survivors(missing, roster_.departed());
    if (change.size >= min_size()) {
      roster_.ClearHosts();
      EndGenerationLocked(std::move(change), AbortCause::kAttachTimeout, missed, std::nullopt);
      return lifecycle_.MaybeDone();
    }
  }
  std::string message =
      absl::StrCat("job '", name_, "': ", missed, " (attached: ", FormatRanks(attached), ")");
  if (generations_.forms_again() && generations_.epoch() > 1) {
    absl::StrAppend(&message, "; after a shutdown the job forms again only once every rank ",
                    "attached again (init)");
  }
  TROIKA_LOG(WARNING) << message;
  roster_.FailWaiters(absl::DeadlineExceededError(message));
  roster_.ClearHosts();
  lifecycle_.MaybeDone();
}

}  // namespace troika::coordinator
