#pragma once
// What a job is made with (JobOptions), why one is aborted (AbortCause), and the lineage that
// follows a job's successors (JobLineage).

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "coordinator/inspection/job_telemetry.h"
#include "coordinator/inspection/stall_inspector.h"
#include "coordinator/negotiation/negotiator.h"
#include "coordinator/state/secret.h"
#include "troika/v1/troika.pb.h"

namespace troika::coordinator {

// Why a job was aborted, for metrics (the reason text says more).
enum class AbortCause {
  kRankExit,
  kConnectionLost,
  kDeadlock,
  kStall,
  kCancelled,
  kShutdown,
  kProtocolError,  // a session was ended for what it sent (by the coordinator or an agent)
  kAttachTimeout,  // ranks did not all attach in time, or attached and opened no session
};
inline constexpr int kNumAbortCauses = 8;
// "rank_exit", "connection_lost", "deadlock", "stall", "cancelled", "shutdown",
// "protocol_error", "attach_timeout".
const char* AbortCauseName(AbortCause cause);

class Job;

// Where a job's generations (elastic) or incarnations (formed anew) lead, for one who holds
// on to the job (troikarun reads how its job ended): JobRegistry::Latest(anchor()) is the job
// in force. Made by its holder, given to the first job (Job::Track), and moved on by each job
// as it makes its successor (to the maker), so that it keeps the job in force alive but not
// every one before; the jobs hold it weakly. Thread-safe; its lock is taken last.
class JobLineage {
 public:
  explicit JobLineage(std::shared_ptr<Job> first) : anchor_(std::move(first)) {}
  std::shared_ptr<Job> anchor() const {
    std::lock_guard<std::mutex> lock(mu_);
    return anchor_;
  }

 private:
  friend class Generations;  // moves it on as it makes a successor
  void Set(std::shared_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mu_);
    anchor_ = std::move(job);
  }
  mutable std::mutex mu_;
  std::shared_ptr<Job> anchor_;  // guarded by mu_
};

struct JobOptions {
  NegotiatorOptions negotiator;
  // When a tensor stalls (some ranks submitted it, others not) is warned about or aborts the
  // job. Defaults: warn after 60 s, never abort.
  StallOptions stall;
  // A rank last to submit most tensors is logged as a straggler once its mean lateness
  // reaches this. Default 10 ms.
  absl::Duration straggler_margin = absl::Milliseconds(10);
  // Abort the job at once when every live rank reports being blocked on tensors that are
  // pending (see DeadlockDetector). Default true.
  bool deadlock_detection = true;
  // Steady-state schedules (docs/protocol.md, Schedules): once the job's responses repeat,
  // its ranks are sent the period to execute without requests. Default: off.
  bool schedules = false;
  // Schedules fuse neighbouring entries into collectives of up to the fusion threshold once
  // the ranks' reports show that no rank needs one's result before it submits the next
  // (docs/protocol.md, Schedules). Default: on.
  bool schedule_buckets = true;
  // Tune fusion threshold and cycle time while the job runs (JobTelemetry). Default: off.
  std::optional<AutotuneConfig> autotune;
  // Called (under the job's lock: must be quick and take no lock the job may wait for) when
  // the job is aborted. Default: none.
  std::function<void(AbortCause)> on_abort;
  // The job's token: every job-scoped call must carry it (docs/security.md).
  Secret token;
  // Called (under the job's lock: must be quick) with the job's state record whenever it
  // changes: a node registered, a process set was added or removed (--state_dir).
  std::function<void(const v1::JobRecord&)> on_record;
  // Once every rank attached, how long each node's agent has to open its session (it does at
  // once): the ranks still without one are then lost, as if their session had closed (their
  // agent died between its attach and its session: nothing else tells the job, and the other
  // ranks would wait for theirs in the data plane's setup). Default 60 s.
  absl::Duration session_open_timeout = absl::Seconds(60);
  // Elastic job (docs/elastic.md): while at least this many ranks remain, losing ranks (a
  // rank's exit, a lost session) ends the job's generation instead of aborting it, and the
  // survivors go on as the next one. 0 (default): not elastic.
  int min_size = 0;
  // An elastic job's maximum: nodes registering while it runs are admitted at a commit up to
  // this many ranks. 0 (default): the size.
  int max_size = 0;
  // This generation's number (Membership.epoch), and why it began (empty: the first).
  int64_t epoch = 1;
  std::string generation_cause;
  // Makes the next generation of an elastic job: the same name, token and options, `size`
  // ranks, epoch `epoch`, begun because ranks were lost (`cause`, `why`) or nodes were
  // admitted (no cause). Called under the job's lock: must take no lock the job may wait for.
  std::function<std::shared_ptr<Job>(int size, int64_t epoch, std::optional<AbortCause> cause,
                                     const std::string& why)>
      next_generation;
  // Called once (under the job's lock: must be quick) by a generation after the first when it
  // sends its first responses: how long after the generation before ended.
  std::function<void(absl::Duration)> on_recovered;
  // A job that is not elastic: makes its next incarnation, epoch `epoch` (the same name,
  // token, size and options), when ranks that shut down attach again. Called under the job's
  // lock: must take no lock the job may wait for. Null: ranks cannot attach again.
  std::function<std::shared_ptr<Job>(int64_t epoch)> next_incarnation;
};

}  // namespace troika::coordinator
