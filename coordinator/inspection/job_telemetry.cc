#include "coordinator/inspection/job_telemetry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {

JobTelemetry::JobTelemetry(std::string job, int size, std::optional<AutotuneConfig> autotune,
                           const NegotiatorOptions& start,
                           std::function<void(const TuningParams&)> on_tuned)
    : job_(std::move(job)),
      size_(size),
      on_tuned_(std::move(on_tuned)),
      config_(std::move(autotune)),
      ranks_(size) {
  if (config_) {
    autotuner_ = std::make_unique<Autotuner>(
        config_->options, TuningParams{start.fusion_threshold_bytes, start.cycle_time});
  }
}

JobTelemetry::~JobTelemetry() {
  if (timeline_) timeline_->Close().IgnoreError();  // the destructor would log it
}

ClientSettings JobTelemetry::settings() const {
  const bool tuning = autotuner_ && !autotuner_->done();
  ClientSettings settings;
  settings.report_interval_ms = tuning || timeline_ ? kReportIntervalMs : 0;
  settings.report_phases = timeline_ != nullptr;
  return settings;
}

ClientSettings JobTelemetry::SettingsFor(const NegotiatorOptions& negotiation) const {
  ClientSettings out = settings();
  const int64_t cycle_us = absl::ToInt64Microseconds(negotiation.cycle_time);
  out.send_cycle_us = static_cast<int>(std::clamp<int64_t>(cycle_us, 0, 60'000'000));
  return out;
}

std::optional<TuningParams> JobTelemetry::OnReady(const std::vector<ReadyRecord>& records,
                                                  absl::Time now) {
  if (timeline_) {
    for (const ReadyRecord& r : records) {
      absl::Time first = absl::InfiniteFuture();
      for (absl::Time t : r.arrivals) first = std::min(first, t);
      timeline_->Negotiation(r.name, CollectiveName(r.type), first, r.ready_at, r.arrivals,
                             r.cached);
    }
  }
  if (!autotuner_ || autotuner_->done()) return std::nullopt;
  CountSteps(records);
  if (sample_steps_ < config_->options.steps_per_sample) return std::nullopt;
  const std::optional<double> score = SampleScore();
  if (!score) return std::nullopt;  // some rank has not reported within the sample yet
  const bool changed = autotuner_->AddSample(*score);
  if (!config_->csv_path.empty()) {
    if (absl::Status s = autotuner_->WriteCsv(config_->csv_path); !s.ok()) {
      TROIKA_LOG(WARNING) << "job '" << job_ << "': " << s;
    }
  }
  StartSample();
  if (autotuner_->done()) {
    FinishTuning();
    return autotuner_->current();
  }
  return changed ? std::optional<TuningParams>(autotuner_->current()) : std::nullopt;
}

void JobTelemetry::OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) {
  if (set != 0) return;
  std::optional<TuningParams> tuned = OnReady(records, now);
  if (tuned && on_tuned_) on_tuned_(*tuned);
}

void JobTelemetry::CountSteps(const std::vector<ReadyRecord>& records) {
  for (const ReadyRecord& r : records) {
    if (r.type == CollectiveType::kBarrier || r.type == CollectiveType::kJoin) continue;
    if (!step_names_.insert(r.name).second) {
      ++sample_steps_;
      step_names_ = {r.name};
    }
  }
}

std::optional<double> JobTelemetry::SampleScore() const {
  double sum = 0;
  for (const RankReports& r : ranks_) {
    if (r.sample_sent_at == absl::InfinitePast() || r.sent_at <= r.sample_sent_at) {
      return std::nullopt;
    }
    sum += static_cast<double>(r.bytes - r.sample_bytes) /
           absl::ToDoubleSeconds(r.sent_at - r.sample_sent_at);
  }
  return sum / size_;
}

void JobTelemetry::StartSample() {
  sample_steps_ = 0;
  for (RankReports& r : ranks_) {
    r.sample_bytes = r.bytes;
    r.sample_sent_at = r.sent_at;
  }
}

void JobTelemetry::FinishTuning() {
  const TuningParams& best = autotuner_->best();
  TROIKA_LOG(INFO) << "job '" << job_ << "': autotuning done after " << autotuner_->evaluations()
                   << " configurations: fusion threshold " << best.fusion_threshold_bytes
                   << " bytes, cycle time " << absl::FormatDuration(best.cycle_time) << " ("
                   << autotuner_->best_score() / 1e6 << " MB/s allreduced per rank)";
  if (config_->params_path.empty()) return;
  if (absl::Status s = SaveTuningParams(config_->params_path, best); !s.ok()) {
    TROIKA_LOG(WARNING) << "job '" << job_ << "': " << s;
  }
}

void JobTelemetry::OnReport(const ExecReport& report, absl::Time now) {
  if (report.rank < 0 || report.rank >= size_) return;
  RankReports& r = ranks_[report.rank];
  r.offset = std::min(r.offset, now - report.sent_at);
  if (report.sent_at > r.sent_at) {
    r.bytes = report.allreduce_bytes;
    r.sent_at = report.sent_at;
  }
  if (r.sample_sent_at == absl::InfinitePast()) {  // its first report starts its sample
    r.sample_bytes = r.bytes;
    r.sample_sent_at = r.sent_at;
  }
  if (!timeline_) return;
  for (const PhaseSpan& phase : report.phases) {
    timeline_->RankPhase(report.rank, phase.kind, phase.start + r.offset, phase.end + r.offset,
                         phase.names);
  }
}

absl::Status JobTelemetry::StartTimeline(const std::string& path, int64_t max_bytes,
                                         absl::Time now) {
  if (timeline_) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job_, "' is writing a timeline to '",
                                                      timeline_->path(), "' already"));
  }
  auto timeline = Timeline::Open(path, job_, size_, max_bytes, now);
  if (!timeline.ok()) return timeline.status();
  timeline_ = *std::move(timeline);
  return absl::OkStatus();
}

absl::StatusOr<TimelineInfo> JobTelemetry::StopTimeline() {
  if (!timeline_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_, "' is not writing a timeline"));
  }
  absl::Status closed = timeline_->Close();
  last_timeline_ = {false, timeline_->path(), timeline_->bytes_written(), timeline_->truncated()};
  timeline_.reset();
  if (!closed.ok()) return closed;
  return last_timeline_;
}

AutotuneInfo JobTelemetry::autotune_info() const {
  AutotuneInfo info;
  if (!autotuner_) return info;
  info.enabled = true;
  info.done = autotuner_->done();
  info.warmup_left = autotuner_->warmup_left();
  info.evaluations = autotuner_->evaluations();
  info.max_samples = config_->options.max_samples;
  info.current = autotuner_->current();
  info.best = autotuner_->best();
  info.best_score = autotuner_->best_score();
  info.last_score = autotuner_->last_score();
  return info;
}

TimelineInfo JobTelemetry::timeline_info() const {
  if (!timeline_) return last_timeline_;
  return {true, timeline_->path(), timeline_->bytes_written(), timeline_->truncated()};
}

}  // namespace troika::coordinator
