#include "coordinator/negotiation/negotiator.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/request_check.h"
#include "coordinator/negotiation/agreement.h"

namespace troika::coordinator {

bool Fusible(const Response& a, const Response& b) {
  return a.type == CollectiveType::kAllreduce && b.type == CollectiveType::kAllreduce &&
         !a.is_error() && !b.is_error() && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.device == b.device &&
         a.compression == b.compression && a.joined_ranks == b.joined_ranks;
}

namespace {

bool IsAllreduce(const Response& r) {
  return r.type == CollectiveType::kAllreduce && !r.is_error();
}

int64_t Elements(const TensorRequest& r) {
  int64_t n = 1;
  for (int64_t d : r.shape) n *= d;
  return n;
}

// Why `r` cannot run while `joined` (ranks that joined without submitting it) sit out, or "".
std::string JoinedError(const TensorRequest& r, const std::vector<int>& joined) {
  const std::string ranks =
      absl::StrCat(FormatRanks(joined), joined.size() == 1 ? " has" : " have");
  switch (r.type) {
    case CollectiveType::kAllreduce:
    case CollectiveType::kBarrier:
      return "";
    case CollectiveType::kBroadcast:  // Horovod's rule, though a joined rank could receive
      return absl::StrCat("broadcast '", r.name, "' cannot run while ", ranks,
                          " joined (Context::Join); as in Horovod, only allreduces and barriers "
                          "run while a rank has joined");
    default:
      return absl::StrCat(CollectiveName(r.type), " '", r.name, "' cannot run while ", ranks,
                          " joined (Context::Join); it needs a tensor from every rank");
  }
}

}  // namespace

Negotiator::Negotiator(int size, NegotiatorOptions options)
    : size_(size),
      options_(options),
      last_arrival_(pending_.end()),
      cache_(options.cache_capacity) {}

absl::StatusOr<bool> Negotiator::SubmitCached(const std::vector<int>& ranks, int32_t id,
                                              absl::Time now) {
  std::shared_ptr<const CachedTensor> tensor = cache_.Find(id);
  if (tensor == nullptr) return false;
  for (int rank : ranks) {
    if (rank < 0 || rank >= static_cast<int>(tensor->by_rank.size())) {
      return absl::InvalidArgumentError(absl::StrCat("bad rank ", rank));
    }
  }
  if (ranks.empty()) return true;
  // A join is never cached, and a departed rank fails each arrival on its own: one by one.
  const bool one_by_one = !departed_.empty();
  for (size_t i = 0; i < ranks.size(); ++i) {
    const TensorRequest& request = tensor->by_rank[ranks[i]];
    absl::StatusOr<std::map<std::string, Partial>::iterator> it = Arrive(request, now);
    if (!it.ok()) return it.status();
    Partial& partial = (*it)->second;
    const bool lazy = partial.count == 1 || (partial.cached && partial.cached_id == id);
    if (partial.count == 1) {  // the first arrival: the id stands for the ranks from now on
      partial.cached = tensor;
      partial.cached_id = id;
    }
    if (!lazy) {
      Materialize(partial);
      partial.by_rank[ranks[i]] = request;
    }
    // The rest of the ranks arrive at the same tensor, the lookup done.
    for (size_t j = i + 1; !one_by_one && j < ranks.size(); ++j, ++i) {
      const int rank = ranks[j];
      if (partial.present[rank]) {
        return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " submitted '", request.name,
                                                     "' again while it is still in flight"));
      }
      partial.present[rank] = true;
      partial.arrival[rank] = now;
      ++partial.count;
      if (!lazy) partial.by_rank[rank] = tensor->by_rank[rank];
    }
    Settle(*it, ranks[i], /*join=*/false, now);
  }
  return true;
}

