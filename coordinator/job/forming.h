#pragma once
// Forming: how one job forms, as MembershipPolicy routes it. Agents register their nodes for
// blocks of ranks (Roster), or, once an elastic job has none left or runs, wait to join at its
// next commit (Generations); ranks attach and wait until every rank of the job did. Forming
// tells the other parts when that happens: the job runs (Lifecycle), its memberships are
// answered (Roster), and a job formed anew takes over the state record (Recorder). An attach
// phase that times out becomes MembershipPolicy's verdict, for the job to carry out.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.
// Attach and node callbacks run under that lock: they only finish RPCs.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/lifecycle.h"
#include "coordinator/job/membership_policy.h"
#include "coordinator/job/recorder.h"
#include "coordinator/job/roster.h"

namespace troika::coordinator {

class Forming {
 public:
  // `job` (its name) and `size` are the job's; the parts are its own and outlive this.
  Forming(std::string job, int size, Roster& roster, Generations& generations, Lifecycle& lifecycle,
          Recorder& recorder, const MembershipPolicy& policy);
  Forming(const Forming&) = delete;
  Forming& operator=(const Forming&) = delete;

  // `ranks` (all on `host`) wait for every rank of the job to attach (an attach that
  // MembershipPolicy::RouteAttach sent to wait): `done` gets their memberships once the last
  // one attaches; `expire` is called with the waiter's id when `timeout` passes first, and
  // the job carries out Expired's verdict (for a job that is not elastic, every waiting
  // attach fails with DEADLINE_EXCEEDED naming the missing ranks). Returns the waiter's id.
  uint64_t Wait(const std::vector<int>& ranks, const std::string& host, absl::Duration timeout,
                Roster::AttachCallback done, std::function<void(uint64_t)> expire);
  // The attach of waiter `id` timed out after `timeout`: what the job must do
  // (MembershipPolicy::AttachTimedOut), or nothing if that attach or the attach phase is over.
  std::optional<Verdict> Expired(uint64_t id, absl::Duration timeout);
  // Reserves `nproc` consecutive ranks for an agent's node: block `node_rank`, or the lowest
  // free block if -1. The same host asking again for its block gets it again (a restarted
  // agent). An elastic job that has no block left, or runs, holds the node as joining
  // instead, up to its maximum: `done` comes when the job's next commit admits it (its block
  // in the next generation; docs/elastic.md), or with the error that ended the job first. A
  // joining node whose `cancelled` (may be null) turns true is not admitted; one with a
  // `join_id` is named in the MembershipChange that admits it. `done` runs exactly once.
  void RegisterNode(const std::string& host, int nproc, int node_rank,
                    Generations::RegisterCallback done, std::function<bool()> cancelled,
                    std::string join_id);

 private:
  const std::string job_;
  const int size_;
  Roster& roster_;
  Generations& generations_;
  Lifecycle& lifecycle_;
  Recorder& recorder_;
  const MembershipPolicy& policy_;
};

}  // namespace troika::coordinator
