// Job: attaching ranks and registering nodes (the membership), until the job runs.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

namespace {

// Local ranks: position among the ranks of the same host. Cross ranks: position among the
// ranks with the same local rank (one per host when hosts are uniform), as in Horovod.
std::vector<Membership> ComputeMemberships(const std::map<int, std::string>& hosts, int64_t epoch) {
  const int size = static_cast<int>(hosts.size());
  std::vector<Membership> out(size);
  std::map<std::string, int> per_host;
  for (const auto& [rank, host] : hosts) {
    out[rank].rank = rank;
    out[rank].size = size;
    out[rank].local_rank = per_host[host]++;
    out[rank].epoch = epoch;
  }
  std::map<int, int> per_local_rank;
  for (const auto& [rank, host] : hosts) {
    out[rank].local_size = per_host[host];
    out[rank].cross_rank = per_local_rank[out[rank].local_rank]++;
  }
  for (Membership& m : out) m.cross_size = per_local_rank[m.local_rank];
  return out;
}

}  // namespace

void Job::Attach(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
                 AttachCallback done, bool again) {
  std::unique_lock<std::mutex> lock(mu_);
  absl::Status invalid;
  if (ranks.empty()) invalid = absl::InvalidArgumentError("an attach needs at least one rank");
  if (detached_) invalid = absl::UnavailableError("the coordinator is restarting");
  for (int rank : ranks) {
    if (rank < 0 || rank >= size_) {
      invalid = absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is out of range for job '", name_, "' of size ", size_));
    }
  }
  if (invalid.ok() && AttachesAgainLocked(ranks, again)) {
    if (state_ != State::kAborted) {
      std::shared_ptr<Job> next = NextIncarnationLocked();
      lock.unlock();
      return next->Attach(ranks, host, timeout, std::move(done), again);
    }
    invalid = absl::FailedPreconditionError(absl::StrCat(
        "job '", name_, "' was aborted (", abort_reason_, "); it does not form again"));
  }
  if (invalid.ok() && state_ != State::kAttaching) {
    if (state_ == State::kRunning) {
      // Already complete: a repeated attach learns its memberships again.
      std::vector<Membership> out;
      for (int rank : ranks) out.push_back(memberships_[rank]);
      lock.unlock();
      done(std::move(out));
      return;
    }
    invalid = absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' is ", JobStateName(state_),
                     state_ == State::kAborted ? absl::StrCat(" (", abort_reason_, ")") : "",
                     "; it takes no new ranks"));
  }
  if (!invalid.ok()) {
    lock.unlock();
    done(invalid);
    return;
  }
  // A rank attaching again voids the attach that was waiting for it.
  for (auto it = attach_waiters_.begin(); it != attach_waiters_.end();) {
    const std::vector<int>& old = it->second.ranks;
    bool overlaps = std::any_of(old.begin(), old.end(), [&](int r) {
      return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
    });
    if (!overlaps) {
      ++it;
      continue;
    }
    scheduler_.Cancel(it->second.timer);
    // Runs under the lock: callbacks only finish RPCs and never call back into the job.
    it->second.done(
        absl::AbortedError(absl::StrCat(FormatRanks(old), " attached again; this attach is void")));
    it = attach_waiters_.erase(it);
  }
  for (int rank : ranks) hosts_[rank] = host;
  done_reported_ = false;  // a job that looked abandoned has ranks again
  const uint64_t id = next_waiter_++;
  std::weak_ptr<Job> weak = weak_from_this();
  AttachWaiter& waiter = attach_waiters_[id];
  waiter.ranks = ranks;
  waiter.done = std::move(done);
  waiter.timer = scheduler_.RunAfter(timeout, [weak, id, timeout] {
    if (auto job = weak.lock()) job->ExpireAttach(id, timeout);
  });
  if (static_cast<int>(hosts_.size()) == size_) CompleteAttachLocked();
}