absl::Status Negotiator::Submit(TensorRequest request, absl::Time now) {
  if (request.cache_id != 0) {
    return absl::InvalidArgumentError("a request sent as a cache id goes to SubmitCached");
  }
  if (absl::Status s = CheckRequest(request, size_); !s.ok()) return s;
  absl::StatusOr<std::map<std::string, Partial>::iterator> it = Arrive(request, now);
  if (!it.ok()) return it.status();
  Partial& partial = (*it)->second;
  Materialize(partial);
  const int rank = request.rank;
  const bool join = request.type == CollectiveType::kJoin;
  partial.by_rank[rank] = std::move(request);
  Settle(*it, rank, join, now);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Negotiator::Partial>::iterator> Negotiator::Arrive(
    const TensorRequest& request, absl::Time now) {
  if (pending_.size() >= static_cast<size_t>(options_.max_pending_tensors) &&
      !pending_.contains(request.name)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", request.rank, " submitted '", request.name, "' while ", pending_.size(),
        " tensors are pending, the most this coordinator keeps per job (--max_pending_tensors)"));
  }
  const int rank = request.rank;
  // An agent's compacted request arrives as consecutive requests of one tensor: one lookup.
  auto it = last_arrival_;
  bool inserted = false;
  if (it == pending_.end() || it->first != request.name) {
    std::tie(it, inserted) = pending_.try_emplace(request.name);
  }
  Partial& partial = it->second;
  if (inserted) {
    partial.present.assign(size_, false);
    partial.arrival.resize(size_);
    partial.first_arrival = now;
    partial.group = request.group;
    partial.group_size = request.group_size;
    if (!request.group.empty() && departed_.empty()) {
      groups_.Register(request.group, request.group_size, request.name);
    }
  } else if (partial.present[rank]) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " submitted '", request.name,
                                                 "' again while it is still in flight"));
  }
  partial.present[rank] = true;
  partial.arrival[rank] = now;
  ++partial.count;
  last_arrival_ = it;
  return it;
}

void Negotiator::ErasePending(std::map<std::string, Partial>::iterator it) {
  if (it == last_arrival_) last_arrival_ = pending_.end();
  pending_.erase(it);
}

void Negotiator::Materialize(Partial& partial) const {
  if (partial.by_rank.empty()) partial.by_rank.resize(size_);
  if (!partial.cached) return;
  for (int r = 0; r < size_; ++r) {
    if (partial.present[r]) partial.by_rank[r] = partial.cached->by_rank[r];
  }
  partial.cached.reset();
  partial.cached_id = 0;
}

void Negotiator::Settle(std::map<std::string, Partial>::iterator it, int rank, bool join,
                        absl::Time now) {
  if (!departed_.empty()) {
    FailWithDepartedRanks(it->first, now);
    ErasePending(it);
  } else if (join) {
    OnJoin(it, rank, now);
  } else if (Complete(it->second)) {
    Partial done = std::move(it->second);
    ErasePending(it);
    MakeReady(std::move(done), now);
  }
}

bool Negotiator::Joined(int rank) const {
  auto join = pending_.find(kJoinTensorName);
  return join != pending_.end() && join->second.present[rank];
}

bool Negotiator::Complete(const Partial& partial) const {
  // Called after every rank's submission: O(1) unless ranks have joined.
  if (partial.count == size_) return true;
  auto join = pending_.find(kJoinTensorName);
  if (join == pending_.end()) return false;
  for (int r = 0; r < size_; ++r) {
    if (!partial.present[r] && !join->second.present[r]) return false;
  }
  return true;
}

void Negotiator::OnJoin(std::map<std::string, Partial>::iterator join, int rank, absl::Time now) {
  // Tensors that waited only for this rank are ready now, in the order they were first
  // submitted (ties by name, so the order is deterministic). When this is the last join, that
  // is every tensor still pending — ranks submit before they join, so each was submitted by
  // every rank or stood in for by a join — and they all run before the join completes.
  std::vector<std::map<std::string, Partial>::iterator> now_ready;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it != join && Complete(it->second)) now_ready.push_back(it);
  }
  std::stable_sort(now_ready.begin(), now_ready.end(), [](const auto& a, const auto& b) {
    return a->second.first_arrival < b->second.first_arrival;
  });
  for (auto it : now_ready) {
    Partial done = std::move(it->second);
    ErasePending(it);
    MakeReady(std::move(done), now);
  }
  if (join->second.count == size_) {
    ErasePending(join);  // join state resets: a later epoch can join again
    Ready ready;
    ready.response.type = CollectiveType::kJoin;
    ready.response.dtype = DataType::kUint8;
    ready.response.names = {kJoinTensorName};
    ready.response.root = rank;  // the last rank to join
    ready.ready_at = now;
    ready_.push_back(std::move(ready));
  }
}

