#pragma once
// JobTelemetry: what one job learns from its ranks' execution reports and does with it — the
// timeline (coordinator/timeline.h) and the autotuner (coordinator/autotuner.h). It decides
// what the ranks must report (ClientSettings), maps their clocks onto the coordinator's, counts
// training steps, scores autotune samples and hands the job new negotiation parameters.
//
// Steps: a step ends when a tensor name becomes ready a second time since the step began (as
// Horovod counts them); barriers and joins do not count. Clock mapping: each rank's offset is
// the smallest (coordinator receive time - rank send time) seen, a bound within one one-way
// delay. Autotune score: the mean over ranks of allreduced bytes per second on the rank's own
// clock, between the reports that bracket the sample; a sample ends after `steps_per_sample`
// steps once every rank has reported within it.
//
// It observes the job's negotiation (NegotiationObserver) for set 0's tensors, and hands the
// parameters the autotuner chose to `on_tuned`.
//
// Thread contract: not thread-safe; the owning Job calls under its lock. Files are written
// there (timeline events are buffered; the CSV is a few hundred bytes per sample).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/inspection/timeline.h"
#include "coordinator/negotiation/negotiation_observer.h"
#include "coordinator/negotiation/negotiator.h"
#include "coordinator/tuning/autotuner.h"

namespace troika::coordinator {

struct AutotuneConfig {
  AutotuneOptions options;
  // Written after every sample: one row per evaluated configuration. Empty: none.
  std::string csv_path;
  // Written when tuning ends: the best parameters, for --autotune_params_in. Empty: none.
  std::string params_path;
};

struct AutotuneInfo {
  bool enabled = false;
  bool done = false;
  int warmup_left = 0;
  int evaluations = 0;
  int max_samples = 0;
  TuningParams current;
  TuningParams best;
  double best_score = 0;  // bytes per second
  double last_score = 0;  // the latest evaluated sample's, bytes per second
};

struct TimelineInfo {
  bool active = false;
  std::string path;
  int64_t bytes_written = 0;
  bool truncated = false;
};

class JobTelemetry : public NegotiationObserver {
 public:
  // How often ranks report while tuning or writing a timeline.
  static constexpr int kReportIntervalMs = 50;

  // `on_tuned` (may be null) is called from OnReady(set, ...) with new negotiation
  // parameters, as OnReady(records, now) returns them.
  JobTelemetry(std::string job, int size, std::optional<AutotuneConfig> autotune,
               const NegotiatorOptions& start,
               std::function<void(const TuningParams&)> on_tuned = nullptr);
  ~JobTelemetry();
  JobTelemetry(const JobTelemetry&) = delete;
  JobTelemetry& operator=(const JobTelemetry&) = delete;

  // What the ranks must report now; changes when tuning ends or a timeline starts or stops.
  ClientSettings settings() const;
  // settings(), with `negotiation`'s cycle time as the ranks' send cycle (clamped to [0, 60 s]):
  // what the ranks are told to do.
  ClientSettings SettingsFor(const NegotiatorOptions& negotiation) const;

  // Tensors that became ready at `now`. Returns new negotiation parameters when the autotuner
  // moved on to another configuration (or settled on the best).
  std::optional<TuningParams> OnReady(const std::vector<ReadyRecord>& records, absl::Time now);
  // NegotiationObserver: set 0's tensors go to OnReady(records, now); other sets' are not
  // part of the timeline or the autotuner's steps.
  void OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) override;
  // A rank's report, received at `now`.
  void OnReport(const ExecReport& report, absl::Time now);
  // The coordinator's clock minus `rank`'s, as far as its reports tell (the smallest
  // difference between receipt and sent_at seen); InfiniteDuration() before its first.
  absl::Duration ClockOffset(int rank) const { return ranks_[rank].offset; }

  // Starts writing a timeline to `path`; FAILED_PRECONDITION if one is being written.
  absl::Status StartTimeline(const std::string& path, int64_t max_bytes, absl::Time now);
  // Closes the timeline; FAILED_PRECONDITION if none is being written. Returns what was
  // written.
  absl::StatusOr<TimelineInfo> StopTimeline();
  // An elastic job's timeline goes on in its next generation (Succession::EndGeneration):
  // the one being written (null if none), and the successor's taking it over.
  std::unique_ptr<Timeline> TakeTimeline() { return std::move(timeline_); }
  void AdoptTimeline(std::unique_ptr<Timeline> timeline) { timeline_ = std::move(timeline); }

  AutotuneInfo autotune_info() const;
  TimelineInfo timeline_info() const;

 private:
  struct RankReports {
    absl::Duration offset = absl::InfiniteDuration();  // coordinator - rank clock
    int64_t bytes = 0;                                 // latest report
    absl::Time sent_at = absl::InfinitePast();         // latest report, rank clock
    int64_t sample_bytes = 0;                          // at the sample's start
    absl::Time sample_sent_at = absl::InfinitePast();  // at the sample's start
  };

  void CountSteps(const std::vector<ReadyRecord>& records);
  // The sample's score if it is complete, else nullopt.
  std::optional<double> SampleScore() const;
  void StartSample();
  void FinishTuning();

  const std::string job_;
  const int size_;
  const std::function<void(const TuningParams&)> on_tuned_;
  std::optional<AutotuneConfig> config_;
  std::unique_ptr<Autotuner> autotuner_;  // set while enabled
  std::unique_ptr<Timeline> timeline_;    // set while a timeline is written
  TimelineInfo last_timeline_;
  std::vector<RankReports> ranks_;
  std::set<std::string> step_names_;  // ready in the current step
  int64_t sample_steps_ = 0;
};

}  // namespace troika::coordinator
