#pragma once
// Autotuner: Bayesian optimisation of the two negotiation parameters, the fusion threshold and
// the cycle time, from measured throughput (docs/autotune.md).
//
// The caller runs training with current(), measures a sample of steps_per_sample steps, and
// reports its score (allreduced bytes per second) to AddSample(). The first warmup_samples
// samples are discarded. Then the tuner evaluates the start point, a few space-filling points
// (a Latin hypercube drawn from `seed`), and afterwards, each time, the candidate-grid point of
// greatest expected improvement under a Gaussian process fitted to every evaluated point.
// After max_samples evaluations it settles on the best configuration seen and is done().
//
// Both axes are searched on a log scale, normalised to [0,1]. Deterministic given the options
// and the sequence of scores. Plain data in and out; the only I/O is WriteCsv and the params
// file functions below.
// Thread contract: not thread-safe; one owner calls every method.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/tuning/gaussian_process.h"

namespace troika::coordinator {

struct AutotuneOptions {
  // Samples discarded first, while caches and allocators warm up. Default 3.
  int warmup_samples = 3;
  // Training steps per sample; counted by the caller, recorded here for it. Default 10.
  int steps_per_sample = 10;
  // Configurations evaluated after warm-up (the sample budget). <= 0: done at once, with the
  // start point. Default 20.
  int max_samples = 20;
  // Search range of the fusion threshold, log scale. Default 64 KiB .. 256 MiB.
  int64_t min_fusion_bytes = int64_t{64} << 10;
  int64_t max_fusion_bytes = int64_t{256} << 20;
  // Search range of the cycle time, log scale. Default 100 us .. 20 ms.
  absl::Duration min_cycle_time = absl::Microseconds(100);
  absl::Duration max_cycle_time = absl::Milliseconds(20);
  // Seeds the space-filling initial points. Default 1.
  uint64_t seed = 1;
};

struct TuningParams {
  int64_t fusion_threshold_bytes = 0;
  absl::Duration cycle_time;
  friend bool operator==(const TuningParams&, const TuningParams&) = default;
};

class Autotuner {
 public:
  // `start` is the first configuration evaluated, clamped into the search ranges. Ranges with
  // min > max, or non-positive minimums, are fixed up (min clamped to >= 1 byte / 1 us, max to
  // >= min).
  Autotuner(AutotuneOptions options, TuningParams start);

  // Parameters to run the next sample with; after done(), the best seen.
  const TuningParams& current() const { return current_; }

  // One finished sample, measured with current(): `score` = allreduced bytes per second (a
  // non-finite score counts as 0). Returns true if current() changed. Ignored once done().
  bool AddSample(double score);

  bool done() const { return done_; }
  // Warm-up samples still to discard.
  int warmup_left() const { return warmup_left_; }
  // Evaluated configurations so far (warm-up excluded).
  int evaluations() const { return static_cast<int>(scores_.size()); }
  // Best configuration evaluated so far (the start point before any), and its score (0 before).
  const TuningParams& best() const { return best_; }
  double best_score() const { return best_score_; }
  // The latest evaluated sample's score; 0 before the first.
  double last_score() const { return scores_.empty() ? 0 : scores_.back(); }

  // The evaluation log: the header "sample,fusion_threshold_bytes,cycle_time_ms,
  // score_bytes_per_second,best", then one row per evaluation (1-based `sample`; warm-up
  // samples are not rows); `best` is the best score up to and including that row.
  const std::vector<std::string>& csv_rows() const { return csv_rows_; }
  // Writes csv_rows() to `path`, one per line.
  absl::Status WriteCsv(const std::string& path) const;

 private:
  std::vector<double> Normalise(const TuningParams& params) const;
  TuningParams Denormalise(const std::vector<double>& x) const;
  void Record(double score);
  // The next point to evaluate: the next initial point, else the argmax of EI.
  std::vector<double> NextPoint();

  // Constant after construction
  AutotuneOptions options_;
  std::vector<std::vector<double>> initial_points_;  // after the start point, in order

  int warmup_left_;
  bool done_ = false;
  TuningParams current_;
  std::vector<double> current_x_;
  std::vector<std::vector<double>> xs_;  // evaluated points, normalised
  std::vector<double> scores_;
  TuningParams best_;
  double best_score_ = 0;
  std::vector<std::string> csv_rows_;
  GaussianProcess gp_;
};

// Tuned parameters a later job can start from, as the text file
// "fusion_threshold_bytes=N\ncycle_time_us=M\n" (docs/autotune.md).
absl::Status SaveTuningParams(const std::string& path, const TuningParams& params);
// Reads a file written by SaveTuningParams. Blank lines and '#' comments are allowed; an
// unknown key, a malformed or negative value, a duplicate or a missing key fails with a message
// naming the file and the line.
absl::StatusOr<TuningParams> LoadTuningParams(const std::string& path);

}  // namespace troika::coordinator
