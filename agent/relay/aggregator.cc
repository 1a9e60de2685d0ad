#include "agent/relay/aggregator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/wire.h"

namespace troika::agent {
namespace {

bool HasRank(const std::vector<TensorRequest>& requests, int rank) {
  return std::any_of(requests.begin(), requests.end(),
                     [rank](const TensorRequest& r) { return r.rank == rank; });
}

}  // namespace

Aggregator::Aggregator(const std::vector<int>& ranks, absl::Duration window)
    : window_(window), node_ranks_(ranks.begin(), ranks.end()), live_(ranks.begin(), ranks.end()) {}

absl::Status Aggregator::Add(std::vector<TensorRequest> requests, absl::Time now,
                             v1::RequestBatch* out) {
  // Checked first, so a refused batch leaves nothing behind.
  for (size_t i = 0; i < requests.size(); ++i) {
    const TensorRequest& r = requests[i];
    auto it = tensors_.find({r.process_set, r.name});
    bool duplicate = it != tensors_.end() && HasRank(it->second.waiting, r.rank);
    for (size_t j = 0; j < i && !duplicate; ++j) {
      duplicate = requests[j].rank == r.rank && requests[j].name == r.name &&
                  requests[j].process_set == r.process_set;
    }
    if (duplicate) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", r.rank, " submitted '",
                                                   ProcessSetTensorName(r.process_set, r.name),
                                                   "' while it was in flight"));
    }
  }
  for (TensorRequest& request : requests) {
    if (request.type == CollectiveType::kJoin) {
      // A join goes upstream after what its rank submitted before it: ahead of a request,
      // it would make the rank a joined one for that tensor.
      bool flushed = false;
      for (auto& [key, tensor] : tensors_) {
        if (!HasRank(tensor.waiting, request.rank)) continue;
        FlushLate(tensor, out);
        flushed = true;
      }
      if (flushed) SettleAll(out);
    }
    const Key key{request.process_set, request.name};
    auto it = tensors_.find(key);
    // Not aggregated: a rank that left, or a rank whose earlier request of this name went
    // upstream already (the coordinator judges a repeat).
    if (!live_.count(request.rank) ||
        (it != tensors_.end() && it->second.forwarded.count(request.rank))) {
      Emit({std::move(request)}, out);
      continue;
    }
    if (it == tensors_.end()) {
      it = tensors_.emplace(key, Tensor{}).first;
      it->second.seq = next_seq_++;
      windows_.emplace(it->second.seq, std::make_pair(now + window_, key));
    }
    Tensor& tensor = it->second;
    tensor.waiting.push_back(std::move(request));
    if (tensor.seq == 0) FlushLate(tensor, out);  // late already: goes at once
    Settle(key, out);
  }
  Expire(now, out);
  return absl::OkStatus();
}

void Aggregator::Expire(absl::Time now, v1::RequestBatch* out) {
  while (!windows_.empty() && windows_.begin()->second.first <= now) {
    const Key key = windows_.begin()->second.second;
    FlushLate(tensors_.at(key), out);
    Settle(key, out);
  }
}

void Aggregator::RemoveRank(int rank, v1::RequestBatch* out) {
  if (live_.erase(rank) == 0) return;
  for (auto& [key, tensor] : tensors_) {
    if (HasRank(tensor.waiting, rank)) FlushLate(tensor, out);
  }
  SettleAll(out);
}

void Aggregator::SetMembers(int id, const std::vector<int>& ranks, v1::RequestBatch* out) {
  std::set<int>& members = set_members_[id];
  members.clear();
  for (int rank : ranks) {
    if (node_ranks_.count(rank)) members.insert(rank);
  }
  SettleAll(out);
}

void Aggregator::RemoveSet(int id, v1::RequestBatch* out) {
  set_members_.erase(id);
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    if (it->first.first != id) {
      ++it;
      continue;
    }
    FlushLate(it->second, out);
    it = tensors_.erase(it);
  }
}

void Aggregator::SettleAll(v1::RequestBatch* out) {
  std::vector<Key> keys;
  for (const auto& [key, tensor] : tensors_) keys.push_back(key);
  for (const Key& key : keys) Settle(key, out);
}

absl::Time Aggregator::NextDeadline() const {
  return windows_.empty() ? absl::InfiniteFuture() : windows_.begin()->second.first;
}

int Aggregator::waiting() const {
  int n = 0;
  for (const auto& [key, tensor] : tensors_) n += static_cast<int>(tensor.waiting.size());
  return n;
}

void Aggregator::FlushLate(Tensor& tensor, v1::RequestBatch* out) {
  if (tensor.seq != 0) {
    windows_.erase(tensor.seq);
    tensor.seq = 0;
  }
  if (tensor.waiting.empty()) return;
  for (const TensorRequest& r : tensor.waiting) tensor.forwarded.insert(r.rank);
  Emit(std::move(tensor.waiting), out);
  tensor.waiting.clear();
}

bool Aggregator::Complete(const Key& key, const Tensor& tensor) const {
  auto members = set_members_.find(key.first);
  return std::all_of(live_.begin(), live_.end(), [&](int rank) {
    if (members != set_members_.end() && !members->second.count(rank)) return true;
    return tensor.forwarded.count(rank) || HasRank(tensor.waiting, rank);
  });
}

void Aggregator::Settle(const Key& key, v1::RequestBatch* out) {
  auto it = tensors_.find(key);
  if (it == tensors_.end() || !Complete(key, it->second)) return;
  FlushLate(it->second, out);
  tensors_.erase(it);
}

void Aggregator::Emit(std::vector<TensorRequest> requests, v1::RequestBatch* out) {
  if (requests.empty()) return;
  if (requests.size() > 1 && CompactToWire(requests, out->add_requests())) return;
  if (requests.size() > 1) out->mutable_requests()->RemoveLast();  // refused: one by one
  for (const TensorRequest& r : requests) ToWire(r, out->add_requests());
}

}  // namespace troika::agent
