#include "agent/aggregator.h"

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
    : window_(window), live_(ranks.begin(), ranks.end()) {}

absl::Status Aggregator::Add(std::vector<TensorRequest> requests, absl::Time now,
                             v1::RequestBatch* out) {
  // Checked first, so a refused batch leaves nothing behind.
  for (size_t i = 0; i < requests.size(); ++i) {
    const TensorRequest& r = requests[i];
    auto it = tensors_.find(r.name);
    bool duplicate = it != tensors_.end() && HasRank(it->second.waiting, r.rank);
    for (size_t j = 0; j < i && !duplicate; ++j) {
      duplicate = requests[j].rank == r.rank && requests[j].name == r.name;
    }
    if (duplicate) {
      return absl::AlreadyExistsError(
          absl::StrCat("rank ", r.rank, " submitted '", r.name, "' while it was in flight"));
    }
  }
  for (TensorRequest& request : requests) {
    const std::string name = request.name;
    auto it = tensors_.find(name);
    // Not aggregated: a rank that left, or a rank whose earlier request of this name went
    // upstream already (the coordinator judges a repeat).
    if (!live_.count(request.rank) ||
        (it != tensors_.end() && it->second.forwarded.count(request.rank))) {
      Emit({std::move(request)}, out);
      continue;
    }
    if (it == tensors_.end()) {
      it = tensors_.emplace(name, Tensor{}).first;
      it->second.seq = next_seq_++;
      windows_.emplace(it->second.seq, std::make_pair(now + window_, name));
    }
    Tensor& tensor = it->second;
    tensor.waiting.push_back(std::move(request));
    if (tensor.seq == 0) FlushLate(tensor, out);  // late already: goes at once
    Settle(name, out);
  }
  Expire(now, out);
  return absl::OkStatus();
}

void Aggregator::Expire(absl::Time now, v1::RequestBatch* out) {
  while (!windows_.empty() && windows_.begin()->second.first <= now) {
    const std::string name = windows_.begin()->second.second;
    FlushLate(tensors_.at(name), out);
    Settle(name, out);
  }
}

void Aggregator::RemoveRank(int rank, v1::RequestBatch* out) {
  if (live_.erase(rank) == 0) return;
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  for (const std::string& name : names) {
    Tensor& tensor = tensors_.at(name);
    if (HasRank(tensor.waiting, rank)) FlushLate(tensor, out);
    Settle(name, out);
  }
}

absl::Time Aggregator::NextDeadline() const {
  return windows_.empty() ? absl::InfiniteFuture() : windows_.begin()->second.first;
}

int Aggregator::waiting() const {
  int n = 0;
  for (const auto& [name, tensor] : tensors_) n += static_cast<int>(tensor.waiting.size());
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

bool Aggregator::Complete(const Tensor& tensor) const {
  return std::all_of(live_.begin(), live_.end(), [&tensor](int rank) {
    return tensor.forwarded.count(rank) || HasRank(tensor.waiting, rank);
  });
}

void Aggregator::Settle(const std::string& name, v1::RequestBatch* out) {
  auto it = tensors_.find(name);
  if (it == tensors_.end() || !Complete(it->second)) return;
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
