#include "coordinator/negotiator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/request_check.h"
#include "coordinator/agreement.h"

namespace troika::coordinator {
namespace {

bool Fusible(const Response& a, const Response& b) {
  return a.type == CollectiveType::kAllreduce && b.type == CollectiveType::kAllreduce &&
         !a.is_error() && !b.is_error() && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.device == b.device;
}

bool IsAllreduce(const Response& r) {
  return r.type == CollectiveType::kAllreduce && !r.is_error();
}

}  // namespace

Negotiator::Negotiator(int size, NegotiatorOptions options)
    : size_(size), options_(options), cache_(options.cache_capacity) {}

bool Negotiator::ResolveCached(TensorRequest* request) {
  const TensorRequest* cached = cache_.Resolve(request->cache_id, request->rank);
  if (cached == nullptr) return false;
  *request = *cached;
  return true;
}

absl::Status Negotiator::Submit(TensorRequest request, absl::Time now) {
  if (request.cache_id != 0) {
    return absl::InvalidArgumentError("a request sent as a cache id must be resolved first");
  }
  if (absl::Status s = CheckRequest(request, size_); !s.ok()) return s;
  const int rank = request.rank;
  auto [it, inserted] = pending_.try_emplace(request.name);
  Partial& partial = it->second;
  if (inserted) {
    partial.by_rank.resize(size_);
    partial.present.assign(size_, false);
    partial.arrival.resize(size_);
    partial.first_arrival = now;
  } else if (partial.present[rank]) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " submitted '", request.name,
                                                 "' again while it is still in flight"));
  }
  partial.by_rank[rank] = std::move(request);
  partial.present[rank] = true;
  partial.arrival[rank] = now;
  ++partial.count;
  if (!departed_.empty()) {
    FailWithDepartedRanks(it->first, now);
    pending_.erase(it);
  } else if (partial.count == size_) {
    Partial done = std::move(partial);
    pending_.erase(it);
    MakeReady(std::move(done), now);
  }
  return absl::OkStatus();
}

void Negotiator::MakeReady(Partial partial, absl::Time now) {
  Ready ready;
  ready.response = Agree(partial.by_rank);
  ready.bytes = partial.by_rank.front().ByteSize();
  ready.ready_at = now;
  if (ready.response.is_error()) {
    cache_.Erase(ready.response.names.front());
  } else if (ResponseCache::Assignment a = cache_.Put(partial.by_rank); a.id != 0) {
    ready.response.cache_ids = {a.id};
    ready.response.ids_known = a.hit;
  }
  ready_.push_back(std::move(ready));
  arrivals_.push_back(std::move(partial.arrival));
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
}

bool Negotiator::ShouldHold(absl::Time now, absl::Time* due) const {
  if (options_.cycle_time <= absl::ZeroDuration() || options_.fusion_threshold_bytes <= 0) {
    return false;
  }
  // Only an allreduce can gain from waiting, and only for allreduces still being submitted.
  const Ready* oldest = nullptr;
  int64_t ready_bytes = 0;
  for (const Ready& r : ready_) {
    if (!IsAllreduce(r.response)) continue;
    if (oldest == nullptr) oldest = &r;
    ready_bytes += r.bytes;
  }
  if (oldest == nullptr || ready_bytes >= options_.fusion_threshold_bytes) return false;
  bool more_coming = false;
  for (const auto& [name, partial] : pending_) {
    for (int r = 0; r < size_ && !more_coming; ++r) {
      more_coming = partial.present[r] && partial.by_rank[r].type == CollectiveType::kAllreduce;
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
      // Ids travel only if every fused tensor has one (see Response::cache_ids).
      if (!response.cache_ids.empty() && !other.cache_ids.empty()) {
        response.cache_ids.push_back(other.cache_ids.front());
        response.ids_known = response.ids_known && other.ids_known;
      } else {
        response.cache_ids.clear();
        response.ids_known = false;
      }
    }
    out.push_back(std::move(response));
  }
  ready_.clear();
  return out;
}

std::vector<PendingTensor> Negotiator::Pending() const {
  std::vector<PendingTensor> out;
  for (const auto& [name, partial] : pending_) {
    PendingTensor p{name, partial.first_arrival, {}};
    for (int r = 0; r < size_; ++r) {
      if (!partial.present[r]) p.missing_ranks.push_back(r);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace troika::coordinator