void Job::RegisterNode(const std::string& host, int nproc, int node_rank, RegisterCallback done,
                       std::function<bool()> cancelled, std::string join_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (detached_) return done(absl::UnavailableError("the coordinator is restarting"));
  if (nproc < 1) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("a node needs at least one process; it asked for ", nproc)));
  }
  // An elastic job takes nodes into its first generation's blocks until it runs; later ones
  // join at a commit.
  const bool elastic = min_size_ > 0;
  if (!elastic || (epoch_ == 1 && state_ == State::kAttaching)) {
    absl::StatusOr<NodeBlock> block = ReserveBlockLocked(host, nproc, node_rank);
    if (!elastic || !absl::IsResourceExhausted(block.status())) return done(std::move(block));
  }
  if (state_ == State::kFinished || state_ == State::kAborted) {
    return done(absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' is ", JobStateName(state_), "; it admits no nodes")));
  }
  const int ranks = size_ - static_cast<int>(departed_.size());
  const int joining = JoiningRanksLocked();
  if (ranks + joining + nproc > max_size_) {
    return done(absl::ResourceExhaustedError(
        absl::StrCat("job '", name_, "' has ", ranks, " ranks",
                     joining ? absl::StrCat(" and ", joining, " joining") : "", "; ", nproc,
                     " more would exceed its maximum of ", max_size_)));
  }
  TROIKA_LOG(INFO) << "job '" << name_ << "': " << nproc << (nproc == 1 ? " rank" : " ranks")
                   << " on " << host << " wait to join at the next commit";
  joining_.push_back({host, nproc, std::move(done), std::move(cancelled), std::move(join_id)});
}

absl::StatusOr<Job::NodeBlock> Job::ReserveBlockLocked(const std::string& host, int nproc,
                                                       int node_rank) {
  if (size_ % nproc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("job '", name_, "' has ", size_,
                                                   " ranks, which is not a multiple of ", nproc,
                                                   " processes per node"));
  }
  const int nodes = size_ / nproc;
  if (node_rank < 0) {
    for (const auto& [n, h] : nodes_) {
      if (h == host) return NodeBlock{n * nproc, n, size_, epoch_};  // a restarted agent
    }
    node_rank = 0;
    while (nodes_.count(node_rank)) ++node_rank;
  }
  if (node_rank >= nodes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", name_, "' has room for ", nodes, " nodes of ", nproc, " ranks; no block left",
        node_rank < nodes ? "" : absl::StrCat(" for node rank ", node_rank)));
  }
  auto [it, inserted] = nodes_.try_emplace(node_rank, host);
  if (!inserted && it->second != host) {
    return absl::AlreadyExistsError(absl::StrCat("node rank ", node_rank, " of job '", name_,
                                                 "' is taken by host '", it->second, "'"));
  }
  if (inserted && on_record_) on_record_(RecordLocked());
  return NodeBlock{node_rank * nproc, node_rank, size_, epoch_};
}

void Job::CompleteAttachLocked() {
  memberships_ = ComputeMemberships(hosts_, epoch_);
  state_ = State::kRunning;
  // A job formed anew takes over its record (--state_dir) once it runs: a restarted
  // coordinator resumes the incarnation in force.
  if (on_record_ && epoch_ > 1 && min_size_ == 0) on_record_(RecordLocked());
  TROIKA_LOG(INFO) << "job '" << name_ << "': all " << size_ << " ranks attached";
  for (auto& [id, waiter] : attach_waiters_) {
    scheduler_.Cancel(waiter.timer);
    std::vector<Membership> out;
    for (int rank : waiter.ranks) out.push_back(memberships_[rank]);
    waiter.done(std::move(out));
  }
  attach_waiters_.clear();
}

void Job::ExpireAttach(uint64_t id, absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!attach_waiters_.count(id) || state_ != State::kAttaching) return;
  // The first attach to time out ends the attach phase for every rank, with one message.
  std::vector<int> missing, attached;
  for (int r = 0; r < size_; ++r) (hosts_.count(r) ? attached : missing).push_back(r);
  const std::string missed =
      absl::StrCat(FormatRanks(missing), " did not attach within ", absl::FormatDuration(timeout));
  // An elastic job goes on without them, if enough attached: the generation ends and the
  // attached ranks' attach is answered with the renumbering (docs/elastic.md).
  if (min_size_ > 0 && next_generation_ && !detached_) {
    MembershipChange change = SurvivorsLocked(missing);
    if (change.size >= min_size_) {
      hosts_.clear();
      EndGenerationLocked(std::move(change), AbortCause::kAttachTimeout, missed, std::nullopt);
      return MaybeDoneLocked();
    }
  }
  std::string message =
      absl::StrCat("job '", name_, "': ", missed, " (attached: ", FormatRanks(attached), ")");
  if (next_incarnation_ && epoch_ > 1) {
    absl::StrAppend(&message, "; after a shutdown the job forms again only once every rank ",
                    "attached again (init)");
  }
  TROIKA_LOG(WARNING) << message;
  FailAttachWaitersLocked(absl::DeadlineExceededError(message));
  hosts_.clear();
  MaybeDoneLocked();
}

void Job::FailAttachWaitersLocked(const absl::Status& status) {
  for (auto& [id, waiter] : attach_waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(status);
  }
  attach_waiters_.clear();
}

}  // namespace troika::coordinator
