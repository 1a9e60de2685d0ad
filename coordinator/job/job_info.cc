// Job::Describe(): the operator's snapshot of one job (see JobInfo in job.h).

#include "coordinator/job/job.h"

namespace troika::coordinator {

JobInfo Job::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_.Now();
  JobInfo info;
  info.name = name_;
  info.size = size_;
  info.state = JobStateName(lifecycle_.state());
  info.epoch = generations_.epoch();
  info.min_size = min_size();
  info.max_size = generations_.max_size();
  info.generation_cause = generations_.cause();
  info.abort_reason = lifecycle_.abort_reason();
  info.age = now - generations_.created_at();
  info.ranks.resize(size_);
  for (int r = 0; r < size_; ++r) {
    RankInfo& rank = info.ranks[r];
    rank.rank = r;
    if (const std::string* host = roster_.host(r)) {
      rank.host = *host;
      rank.attached = true;
    }
    if (const Membership* membership = roster_.membership(r)) {
      rank.local_rank = membership->local_rank;
      rank.cross_rank = membership->cross_rank;
    }
    rank.connected = sessions_.connected(r);
    rank.departed = roster_.departed(r);
  }
  for (const PendingTensor& tensor : negotiation_.Pending()) {
    info.pending.push_back({tensor.name, now - tensor.first_arrival, tensor.missing_ranks});
  }
  info.stragglers = stragglers_.Snapshot();
  info.stragglers.straggling = stragglers_.Stragglers();
  info.negotiation = negotiation_.options();
  info.cache = negotiation_.cache_stats();
  info.autotune = telemetry_.autotune_info();
  info.timeline = telemetry_.timeline_info();
  info.schedules = negotiation_.schedules().Info();
  return info;
}

}  // namespace troika::coordinator
