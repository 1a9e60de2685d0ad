#include "coordinator/job/job_registry.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {

JobRegistry::JobRegistry(JobRegistryOptions options, Scheduler& scheduler, Clock& clock)
    : options_(std::move(options)),
      scheduler_(scheduler),
      clock_(clock),
      ended_(static_cast<size_t>(std::max(options_.max_jobs, 0)), options_.ended_job_ttl) {}

JobRegistry::~JobRegistry() = default;

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::CreateJob(const std::string& name, int size,
                                                            bool* created, Secret token,
                                                            int min_size, int max_size) {
  if (name.empty() || name.size() > 256) {
    return absl::InvalidArgumentError("a job name must have 1 to 256 characters");
  }
  if (size < 1 || size > options_.max_job_size) {
    return absl::InvalidArgumentError(absl::StrCat("job '", name, "': size ", size,
                                                   " is outside [1, ", options_.max_job_size, "]"));
  }
  if (min_size < 0 || min_size > size) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", name, "': minimum size ", min_size, " is outside [0, ", size, "]"));
  }
  if (max_size != 0 && (max_size < size || max_size > options_.max_job_size)) {
    return absl::InvalidArgumentError(absl::StrCat("job '", name, "': maximum size ", max_size,
                                                   " is outside [", size, ", ",
                                                   options_.max_job_size, "]"));
  }
  if (max_size > size && min_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", name, "': a maximum size above the size needs a minimum (an elastic job)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = jobs_.find(name); it != jobs_.end()) {
    AdvanceLocked(name, it->second);
    const std::shared_ptr<Job>& job = it->second.job;
    // An elastic job's size changes: the bounds must agree (a maximum only if given).
    const bool same =
        job->min_size() == min_size &&
        (min_size > 0 ? max_size == 0 || max_size == job->max_size() : job->size() == size);
    if (!same) {
      auto bounds = [](int min, int max) {
        return min == 0 ? std::string()
                        : absl::StrCat(" (at least ", min,
                                       max ? absl::StrCat(", at most ", max) : "", ")");
      };
      return absl::FailedPreconditionError(
          absl::StrCat("job '", name, "' already exists with ", job->size(), " ranks",
                       bounds(job->min_size(), job->max_size()), "; asked for ", size,
                       bounds(min_size, max_size)));
    }
    *created = false;
    return job;
  }
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot create job '", name, "': ", options_.max_jobs, " jobs are running (--max_jobs)"));
  }
  auto job = MakeJobLocked(name, size, token, nullptr, min_size, max_size);
  if (job.ok()) *created = true;
  return job;
}

std::string JobRegistry::AutotuneBase(const std::string& name) const {
  std::string file = name;
  for (char& c : file) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      c = '_';
    }
  }
  return absl::StrCat(options_.autotune_dir, "/", file, "-autotune");
}

JobOptions JobRegistry::OptionsFor(const std::string& name, int size, Secret token, int min_size,
                                   int max_size, int64_t epoch, std::string generation_cause) {
  JobOptions job_options = options_.job;
  job_options.token = token;
  job_options.min_size = min_size;
  job_options.max_size = max_size;
  job_options.epoch = epoch;
  job_options.generation_cause = std::move(generation_cause);
  job_options.next_generation = nullptr;
  job_options.next_incarnation = nullptr;
  job_options.on_recovered = nullptr;
  job_options.on_record = nullptr;
  if (min_size > 0) {
    max_size = std::max(max_size, size);
    job_options.next_generation = [this, name, token, min_size, max_size](
                                      int size, int64_t epoch, std::optional<AbortCause> cause,
                                      const std::string& why) {
      std::atomic<int64_t>& counter =
          cause ? counters_->membership_changes[static_cast<int>(*cause)] : counters_->admissions;
      counter.fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<Job> next =
          NewJob(name, size, token, nullptr, min_size, max_size, epoch, why);
      // A restarted coordinator resumes the generation in force.
      if (options_.state_store) options_.state_store->Save(next->Record());
      return next;
    };
  } else {
    // Ranks that shut down and attach again form the job anew (Job::Attach).
    // (It saves its state record as it adopts the node blocks.)
    job_options.next_incarnation = [this, name, size, token](int64_t epoch) {
      return NewJob(name, size, token, nullptr, 0, 0, epoch);
    };
  }
  if (epoch > 1 && min_size > 0) {
    job_options.on_recovered = [counters = counters_](absl::Duration took) {
      counters->recovery.Observe(absl::ToDoubleSeconds(took));
    };
  }
  job_options.on_abort = [counters = counters_](AbortCause cause) {
    counters->aborts[static_cast<int>(cause)].fetch_add(1, std::memory_order_relaxed);
  };
  if (options_.state_store) {
    job_options.on_record = [store = options_.state_store](const v1::JobRecord& record) {
      store->Save(record);
    };
  }
  return job_options;
}

