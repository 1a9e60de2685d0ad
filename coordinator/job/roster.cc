#include "coordinator/job/roster.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace troika::coordinator {
namespace {

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

Roster::Roster(std::string job, int size, int64_t epoch, Scheduler& scheduler)
    : job_(std::move(job)), size_(size), epoch_(epoch), scheduler_(scheduler) {}

Roster::~Roster() {
  for (auto& [id, waiter] : waiters_) scheduler_.Cancel(waiter.timer);
}

uint64_t Roster::Wait(const std::vector<int>& ranks, const std::string& host,
                      absl::Duration timeout, AttachCallback done,
                      std::function<void(uint64_t)> expire) {
  // A rank attaching again voids the attach that was waiting for it.
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const std::vector<int>& old = it->second.ranks;
    const bool overlaps = std::any_of(old.begin(), old.end(), [&](int r) {
      return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
    });
    if (!overlaps) {
      ++it;
      continue;
    }
    scheduler_.Cancel(it->second.timer);
    it->second.done(
        absl::AbortedError(absl::StrCat(FormatRanks(old), " attached again; this attach is void")));
    it = waiters_.erase(it);
  }
  for (int rank : ranks) hosts_[rank] = host;
  const uint64_t id = next_waiter_++;
  Waiter& waiter = waiters_[id];
  waiter.ranks = ranks;
  waiter.done = std::move(done);
  waiter.timer = scheduler_.RunAfter(timeout, [expire = std::move(expire), id] { expire(id); });
  return id;
}

void Roster::Complete() {
  memberships_ = ComputeMemberships(hosts_, epoch_);
  for (auto& [id, waiter] : waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(Of(waiter.ranks));
  }
  waiters_.clear();
}

std::vector<Membership> Roster::Of(const std::vector<int>& ranks) const {
  std::vector<Membership> out;
  for (int rank : ranks) out.push_back(memberships_[rank]);
  return out;
}

void Roster::FailWaiters(const absl::Status& status) {
  for (auto& [id, waiter] : waiters_) {
    scheduler_.Cancel(waiter.timer);
    waiter.done(status);
  }
  waiters_.clear();
}

void Roster::Split(std::vector<int>* missing, std::vector<int>* attached) const {
  for (int r = 0; r < size_; ++r) (hosts_.count(r) ? attached : missing)->push_back(r);
}

std::vector<RankInfo> Roster::Describe() const {
  std::vector<RankInfo> ranks(size_);
  for (int r = 0; r < size_; ++r) {
    RankInfo& rank = ranks[r];
    rank.rank = r;
    if (const std::string* on = host(r)) {
      rank.host = *on;
      rank.attached = true;
    }
    if (const Membership* m = membership(r)) {
      rank.local_rank = m->local_rank;
      rank.cross_rank = m->cross_rank;
    }
    rank.departed = departed(r);
  }
  return ranks;
}

const std::string* Roster::host(int rank) const {
  auto it = hosts_.find(rank);
  return it == hosts_.end() ? nullptr : &it->second;
}

const Membership* Roster::membership(int rank) const {
  return rank < static_cast<int>(memberships_.size()) ? &memberships_[rank] : nullptr;
}

absl::StatusOr<NodeBlock> Roster::Reserve(const std::string& host, int nproc, int node_rank,
                                          bool* added) {
  *added = false;
  if (size_ % nproc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job_, "' has ", size_,
                                                   " ranks, which is not a multiple of ", nproc,
                                                   " processes per node"));
  }
  const int nodes = size_ / nproc;
  if (node_rank < 0) {
    for (const auto& [n, h] : nodes_) {
      if (h == host) return NodeBlock{n * nproc, n, size_, epoch_, {}};  // a restarted agent
    }
    node_rank = 0;
    while (nodes_.count(node_rank)) ++node_rank;
  }
  if (node_rank >= nodes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", job_, "' has room for ", nodes, " nodes of ", nproc, " ranks; no block left",
        node_rank < nodes ? "" : absl::StrCat(" for node rank ", node_rank)));
  }
  auto [it, inserted] = nodes_.try_emplace(node_rank, host);
  if (!inserted && it->second != host) {
    return absl::AlreadyExistsError(absl::StrCat("node rank ", node_rank, " of job '", job_,
                                                 "' is taken by host '", it->second, "'"));
  }
  *added = inserted;
  return NodeBlock{node_rank * nproc, node_rank, size_, epoch_, {}};
}

void Roster::AddNodes(const std::map<int, std::string>& nodes) {
  nodes_.insert(nodes.begin(), nodes.end());
}

}  // namespace troika::coordinator
