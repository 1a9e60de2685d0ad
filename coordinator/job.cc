#include "coordinator/job.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

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

const char* JobStateName(Job::State state) {
  switch (state) {
    case Job::State::kAttaching:
      return "attaching";
    case Job::State::kRunning:
      return "running";
    case Job::State::kFinished:
      return "finished";
    case Job::State::kAborted:
      return "aborted";
  }
  return "unknown";
}

Job::Job(std::string name, int size, NegotiatorOptions options, Scheduler& scheduler, Clock& clock,
         std::function<void()> on_done)
    : name_(std::move(name)),
      size_(size),
      scheduler_(scheduler),
      clock_(clock),
      on_done_(std::move(on_done)),
      kv_(scheduler),
      session_of_rank_(size, nullptr),
      negotiator_(size, options) {}

Job::~Job() {
  std::lock_guard<std::mutex> lock(mu_);
  if (flush_timer_) scheduler_.Cancel(flush_timer_);
  for (auto& [rank, waiter] : attach_waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(absl::CancelledError(absl::StrCat("job '", name_, "' was removed")));
  }
}

void Job::Attach(int rank, const std::string& host, absl::Duration timeout, AttachCallback done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (rank < 0 || rank >= size_) {
    lock.unlock();
    done(absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for job '", name_, "' of size ", size_)));
    return;
  }
  if (state_ != State::kAttaching) {
    absl::StatusOr<Membership> result =
        memberships_.empty()
            ? absl::StatusOr<Membership>(absl::FailedPreconditionError(absl::StrCat(
                  "job '", name_, "' is ", JobStateName(state_), "; it takes no new ranks")))
            : absl::StatusOr<Membership>(memberships_[rank]);
    if (result.ok() && state_ != State::kRunning) {
      result = absl::FailedPreconditionError(
          absl::StrCat("job '", name_, "' is ", JobStateName(state_)));
    }
    lock.unlock();
    done(std::move(result));
    return;
  }
  if (auto it = attach_waiters_.find(rank); it != attach_waiters_.end()) {
    scheduler_.Cancel(it->second.timer);
    AttachCallback old = std::move(it->second.done);
    attach_waiters_.erase(it);
    // Runs under the lock: callbacks only finish RPCs and never call back into the job.
    old(absl::AbortedError(absl::StrCat("rank ", rank, " attached again; this attach is void")));
  }
  hosts_[rank] = host;
  done_reported_ = false;  // a job that looked abandoned has a rank again
  std::weak_ptr<Job> weak = weak_from_this();
  AttachWaiter& waiter = attach_waiters_[rank];
  waiter.done = std::move(done);
  waiter.timer = scheduler_.RunAfter(timeout, [weak, rank, timeout] {
    if (auto job = weak.lock()) job->ExpireAttach(rank, timeout);
  });
  if (static_cast<int>(hosts_.size()) == size_) CompleteAttachLocked();
}

void Job::CompleteAttachLocked() {
  memberships_ = ComputeMemberships(hosts_, epoch_);
  state_ = State::kRunning;
  TROIKA_LOG(INFO) << "job '" << name_ << "': all " << size_ << " ranks attached";
  for (auto& [rank, waiter] : attach_waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(memberships_[rank]);
  }
  attach_waiters_.clear();
}

void Job::ExpireAttach(int rank, absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!attach_waiters_.count(rank) || state_ != State::kAttaching) return;
  // The first attach to time out ends the attach phase for every rank, with one message.
  std::vector<int> missing, attached;
  for (int r = 0; r < size_; ++r) (hosts_.count(r) ? attached : missing).push_back(r);
  std::string message =
      absl::StrCat("job '", name_, "': ", FormatRanks(missing), " did not attach within ",
                   absl::FormatDuration(timeout), " (attached: ", FormatRanks(attached), ")");
  TROIKA_LOG(WARNING) << message;
  for (auto& [r, waiter] : attach_waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(absl::DeadlineExceededError(message));
  }
  attach_waiters_.clear();
  hosts_.clear();
  MaybeDoneLocked();
}

absl::Status Job::OpenSession(const std::vector<int>& ranks, int64_t epoch, SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' is ", JobStateName(state_), "; no session can open"));
  }
  if (epoch != epoch_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", name_, "' is at epoch ", epoch_, ", the session asked for ", epoch));
  }
  if (ranks.empty()) return absl::InvalidArgumentError("a session needs at least one rank");
  for (int r : ranks) {
    if (r < 0 || r >= size_) return absl::InvalidArgumentError(absl::StrCat("bad rank ", r));
    if (session_of_rank_[r] != nullptr || departed_.count(r)) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", r, " already has a session"));
    }
  }
  for (int r : ranks) session_of_rank_[r] = sink;
  sessions_[sink] = ranks;
  return absl::OkStatus();
}