void JobRegistry::ApplyTuning(const std::string& name, const v1::JobRecord* restored,
                              JobOptions& job_options) const {
  if (restored != nullptr && !options_.autotune_dir.empty()) {
    // A job tuned before the restart keeps what its tuning found.
    const std::string path = AutotuneBase(name) + ".params";
    if (absl::StatusOr<TuningParams> params = LoadTuningParams(path); params.ok()) {
      job_options.negotiator.fusion_threshold_bytes = params->fusion_threshold_bytes;
      job_options.negotiator.cycle_time = params->cycle_time;
      job_options.autotune.reset();
      TROIKA_LOG(INFO) << "job '" << name << "': tuned parameters from " << path;
      return;
    }
  }
  // Without a directory, a job keeps the files `job` names: a coordinator of one job
  // (troikarun's, --autotune-log-file).
  if (job_options.autotune && !options_.autotune_dir.empty()) {
    const std::string base = AutotuneBase(name);
    job_options.autotune->csv_path = base + ".csv";
    job_options.autotune->params_path = base + ".params";
  }
}

std::shared_ptr<Job> JobRegistry::NewJob(const std::string& name, int size, Secret token,
                                         const v1::JobRecord* restored, int min_size, int max_size,
                                         int64_t epoch, std::string generation_cause) {
  JobOptions job_options =
      OptionsFor(name, size, token, min_size, max_size, epoch, std::move(generation_cause));
  ApplyTuning(name, restored, job_options);
  // The callbacks hold weak references: a job may outlive neither the registry nor itself.
  auto holder = std::make_shared<std::weak_ptr<Job>>();
  auto job = std::make_shared<Job>(name, size, job_options, scheduler_, clock_,
                                   [this, name, holder] { RemoveIfDone(name, *holder); });
  *holder = job;
  return job;
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::MakeJobLocked(const std::string& name, int size,
                                                                Secret token,
                                                                const v1::JobRecord* restored,
                                                                int min_size, int max_size) {
  // A restored elastic job goes on in the generation its record names.
  std::shared_ptr<Job> job = NewJob(name, size, token, restored, min_size, max_size,
                                    restored ? std::max<int64_t>(restored->epoch(), 1) : 1,
                                    restored ? restored->generation_cause() : std::string());
  if (restored != nullptr) {
    if (absl::Status s = job->Restore(*restored); !s.ok()) return s;
  }
  Entry& entry = jobs_[name];
  entry.job = job;
  entry.token = token;
  ended_.Forget(name);
  counters_->started.fetch_add(1, std::memory_order_relaxed);
  entry.expiry = scheduler_.RunAfter(
      options_.unattached_job_ttl,
      [this, name, weak = std::weak_ptr<Job>(job)] { RemoveIfDone(name, weak); });
  if (options_.state_store && restored == nullptr) options_.state_store->Save(job->Record());
  TROIKA_LOG(INFO) << "job '" << name << "' " << (restored ? "restored" : "created") << " with "
                   << size << " ranks";
  return job;
}

std::shared_ptr<Job> JobRegistry::Latest(std::shared_ptr<Job> job) {
  while (std::shared_ptr<Job> next = job->successor()) job = std::move(next);
  return job;
}

void JobRegistry::AdvanceLocked(const std::string& name, Entry& entry) {
  std::shared_ptr<Job> latest = Latest(entry.job);
  if (latest == entry.job) return;
  // The generation that ended lives on while its sessions do.
  entry.job = std::move(latest);
  scheduler_.Cancel(entry.expiry);
  entry.expiry = scheduler_.RunAfter(
      options_.unattached_job_ttl,
      [this, name, weak = std::weak_ptr<Job>(entry.job)] { RemoveIfDone(name, weak); });
}

int JobRegistry::RestoreJobs() {
  if (!options_.state_store) return 0;
  int restored = 0;
  for (const v1::JobRecord& record : options_.state_store->Load()) {
    const Secret token = Secret::FromDigest(record.token_sha256());
    absl::Status status;
    const bool bounds = record.min_size() >= 0 && record.min_size() <= record.size() &&
                        (record.max_size() == 0 || record.max_size() >= record.size());
    if (record.size() < 1 || record.size() > options_.max_job_size || !token.set() || !bounds) {
      status = absl::InvalidArgumentError("size, bounds or token not valid");
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.count(record.name()) == 0) {
        status = MakeJobLocked(record.name(), record.size(), token, &record, record.min_size(),
                               record.max_size())
                     .status();
      }
    }
    if (!status.ok()) {
      TROIKA_LOG(WARNING) << "not restoring job '" << record.name() << "' from "
                          << options_.state_store->dir() << ": " << status.message();
      options_.state_store->Remove(record.name());
      continue;
    }
    ++restored;
  }
  return restored;
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job named '", name, "' on this coordinator"));
  }
  return Latest(it->second.job);
}

