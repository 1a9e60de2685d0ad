#pragma once
// JobRegistry: the coordinator's live jobs by name. Jobs are created on demand and dropped
// once done (finished or aborted, with nothing open), so a long-lived coordinator's memory
// does not grow with the number of jobs it has served.
//
// Thread-safe.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/scheduler.h"
#include "coordinator/job.h"
#include "coordinator/negotiator.h"

namespace troika::coordinator {

struct JobRegistryOptions {
  NegotiatorOptions negotiator;
  // Stall warning and shutdown times for every job; see JobOptions.
  StallOptions stall;
  // See JobOptions. Default 10 ms.
  absl::Duration straggler_margin = absl::Milliseconds(10);
  // See JobOptions. Default true.
  bool deadlock_detection = true;
  // Autotune every job (see JobOptions). Default: off.
  std::optional<AutotuneOptions> autotune;
  // Where each tuned job writes <job>-autotune.csv and <job>-autotune.params (the job name
  // with anything but [A-Za-z0-9._-] replaced by '_'). Empty: no files. Default: empty.
  std::string autotune_dir;
  // Most ranks one job may have. Default 65536.
  int max_job_size = 65536;
  // A created job nobody attached to is dropped after this long. Default 10 min.
  absl::Duration unattached_job_ttl = absl::Minutes(10);
};

class JobRegistry {
 public:
  JobRegistry(JobRegistryOptions options, Scheduler& scheduler, Clock& clock);
  ~JobRegistry();

  // Creates job `name` of `size` ranks, or returns the live job of that name if its size is
  // the same (`*created` says which). FAILED_PRECONDITION if the sizes differ.
  absl::StatusOr<std::shared_ptr<Job>> CreateJob(const std::string& name, int size, bool* created);
  // NOT_FOUND naming the job if there is none.
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& name) const;
  std::vector<std::shared_ptr<Job>> Jobs() const;
  // Aborts every live job with `reason` (coordinator shutdown).
  void AbortAll(const std::string& reason);

 private:
  void RemoveIfDone(const std::string& name, const std::weak_ptr<Job>& job);

  const JobRegistryOptions options_;
  Scheduler& scheduler_;
  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // guarded by mu_
};

}  // namespace troika::coordinator
