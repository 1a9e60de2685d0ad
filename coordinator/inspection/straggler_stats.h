#pragma once
// StragglerStats: which ranks hold the job back. For every tensor that became ready (every
// rank submitted it), a rank's lateness is its arrival minus the earliest rank's arrival; the
// rank that arrived strictly after every other is that tensor's "last" rank (on a tie for last
// no rank is counted).
//
// A straggler is a rank that was last for at least half of the recent window of tensors and
// whose mean lateness over those recent tensors it was last for (how long everyone waited for
// it) is at least a margin: one slow GPU, a busy host, or a data loader that cannot keep up.
// The window, not all-time means, decides, so a rank that turns slow is found quickly.
//
// Plain data in and out: no threads, no clock, no I/O. Memory: O(size + window).
// Thread contract: not thread-safe; the owning Job serialises every call.

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/time/time.h"

namespace troika::coordinator {

struct RankLateness {
  int rank = 0;
  int64_t count = 0;  // tensors seen
  absl::Duration mean_lateness;
  absl::Duration max_lateness;
  int64_t last_count = 0;               // tensors for which this rank was last, over all time
  int64_t window_last_count = 0;        // ... within the recent window
  absl::Duration window_last_lateness;  // mean lateness over those window_last_count tensors
};

struct StragglerSnapshot {
  int64_t tensors = 0;              // tensors seen over all time
  int64_t window_size = 0;          // tensors in the recent window
  std::vector<RankLateness> ranks;  // by rank
  // Ranks the job judges straggling (Stragglers() with its --straggler_margin); set by
  // Job::Describe.
  std::vector<int> straggling;
};

class StragglerStats {
 public:
  // `size`: ranks in the job. `window`: how many recent tensors decide who is last most often.
  explicit StragglerStats(int size, int window = 256);

  // Records one ready tensor. `arrival_by_rank` has one entry per rank (else ignored).
  void OnReady(const std::vector<absl::Time>& arrival_by_rank);

  // Ranks, ascending, last for at least half of the window, with mean lateness over the
  // window's tensors they were last for >= `margin`.
  // Empty before any tensor.
  std::vector<int> Stragglers(absl::Duration margin) const;

  StragglerSnapshot Snapshot() const;
  int64_t tensors() const { return tensors_; }

 private:
  struct PerRank {
    int64_t count = 0;
    absl::Duration total;
    absl::Duration max;
    int64_t last = 0;
    int64_t window_last = 0;
    absl::Duration window_last_total;
  };
  struct Recent {
    int last = -1;  // -1: a tie
    absl::Duration lateness;
  };

  const int size_;
  const int window_;
  int64_t tensors_ = 0;
  std::vector<PerRank> ranks_;
  std::deque<Recent> recent_;  // the window, oldest first
};

}  // namespace troika::coordinator
