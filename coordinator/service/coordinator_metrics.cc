#include "coordinator/service/coordinator_metrics.h"

#include <map>
#include <string>
#include <utility>

#include "common/types.h"
#include "coordinator/job/job_info.h"

#ifndef TROIKA_VERSION
#define TROIKA_VERSION "unknown"
#endif

namespace troika::coordinator {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// Families by name, in the order first declared; families left without samples are dropped.
class Families {
 public:
  void Declare(const std::string& name, MetricType type, const std::string& help) {
    index_.emplace(name, families_.size());
    families_.push_back(MetricFamily{name, help, type, {}});
  }
  void Counter(const std::string& name, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.counter.value = value;
    Add(name, std::move(m));
  }
  void Gauge(const std::string& name, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.gauge.value = value;
    Add(name, std::move(m));
  }
  void Histogram(const std::string& name, Labels labels, ClientMetric m) {
    m.label = std::move(labels);
    Add(name, std::move(m));
  }
  std::vector<MetricFamily> Take() {
    std::vector<MetricFamily> out;
    for (MetricFamily& family : families_) {
      if (!family.metric.empty()) out.push_back(std::move(family));
    }
    return out;
  }

 private:
  void Add(const std::string& name, ClientMetric m) {
    families_[index_.at(name)].metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

void DeclareFamilies(Families& f) {
  const MetricType C = MetricType::Counter, G = MetricType::Gauge, H = MetricType::Histogram;
  f.Declare("troika_build_info", G, "Troika version of this coordinator (value 1).");
  f.Declare("troika_jobs_active", G, "Jobs the coordinator holds.");
  f.Declare("troika_jobs_started_total", C, "Jobs created.");
  f.Declare("troika_jobs_ended_total", C, "Jobs released, by outcome.");
  f.Declare("troika_job_aborts_total", C, "Job aborts, by cause.");
  f.Declare("troika_membership_changes_total", C,
            "Generations elastic jobs began: after losing ranks (by cause), or nodes_joined.");
  f.Declare("troika_membership_recovery_seconds", H,
            "From the end of an elastic job's generation to the first responses of the next.");
  f.Declare("troika_job_ranks", G, "Ranks of the job.");
  f.Declare("troika_job_ranks_alive", G, "Ranks connected that have not left.");
  f.Declare("troika_step_duration_seconds", H, "Training steps reported by the ranks.");
  f.Declare("troika_step_compute_seconds", H, "Compute part of the ranks' steps.");
  f.Declare("troika_step_negotiation_wait_seconds", H,
            "Negotiation-wait part of the ranks' steps.");
  f.Declare("troika_step_communication_seconds", H, "Communication part of the ranks' steps.");
  f.Declare("troika_collectives_total", C, "Tensors negotiated, by collective.");
  f.Declare("troika_collective_bytes_total", C,
            "Bytes of the tensors negotiated as one rank submits them, by collective.");
  f.Declare("troika_fusion_fill_ratio", H,
            "Allreduce responses' bytes over the fusion threshold in force.");
  f.Declare("troika_cache_hits_total", C, "Tensors ready with the requests of their cache entry.");
  f.Declare("troika_cache_misses_total", C, "Tensors ready with new or changed requests.");
  f.Declare("troika_fusion_threshold_bytes", G, "Fusion threshold in force.");
  f.Declare("troika_cycle_time_seconds", G, "Cycle time in force.");
  f.Declare("troika_autotune_samples_total", C, "Configurations the autotuner scored.");
  f.Declare("troika_autotune_score_bytes_per_second", G, "Latest autotune sample's score.");
  f.Declare("troika_autotune_best_score_bytes_per_second", G, "Best autotune score so far.");
  f.Declare("troika_schedules_total", C, "Steady-state schedules published.");
  f.Declare("troika_schedules_ended_total", C, "Steady-state schedules that ended.");
  f.Declare("troika_schedule_tensors", G, "Tensors of the schedule in force (0: none).");
  f.Declare("troika_pending_tensors", G, "Tensors some ranks submitted and others not.");
  f.Declare("troika_stalled_tensors", G, "Pending tensors older than the stall warning time.");
  f.Declare("troika_rank_lateness_seconds", G,
            "A rank's mean lateness behind the first arrival of each tensor.");
}

void AddProcessWide(const JobRegistryCounts& counts, size_t jobs, Families& f) {
  f.Gauge("troika_build_info", {{"version", TROIKA_VERSION}}, 1);
  f.Gauge("troika_jobs_active", {}, static_cast<double>(jobs));
  f.Counter("troika_jobs_started_total", {}, static_cast<double>(counts.started));
  f.Counter("troika_jobs_ended_total", {{"outcome", "finished"}},
            static_cast<double>(counts.finished));
  f.Counter("troika_jobs_ended_total", {{"outcome", "aborted"}},
            static_cast<double>(counts.aborted));
  f.Counter("troika_jobs_ended_total", {{"outcome", "expired"}},
            static_cast<double>(counts.expired));
  for (int i = 0; i < kNumAbortCauses; ++i) {
    const auto cause = static_cast<AbortCause>(i);
    if (cause == AbortCause::kAttachTimeout) continue;  // ends a generation, never a job
    f.Counter("troika_job_aborts_total", {{"reason", AbortCauseName(cause)}},
              static_cast<double>(counts.aborts[i]));
  }
  // Only rank exits, lost connections and ranks that never attached end a generation instead
  // of the job.
  for (AbortCause cause :
       {AbortCause::kRankExit, AbortCause::kConnectionLost, AbortCause::kAttachTimeout}) {
    f.Counter("troika_membership_changes_total", {{"reason", AbortCauseName(cause)}},
              static_cast<double>(counts.membership_changes[static_cast<int>(cause)]));
  }
  f.Counter("troika_membership_changes_total", {{"reason", "nodes_joined"}},
            static_cast<double>(counts.admissions));
  f.Histogram("troika_membership_recovery_seconds", {}, counts.membership_recovery);
}

void AddSnapshot(const std::string& job, const JobMetricsSnapshot& s, Families& f) {
  const char* kSteps[] = {"troika_step_duration_seconds", "troika_step_compute_seconds",
                          "troika_step_negotiation_wait_seconds",
                          "troika_step_communication_seconds"};
  for (size_t i = 0; i < s.steps.size(); ++i) {
    f.Histogram(kSteps[i], {{"troika_job", job}}, s.steps[i]);
  }
  for (int op = 0; op < kNumCollectiveTypes; ++op) {
    const Labels labels = {{"op", CollectiveName(static_cast<CollectiveType>(op))},
                           {"troika_job", job}};
    f.Counter("troika_collectives_total", labels, static_cast<double>(s.ops[op].count));
    f.Counter("troika_collective_bytes_total", labels, static_cast<double>(s.ops[op].bytes));
  }
  f.Histogram("troika_fusion_fill_ratio", {{"troika_job", job}}, s.fusion_fill);
}

// Every per-job family for `job`, labelled troika_job.
void AddJob(const Job& job, const CoordinatorMetricsOptions& options, Families& f) {
  const JobInfo info = job.Describe();
  const Labels labels = {{"troika_job", info.name}};
  f.Gauge("troika_job_ranks", labels, info.size);
  int alive = 0;
  for (const RankInfo& rank : info.ranks) alive += rank.connected && !rank.departed;
  f.Gauge("troika_job_ranks_alive", labels, alive);
  AddSnapshot(info.name, job.MetricsSnapshot(), f);
  f.Counter("troika_cache_hits_total", labels, static_cast<double>(info.cache.hits));
  f.Counter("troika_cache_misses_total", labels, static_cast<double>(info.cache.misses));
  f.Gauge("troika_fusion_threshold_bytes", labels,
          static_cast<double>(info.negotiation.fusion_threshold_bytes));
  f.Gauge("troika_cycle_time_seconds", labels, absl::ToDoubleSeconds(info.negotiation.cycle_time));
  if (info.autotune.enabled) {
    f.Counter("troika_autotune_samples_total", labels, info.autotune.evaluations);
    f.Gauge("troika_autotune_score_bytes_per_second", labels, info.autotune.last_score);
    f.Gauge("troika_autotune_best_score_bytes_per_second", labels, info.autotune.best_score);
  }
  if (info.schedules.enabled) {
    f.Counter("troika_schedules_total", labels, static_cast<double>(info.schedules.published));
    f.Counter("troika_schedules_ended_total", labels, static_cast<double>(info.schedules.ended));
    f.Gauge("troika_schedule_tensors", labels, info.schedules.active ? info.schedules.tensors : 0);
  }
  int stalled = 0;
  for (const PendingTensorInfo& tensor : info.pending) {
    stalled += options.stall_warning_time > absl::ZeroDuration() &&
               tensor.waiting >= options.stall_warning_time;
  }
  f.Gauge("troika_pending_tensors", labels, static_cast<double>(info.pending.size()));
  f.Gauge("troika_stalled_tensors", labels, stalled);
  if (info.size <= options.max_rank_series) {
    for (const RankLateness& rank : info.stragglers.ranks) {
      f.Gauge("troika_rank_lateness_seconds",
              {{"rank", std::to_string(rank.rank)}, {"troika_job", info.name}},
              absl::ToDoubleSeconds(rank.mean_lateness));
    }
  }
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(const JobRegistry& registry,
                                       CoordinatorMetricsOptions options)
    : registry_(registry), options_(options) {}

std::vector<MetricFamily> CoordinatorMetrics::Collect() const {
  Families f;
  DeclareFamilies(f);
  const std::vector<std::shared_ptr<Job>> jobs = registry_.Jobs();
  AddProcessWide(registry_.counts(), jobs.size(), f);
  for (const std::shared_ptr<Job>& job : jobs) AddJob(*job, options_, f);
  return f.Take();
}

}  // namespace troika::coordinator