void Negotiator::MakeReady(Partial partial, absl::Time now) {
  if (partial.cached && partial.count == size_ &&
      cache_.Hit(partial.cached_id, partial.cached.get())) {
    // Every rank sent the same id again: the cached response, with nothing compared or copied
    // per rank.
    Ready ready;
    ready.response = partial.cached->response;
    ready.response.cache_ids = {partial.cached_id};
    ready.response.ids_known = true;
    const TensorRequest& first = partial.cached->by_rank.front();
    ready.bytes = first.ByteSize();
    ready.ready_at = now;
    ready_records_.push_back(
        {first.name, first.type, now, std::move(partial.arrival), true, ready.bytes});
    Enqueue(partial, std::move(ready));
    return;
  }
  Materialize(partial);
  // Ranks that joined without submitting take no part in agreement.
  std::vector<int> joined;
  for (int r = 0; r < size_; ++r) {
    if (!partial.present[r]) joined.push_back(r);
  }
  std::vector<TensorRequest> submitted;
  if (!joined.empty()) {
    for (int r = 0; r < size_; ++r) {
      if (partial.present[r]) submitted.push_back(partial.by_rank[r]);
    }
  }
  const std::vector<TensorRequest>& agreeing = joined.empty() ? partial.by_rank : submitted;
  const TensorRequest& first = agreeing.front();
  Ready ready;
  ready.response = Agree(agreeing);
  ready.bytes = first.ByteSize();
  ready.ready_at = now;
  if (!joined.empty() && !ready.response.is_error()) {
    ready.response.error = JoinedError(first, joined);
    ready.response.joined_ranks = joined;
    ready.response.elements = {Elements(first)};
  }
  if (ready.response.is_error()) {
    cache_.Erase(ready.response.names.front());
  } else if (!joined.empty()) {
    // Not cached: a joined rank has no request of its own to record under an id.
  } else if (ResponseCache::Assignment a = cache_.Put(partial.by_rank, ready.response); a.id != 0) {
    ready.response.cache_ids = {a.id};
    ready.response.ids_known = a.hit;
  }
  if (joined.empty()) {  // straggler statistics need every rank's arrival
    ready_records_.push_back({first.name, first.type, now, std::move(partial.arrival),
                              ready.response.ids_known, ready.bytes});
  }
  Enqueue(partial, std::move(ready));
}

void Negotiator::Enqueue(const Partial& partial, Ready ready) {
  if (partial.group.empty()) {
    ready_.push_back(std::move(ready));
    return;
  }
  for (Ready& r : groups_.Add(partial.group, partial.group_size, std::move(ready))) {
    r.from_group = true;
    ready_.push_back(std::move(r));
  }
}

void Negotiator::FailWithDepartedRanks(const std::string& name, absl::Time now) {
  // A departed rank executes nothing more, so no tensor can become ready without it — not
  // even one it submitted before leaving.
  std::string reasons;
  for (const auto& [rank, why] : departed_) {
    absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", "rank ", rank, " ", why);
  }
  Ready ready;
  ready.response.names = {name};
  ready.response.error = absl::StrCat("Tensor '", name, "' can never complete: ", reasons);
  ready.ready_at = now;
  ready_.push_back(std::move(ready));
}

void Negotiator::RemoveRank(int rank, const std::string& why) {
  if (rank < 0 || rank >= size_ || departed_.count(rank)) return;
  departed_[rank] = why;
  for (const auto& [name, partial] : pending_) FailWithDepartedRanks(name, partial.first_arrival);
  pending_.clear();
  last_arrival_ = pending_.end();
  for (const Ready& held : groups_.TakeAll()) {
    FailWithDepartedRanks(held.response.names.front(), held.ready_at);
  }
}