std::optional<absl::Status> JobRegistry::EndedWith(const std::string& name,
                                                   const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_.Lookup(name, token, clock_.Now());
}

std::vector<std::shared_ptr<Job>> JobRegistry::Jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Job>> out;
  out.reserve(jobs_.size());
  for (const auto& [name, entry] : jobs_) out.push_back(Latest(entry.job));
  return out;
}

size_t JobRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void JobRegistry::AbortAll(const std::string& reason) {
  for (const auto& job : Jobs()) job->Abort(AbortCause::kShutdown, reason);
}

void JobRegistry::DetachAll(const std::string& reason) {
  for (const auto& job : Jobs()) job->Detach(reason);
}

JobRegistryCounts JobRegistry::counts() const {
  JobRegistryCounts out;
  out.started = counters_->started.load(std::memory_order_relaxed);
  out.finished = counters_->finished.load(std::memory_order_relaxed);
  out.aborted = counters_->aborted.load(std::memory_order_relaxed);
  out.expired = counters_->expired.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumAbortCauses; ++i) {
    out.aborts[i] = counters_->aborts[i].load(std::memory_order_relaxed);
    out.membership_changes[i] = counters_->membership_changes[i].load(std::memory_order_relaxed);
  }
  out.admissions = counters_->admissions.load(std::memory_order_relaxed);
  out.membership_recovery = counters_->recovery.Collect();
  return out;
}

void JobRegistry::RemoveIfDone(const std::string& name, const std::weak_ptr<Job>& weak) {
  std::shared_ptr<Job> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(name);
    std::shared_ptr<Job> job = weak.lock();
    if (it == jobs_.end()) return;
    AdvanceLocked(name, it->second);
    if (it->second.job != job || !job->done()) return;
    removed = std::move(it->second.job);
    // Not run yet unless it is what calls us: either way nothing of the job stays queued.
    scheduler_.Cancel(it->second.expiry);
    if (removed->state() == Job::State::kAborted) {
      ended_.Remember(
          name, it->second.token,
          absl::AbortedError(absl::StrCat("job '", name, "' aborted: ", removed->abort_reason())),
          clock_.Now());
    }
    jobs_.erase(it);
  }
  switch (removed->state()) {
    case Job::State::kFinished:
      counters_->finished.fetch_add(1, std::memory_order_relaxed);
      break;
    case Job::State::kAborted:
      counters_->aborted.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      counters_->expired.fetch_add(1, std::memory_order_relaxed);
  }
  if (options_.state_store) options_.state_store->Remove(name);
  TROIKA_LOG(INFO) << "job '" << name << "' released";
  // `removed` is destroyed here, outside the registry's lock.
}

}  // namespace troika::coordinator
