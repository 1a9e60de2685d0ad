#include "coordinator/tuning/autotuner.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace troika::coordinator {
namespace {

// Candidate grid the acquisition is maximised over: fusion x cycle time. 64 steps over 12
// octaves of fusion threshold is ~1.14x per step, finer than any measurement can tell apart.
constexpr int kFusionSteps = 64;
constexpr int kCycleSteps = 16;
// Space-filling points evaluated after the start point, before the GP takes over.
constexpr int kInitialPoints = 3;
// Exploration margin of EI, as a fraction of the scores' standard deviation.
constexpr double kXi = 0.01;

const char kCsvHeader[] = "sample,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_second,best";

// Position of `v` in [lo, hi] on a log scale, in [0,1]; 0 when the range is a single point.
double LogPosition(double v, double lo, double hi) {
  if (hi <= lo) return 0;
  return std::clamp(std::log(v / lo) / std::log(hi / lo), 0.0, 1.0);
}

double LogValue(double x, double lo, double hi) { return lo * std::pow(hi / lo, x); }

// Grid coordinate nearest to `x` with `steps` points over [0,1].
double Snap(double x, int steps) { return std::round(x * (steps - 1)) / (steps - 1); }

// True if `a` and `b` fall into the same candidate-grid cell.
bool SameCell(const std::vector<double>& a, const std::vector<double>& b) {
  return std::abs(a[0] - b[0]) < 0.5 / (kFusionSteps - 1) &&
         std::abs(a[1] - b[1]) < 0.5 / (kCycleSteps - 1);
}

// A Latin hypercube of `n` points in [0,1]^2 snapped to the candidate grid. Uses only the raw
// mt19937_64 output, which the standard fixes, so the points are the same on every platform.
std::vector<std::vector<double>> LatinHypercube(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  std::vector<std::vector<int>> strata(2, std::vector<int>(n));
  for (auto& perm : strata) {
    for (int i = 0; i < n; ++i) perm[i] = i;
    for (int i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
  }
  std::vector<std::vector<double>> points;
  for (int i = 0; i < n; ++i) {
    points.push_back({Snap((strata[0][i] + uniform()) / n, kFusionSteps),
                      Snap((strata[1][i] + uniform()) / n, kCycleSteps)});
  }
  return points;
}

double StdDev(const std::vector<double>& v) {
  double mean = 0, var = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) var += (x - mean) * (x - mean) / v.size();
  return std::sqrt(var);
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("Cannot write '", path, "': ", std::strerror(errno)));
  }
  const bool written = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  if (std::fclose(f) != 0 || !written) {
    return absl::InternalError(absl::StrCat("Cannot write '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

Autotuner::Autotuner(AutotuneOptions options, TuningParams start)
    : options_(std::move(options)), warmup_left_(std::max(options_.warmup_samples, 0)) {
  options_.min_fusion_bytes = std::max<int64_t>(options_.min_fusion_bytes, 1);
  options_.max_fusion_bytes = std::max(options_.max_fusion_bytes, options_.min_fusion_bytes);
  options_.min_cycle_time = std::max(options_.min_cycle_time, absl::Microseconds(1));
  options_.max_cycle_time = std::max(options_.max_cycle_time, options_.min_cycle_time);
  start.fusion_threshold_bytes = std::clamp(start.fusion_threshold_bytes, options_.min_fusion_bytes,
                                            options_.max_fusion_bytes);
  start.cycle_time = std::clamp(start.cycle_time, options_.min_cycle_time, options_.max_cycle_time);
  current_ = start;
  best_ = start;
  current_x_ = Normalise(start);
  initial_points_ = LatinHypercube(kInitialPoints, options_.seed);
  done_ = options_.max_samples <= 0;
  csv_rows_.push_back(kCsvHeader);
}

std::vector<double> Autotuner::Normalise(const TuningParams& params) const {
  return {LogPosition(static_cast<double>(params.fusion_threshold_bytes),
                      static_cast<double>(options_.min_fusion_bytes),
                      static_cast<double>(options_.max_fusion_bytes)),
          LogPosition(absl::ToDoubleMicroseconds(params.cycle_time),
                      absl::ToDoubleMicroseconds(options_.min_cycle_time),
                      absl::ToDoubleMicroseconds(options_.max_cycle_time))};
}

TuningParams Autotuner::Denormalise(const std::vector<double>& x) const {
  const double fusion = LogValue(x[0], static_cast<double>(options_.min_fusion_bytes),
                                 static_cast<double>(options_.max_fusion_bytes));
  const double cycle_us = LogValue(x[1], absl::ToDoubleMicroseconds(options_.min_cycle_time),
                                   absl::ToDoubleMicroseconds(options_.max_cycle_time));
  TuningParams params;
  params.fusion_threshold_bytes = std::clamp<int64_t>(
      std::llround(fusion), options_.min_fusion_bytes, options_.max_fusion_bytes);
  params.cycle_time = std::clamp(absl::Microseconds(std::llround(cycle_us)),
                                 options_.min_cycle_time, options_.max_cycle_time);
  return params;
}

bool Autotuner::AddSample(double score) {
  if (done_) return false;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  Record(std::isfinite(score) ? score : 0);
  TuningParams next;
  if (evaluations() >= options_.max_samples) {
    done_ = true;
    next = best_;
  } else {
    current_x_ = NextPoint();
    next = Denormalise(current_x_);
  }
  const bool changed = !(next == current_);
  current_ = next;
  return changed;
}

void Autotuner::Record(double score) {
  xs_.push_back(current_x_);
  scores_.push_back(score);
  if (scores_.size() == 1 || score > best_score_) {
    best_score_ = score;
    best_ = current_;
  }
  csv_rows_.push_back(
      absl::StrFormat("%d,%d,%.3f,%.1f,%.1f", evaluations(), current_.fusion_threshold_bytes,
                      absl::ToDoubleMilliseconds(current_.cycle_time), score, best_score_));
}

std::vector<double> Autotuner::NextPoint() {
  auto evaluated = [this](const std::vector<double>& x) {
    return std::any_of(xs_.begin(), xs_.end(),
                       [&x](const std::vector<double>& e) { return SameCell(x, e); });
  };
  // Evaluation k (1-based, k >= 2) is initial point k - 2; one that lands in an evaluated cell
  // (the start point's) is replaced by the GP's choice.
  if (static_cast<int>(xs_.size()) <= kInitialPoints) {
    const std::vector<double>& p = initial_points_[xs_.size() - 1];
    if (!evaluated(p)) return p;
  }
  gp_.Fit(xs_, scores_);
  const double xi = kXi * StdDev(scores_);
  // Ties keep the first candidate (fusion-major order), so the choice is deterministic. When
  // EI vanishes everywhere (e.g. all scores equal), explore where the model knows least.
  std::vector<double> best_ei_x = xs_.front(), best_var_x = xs_.front();
  double best_ei = 0, best_var = -1;
  for (int i = 0; i < kFusionSteps; ++i) {
    for (int j = 0; j < kCycleSteps; ++j) {
      std::vector<double> x = {static_cast<double>(i) / (kFusionSteps - 1),
                               static_cast<double>(j) / (kCycleSteps - 1)};
      if (evaluated(x)) continue;
      const GpPrediction p = gp_.Predict(x);
      const double ei = ExpectedImprovement(p.mean, std::sqrt(p.variance), best_score_, xi);
      if (ei > best_ei) {
        best_ei = ei;
        best_ei_x = x;
      }
      if (p.variance > best_var) {
        best_var = p.variance;
        best_var_x = x;
      }
    }
  }
  if (best_ei > 0) return best_ei_x;
  if (best_var >= 0) return best_var_x;
  // Every cell evaluated (a budget over 1024): re-measure the best point.
  return xs_[std::max_element(scores_.begin(), scores_.end()) - scores_.begin()];
}

absl::Status Autotuner::WriteCsv(const std::string& path) const {
  std::string contents;
  for (const std::string& row : csv_rows_) absl::StrAppend(&contents, row, "\n");
  return WriteFile(path, contents);
}

absl::Status SaveTuningParams(const std::string& path, const TuningParams& params) {
  return WriteFile(
      path, absl::StrCat("fusion_threshold_bytes=", params.fusion_threshold_bytes,
                         "\ncycle_time_us=", absl::ToInt64Microseconds(params.cycle_time), "\n"));
}

absl::StatusOr<TuningParams> LoadTuningParams(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("Cannot read tuning params file '", path, "': ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  int64_t fusion = -1, cycle_us = -1;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(buffer.str(), '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Malformed tuning params file '", path, "', line ", line_number, " '", line, "': ", why));
    };
    if (line.find('=') == absl::string_view::npos) return bad("expected key=value");
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, '=');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    int64_t* slot = key == "fusion_threshold_bytes" ? &fusion
                    : key == "cycle_time_us"        ? &cycle_us
                                                    : nullptr;
    if (slot == nullptr) {
      return bad("unknown key, expected fusion_threshold_bytes or cycle_time_us");
    }
    if (*slot >= 0) return bad("duplicate key");
    int64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &value) || value < 0) {
      return bad("value is not a non-negative integer");
    }
    *slot = value;
  }
  if (fusion < 0 || cycle_us < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Malformed tuning params file '", path, "': missing ",
                     fusion < 0 ? "fusion_threshold_bytes" : "cycle_time_us"));
  }
  return TuningParams{fusion, absl::Microseconds(cycle_us)};
}

}  // namespace troika::coordinator
