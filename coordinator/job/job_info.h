#pragma once
// JobInfo: an operator's snapshot of one job (Job::Describe() on the coordinator, the admin
// client's view of DescribeJob on troikactl's side). Plain data, safe to keep and read
// without the job.
//
// Thread contract: a value type; no locking of its own.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/inspection/job_telemetry.h"
#include "coordinator/inspection/straggler_stats.h"
#include "coordinator/negotiation/negotiator.h"
#include "coordinator/negotiation/schedules.h"

namespace troika::coordinator {

struct RankInfo {
  int rank = 0;
  std::string host;  // empty until attached
  bool attached = false;
  int local_rank = -1;     // -1 until the job is running
  int cross_rank = -1;     // -1 until the job is running
  bool connected = false;  // has an open session
  bool departed = false;   // said goodbye
};

struct PendingTensorInfo {
  std::string name;
  absl::Duration waiting;          // since the first rank submitted it
  std::vector<int> missing_ranks;  // ascending
};

struct JobInfo {
  std::string name;
  int size = 0;
  std::string state;  // JobStateName(): attaching, running, finished, aborted
  int64_t epoch = 0;
  int min_size = 0;                        // an elastic job's minimum (0: not elastic)
  int max_size = 0;                        // and its maximum
  std::string generation_cause;            // why this generation began (empty: the first)
  std::string abort_reason;                // empty unless aborted
  absl::Duration age;                      // since the job was created
  std::vector<RankInfo> ranks;             // by rank, all of them
  std::vector<PendingTensorInfo> pending;  // by name
  StragglerSnapshot stragglers;
  NegotiatorOptions negotiation;
  CacheStats cache;
  AutotuneInfo autotune;
  TimelineInfo timeline;
  ScheduleInfo schedules;  // Schedules::Info

  int attached_ranks() const {
    return static_cast<int>(
        std::count_if(ranks.begin(), ranks.end(), [](const RankInfo& r) { return r.attached; }));
  }
};

// One line of ListJobs.
struct JobSummary {
  std::string name;
  int size = 0;
  std::string state;
  int attached_ranks = 0;
  int pending_tensors = 0;
  absl::Duration age;
};

}  // namespace troika::coordinator