absl::Status Job::Submit(SessionSink* sink, std::vector<TensorRequest> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kAborted) return absl::OkStatus();  // the session was told why
  absl::Time now = clock_.Now();
  for (TensorRequest& request : requests) {
    if (request.rank < 0 || request.rank >= size_ || session_of_rank_[request.rank] != sink) {
      return absl::PermissionDeniedError(
          absl::StrCat("a session submitted for rank ", request.rank, ", which it does not own"));
    }
    if (absl::Status s = negotiator_.Submit(std::move(request), now); !s.ok()) return s;
  }
  FlushLocked();
  return absl::OkStatus();
}

absl::Status Job::Goodbye(SessionSink* sink, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r : ranks) {
    if (r < 0 || r >= size_ || session_of_rank_[r] != sink) {
      return absl::PermissionDeniedError(absl::StrCat("goodbye for rank ", r, " not owned"));
    }
    departed_.insert(r);
    negotiator_.RemoveRank(r, "has shut down");
  }
  if (state_ == State::kRunning && static_cast<int>(departed_.size()) == size_) {
    state_ = State::kFinished;
    TROIKA_LOG(INFO) << "job '" << name_ << "' finished";
  }
  FlushLocked();
  return absl::OkStatus();
}

void Job::CloseSession(SessionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(sink);
  if (it == sessions_.end()) return;
  std::vector<int> lost;
  for (int r : it->second) {
    session_of_rank_[r] = nullptr;
    if (!departed_.count(r)) lost.push_back(r);
  }
  sessions_.erase(it);
  if (!lost.empty() && state_ == State::kRunning) {
    AbortLocked(absl::StrCat(FormatRanks(lost), " lost the connection to the coordinator"));
  }
  MaybeDoneLocked();
}

void Job::Abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(reason);
  MaybeDoneLocked();
}

void Job::AbortLocked(const std::string& reason) {
  if (state_ == State::kAborted || state_ == State::kFinished) return;
  state_ = State::kAborted;
  std::string message = absl::StrCat("job '", name_, "' aborted: ", reason);
  TROIKA_LOG(WARNING) << message;
  auto down = std::make_shared<DownMessage>();
  down->abort_reason = message;
  BroadcastLocked(std::move(down));
  for (auto& [rank, waiter] : attach_waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(absl::AbortedError(message));
  }
  attach_waiters_.clear();
  kv_.FailWaiters(absl::AbortedError(message));
}

void Job::FlushLocked() {
  absl::Time next;
  std::vector<Response> responses = negotiator_.Poll(clock_.Now(), &next);
  if (!responses.empty()) {
    auto down = std::make_shared<DownMessage>();
    down->responses = std::move(responses);
    BroadcastLocked(std::move(down));
  }
  if (next != absl::InfiniteFuture()) ArmTimerLocked(next);
}

void Job::ArmTimerLocked(absl::Time due) {
  if (flush_timer_ != 0 && flush_due_ <= due) return;
  if (flush_timer_ != 0) scheduler_.Cancel(flush_timer_);
  flush_due_ = due;
  std::weak_ptr<Job> weak = weak_from_this();
  // The scheduler runs on real time; the clock may be a fake one in tests, which then call
  // the flush by hand, so only the offset from now matters here.
  flush_timer_ = scheduler_.RunAfter(due - clock_.Now(), [weak] {
    auto job = weak.lock();
    if (!job) return;
    std::lock_guard<std::mutex> lock(job->mu_);
    job->flush_timer_ = 0;
    job->flush_due_ = absl::InfiniteFuture();
    job->FlushLocked();
  });
}

void Job::BroadcastLocked(std::shared_ptr<const DownMessage> message) {
  for (auto& [sink, ranks] : sessions_) sink->Send(message);
}

Job::State Job::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

bool Job::DoneLocked() const {
  bool over = state_ == State::kFinished || state_ == State::kAborted ||
              (state_ == State::kAttaching && hosts_.empty());
  return over && sessions_.empty() && attach_waiters_.empty();
}

bool Job::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return DoneLocked();
}

void Job::MaybeDoneLocked() {
  if (done_reported_ || !DoneLocked()) return;
  done_reported_ = true;
  // Not under our lock: the owner may drop the job, and with it this lock.
  scheduler_.RunAfter(absl::ZeroDuration(), on_done_);
}

}  // namespace troika::coordinator