bool Negotiator::ShouldHold(absl::Time now, absl::Time* due) const {
  if (options_.cycle_time <= absl::ZeroDuration() || options_.fusion_threshold_bytes <= 0) {
    return false;
  }
  // Only an allreduce can gain from waiting, and only for allreduces still being submitted.
  // A complete group waited long enough.
  const Ready* oldest = nullptr;
  int64_t ready_bytes = 0;
  for (const Ready& r : ready_) {
    if (r.from_group) return false;
    if (!IsAllreduce(r.response)) continue;
    if (oldest == nullptr) oldest = &r;
    ready_bytes += r.bytes;
  }
  if (oldest == nullptr || ready_bytes >= options_.fusion_threshold_bytes) return false;
  bool more_coming = false;
  for (const auto& [name, partial] : pending_) {
    for (int r = 0; r < size_ && !more_coming; ++r) {
      more_coming = partial.present[r] && RequestOf(partial, r).type == CollectiveType::kAllreduce;
    }
    if (more_coming) break;
  }
  if (!more_coming) return false;
  *due = oldest->ready_at + options_.cycle_time;
  return now < *due;
}

std::vector<Response> Negotiator::Poll(absl::Time now, absl::Time* next_poll) {
  *next_poll = absl::InfiniteFuture();
  if (ready_.empty()) return {};
  absl::Time due;
  if (ShouldHold(now, &due)) {
    *next_poll = due;
    return {};
  }
  return Fuse();
}

std::vector<Response> Negotiator::Fuse() {
  std::vector<Response> out;
  std::vector<bool> taken(ready_.size(), false);
  for (size_t i = 0; i < ready_.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    Response response = std::move(ready_[i].response);
    int64_t bytes = ready_[i].bytes;
    const bool fuse = IsAllreduce(response) && options_.fusion_threshold_bytes > 0;
    for (size_t j = i + 1; fuse && j < ready_.size(); ++j) {
      if (taken[j] || !Fusible(response, ready_[j].response)) continue;
      if (bytes + ready_[j].bytes > options_.fusion_threshold_bytes) continue;
      taken[j] = true;
      bytes += ready_[j].bytes;
      Response& other = ready_[j].response;
      response.names.push_back(std::move(other.names.front()));
      response.elements.insert(response.elements.end(), other.elements.begin(),
                               other.elements.end());
      // Ids travel only if every fused tensor has one (see Response::cache_ids).
      if (!response.cache_ids.empty() && !other.cache_ids.empty()) {
        response.cache_ids.push_back(other.cache_ids.front());
        response.ids_known = response.ids_known && other.ids_known;
      } else {
        response.cache_ids.clear();
        response.ids_known = false;
      }
    }
    if (IsAllreduce(response)) allreduce_response_bytes_.push_back(bytes);
    out.push_back(std::move(response));
  }
  ready_.clear();
  return out;
}

std::vector<PendingTensor> Negotiator::Pending() const {
  std::vector<PendingTensor> out;
  std::map<std::string, std::set<int>> group_missing;
  for (const auto& [name, partial] : pending_) {
    if (name == kJoinTensorName) continue;
    PendingTensor p{name, partial.first_arrival, {}};
    for (int r = 0; r < size_; ++r) {
      if (!partial.present[r] && !Joined(r)) p.missing_ranks.push_back(r);
    }
    if (!partial.group.empty()) {
      group_missing[partial.group].insert(p.missing_ranks.begin(), p.missing_ranks.end());
    }
    out.push_back(std::move(p));
  }
  for (const HeldTensor& held : groups_.Held()) {
    const std::set<int>& missing = group_missing[held.group];
    out.push_back({held.name, held.since, std::vector<int>(missing.begin(), missing.end())});
  }
  return out;
}

}  // namespace troika::coordinator
