#include "coordinator/inspection/straggler_stats.h"

#include <algorithm>

namespace troika::coordinator {

StragglerStats::StragglerStats(int size, int window)
    : size_(size), window_(std::max(window, 1)), ranks_(size) {}

void StragglerStats::OnReady(const std::vector<absl::Time>& arrival_by_rank) {
  if (static_cast<int>(arrival_by_rank.size()) != size_ || size_ == 0) return;
  const auto [first, latest] = std::minmax_element(arrival_by_rank.begin(), arrival_by_rank.end());
  int last = -1;
  if (size_ > 1 && std::count(arrival_by_rank.begin(), arrival_by_rank.end(), *latest) == 1) {
    last = static_cast<int>(latest - arrival_by_rank.begin());
  }
  for (int r = 0; r < size_; ++r) {
    PerRank& p = ranks_[r];
    const absl::Duration lateness = arrival_by_rank[r] - *first;
    ++p.count;
    p.total += lateness;
    p.max = std::max(p.max, lateness);
  }
  ++tensors_;
  Recent recent{last, *latest - *first};
  if (last >= 0) {
    ++ranks_[last].last;
    ++ranks_[last].window_last;
    ranks_[last].window_last_total += recent.lateness;
  }
  recent_.push_back(recent);
  if (static_cast<int>(recent_.size()) > window_) {
    if (const Recent& old = recent_.front(); old.last >= 0) {
      --ranks_[old.last].window_last;
      ranks_[old.last].window_last_total -= old.lateness;
    }
    recent_.pop_front();
  }
}

std::vector<int> StragglerStats::Stragglers(absl::Duration margin) const {
  std::vector<int> out;
  const int64_t window = static_cast<int64_t>(recent_.size());
  if (window == 0) return out;
  for (int r = 0; r < size_; ++r) {
    const PerRank& p = ranks_[r];
    if (p.window_last > 0 && 2 * p.window_last >= window &&
        p.window_last_total / p.window_last >= margin) {
      out.push_back(r);
    }
  }
  return out;
}

StragglerSnapshot StragglerStats::Snapshot() const {
  StragglerSnapshot s;
  s.tensors = tensors_;
  s.window_size = static_cast<int64_t>(recent_.size());
  s.ranks.reserve(size_);
  for (int r = 0; r < size_; ++r) {
    const PerRank& p = ranks_[r];
    RankLateness l;
    l.rank = r;
    l.count = p.count;
    l.mean_lateness = p.count > 0 ? p.total / p.count : absl::ZeroDuration();
    l.max_lateness = p.max;
    l.last_count = p.last;
    l.window_last_count = p.window_last;
    l.window_last_lateness =
        p.window_last > 0 ? p.window_last_total / p.window_last : absl::ZeroDuration();
    s.ranks.push_back(l);
  }
  return s;
}

}  // namespace troika::coordinator
