#pragma once
// JobRegistry: the coordinator's live jobs by name. Jobs are created on demand and dropped
// once done (finished or aborted, with nothing open), so a long-lived coordinator's memory
// does not grow with the number of jobs it has served.
//
// Thread-safe.

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/scheduler.h"
#include "coordinator/job/ended_jobs.h"
#include "coordinator/job/job.h"
#include "coordinator/state/state_store.h"
#include "prometheus/client_metric.h"
#include "prometheus/histogram.h"

namespace troika::coordinator {

struct JobRegistryOptions {
  // Every job's options (JobOptions, whose defaults hold): negotiation, stall times, straggler
  // margin, deadlock detection, schedules and autotuning. The registry gives each job its own
  // token, sizes, epoch, generation cause, callbacks and (with autotune_dir) autotune files:
  // whatever `job` holds for those is replaced.
  JobOptions job;
  // Where each tuned job writes <job>-autotune.csv and <job>-autotune.params (the job name
  // with anything but [A-Za-z0-9._-] replaced by '_'). Empty: the files job.autotune names,
  // for a coordinator of one job (troikarun's; none by default). Default: empty.
  std::string autotune_dir;
  // Most ranks one job may have. Default 65536.
  int max_job_size = 65536;
  // Most jobs held at once (it also bounds the metrics' label cardinality). Default 10000.
  int max_jobs = 10000;
  // A created job nobody attached to is dropped after this long. Default 10 min.
  absl::Duration unattached_job_ttl = absl::Minutes(10);
  // Where every live job's record is kept (--state_dir), for a restarted coordinator.
  // Default: none.
  std::shared_ptr<StateStore> state_store;
  // How long an aborted job's abort answers its own ranks after the job was released
  // (EndedJobs). Default 2 min.
  absl::Duration ended_job_ttl = absl::Minutes(2);
};

// Job counts since the registry was created, for metrics.
struct JobRegistryCounts {
  int64_t started = 0;
  int64_t finished = 0;  // released after every rank said goodbye
  int64_t aborted = 0;   // released after an abort
  int64_t expired = 0;   // released without ever running (nobody or not everybody attached)
  std::array<int64_t, kNumAbortCauses> aborts{};  // by AbortCause, when aborted
  // Generations an elastic job began because it lost ranks, by the AbortCause of the loss,
  // and because nodes were admitted.
  std::array<int64_t, kNumAbortCauses> membership_changes{};
  int64_t admissions = 0;
  // Histogram (seconds): from the end of a generation to the first responses of the next.
  prometheus::ClientMetric membership_recovery;
};

class JobRegistry {
 public:
  JobRegistry(JobRegistryOptions options, Scheduler& scheduler, Clock& clock);
  ~JobRegistry();

  // Creates job `name` of `size` ranks with `token`, elastic between `min_size` ranks if
  // non-zero and `max_size` (0: `size`; JobOptions), or returns the live job of that name if
  // its size (an elastic job's: any), minimum and maximum (if given) are the same
  // (`*created` says which; an existing job keeps its token — callers check it).
  // FAILED_PRECONDITION if they differ; RESOURCE_EXHAUSTED if max_jobs jobs are held. An
  // elastic job's name serves its latest generation (Job::successor()).
  absl::StatusOr<std::shared_ptr<Job>> CreateJob(const std::string& name, int size, bool* created,
                                                 Secret token = {}, int min_size = 0,
                                                 int max_size = 0);
  // Recreates the jobs recorded in the state store (a restarted coordinator): each waits for
  // its agents to attach again, with its token, node blocks and process sets, and the tuned
  // parameters autotune_dir holds for it. Returns how many. Call once, before serving.
  int RestoreJobs();
  // NOT_FOUND naming the job if there is none.
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& name) const;
  // Why job `name` ended, if it was aborted and released within ended_job_ttl and `token` is
  // its token (EndedJobs): for its ranks that come too late to find it.
  std::optional<absl::Status> EndedWith(const std::string& name, const std::string& token);
  std::vector<std::shared_ptr<Job>> Jobs() const;
  // Jobs held now.
  size_t size() const;
  // Aborts every live job with `reason` (coordinator shutdown).
  void AbortAll(const std::string& reason);
  // Detaches every live job (Job::Detach): a coordinator that stops for a restart.
  void DetachAll(const std::string& reason);
  JobRegistryCounts counts() const;
  // `job`'s latest generation: itself, or an elastic job's last successor.
  static std::shared_ptr<Job> Latest(std::shared_ptr<Job> job);

 private:
  void RemoveIfDone(const std::string& name, const std::weak_ptr<Job>& job);
  // Makes and registers a job; `restored`: from its record.
  absl::StatusOr<std::shared_ptr<Job>> MakeJobLocked(const std::string& name, int size,
                                                     Secret token, const v1::JobRecord* restored,
                                                     int min_size = 0, int max_size = 0);
  // Makes a job without registering it (no lock taken): MakeJobLocked's, or an elastic job's
  // next generation (`epoch` > 1), which AdvanceLocked() registers in place of the one before.
  std::shared_ptr<Job> NewJob(const std::string& name, int size, Secret token,
                              const v1::JobRecord* restored, int min_size, int max_size,
                              int64_t epoch, std::string generation_cause = {});
  // options_.job with what makes job `name` its own: its token, sizes, epoch, generation
  // cause and callbacks.
  JobOptions OptionsFor(const std::string& name, int size, Secret token, int min_size, int max_size,
                        int64_t epoch, std::string generation_cause);
  // The tuning job `name` starts with: the parameters autotune_dir holds for a `restored`
  // job, else options_.job's autotuning, its files in autotune_dir.
  void ApplyTuning(const std::string& name, const v1::JobRecord* restored,
                   JobOptions& job_options) const;
  struct Entry;
  // Moves the entry on to its job's latest generation, which is then dropped like a new job
  // if nobody attaches to it.
  void AdvanceLocked(const std::string& name, Entry& entry);
  // autotune_dir/<name>-autotune (the name made file-safe).
  std::string AutotuneBase(const std::string& name) const;

  struct Counters {
    std::atomic<int64_t> started{0}, finished{0}, aborted{0}, expired{0};
    std::array<std::atomic<int64_t>, kNumAbortCauses> aborts{};
    std::array<std::atomic<int64_t>, kNumAbortCauses> membership_changes{};
    std::atomic<int64_t> admissions{0};
    prometheus::Histogram recovery{prometheus::Histogram::BucketBoundaries{
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  };

  const JobRegistryOptions options_;
  // Shared with the jobs' abort callbacks, which may outlive the registry.
  const std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  Scheduler& scheduler_;
  Clock& clock_;
  // A live job and the timer that drops it if nobody attaches: cancelled when the job is
  // released, so a finished job leaves nothing in the scheduler (its closure's weak reference
  // would keep the job's memory, allocated with its control block, until the timer ran).
  struct Entry {
    std::shared_ptr<Job> job;
    Scheduler::TaskId expiry = 0;
    Secret token;  // every generation's
  };

  mutable std::mutex mu_;
  std::map<std::string, Entry> jobs_;  // guarded by mu_
  EndedJobs ended_;                    // guarded by mu_
};

}  // namespace troika::coordinator
