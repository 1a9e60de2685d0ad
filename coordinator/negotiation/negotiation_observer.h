#pragma once
// NegotiationObserver: what a job's negotiation (JobNegotiation) tells the parts that watch
// it — the job's metrics, straggler statistics and telemetry (coordinator/inspection/), and
// schedule detection (Schedules) — in the order it happens. Every method has an empty default:
// an observer overrides what it watches. Pending tensors are not pushed: a part that needs
// them (the stall inspector, the deadlock detector) asks JobNegotiation::Pending when it
// inspects.
//
// Thread contract: called under the owning job's lock, synchronously; an observer must not
// call back into the negotiation that calls it, except as its method's comment allows.

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator {

class NegotiationObserver {
 public:
  virtual ~NegotiationObserver() = default;

  // Tensors of process set `set` (0: the whole job) that became ready, in the order they
  // did, told at `now`: every member submitted them, or (set 0) every rank reported a round
  // of the schedule they run in. Arrivals are by rank of the set. An observer may change set
  // 0's negotiation options here (the autotuner's parameters take effect at the next poll).
  virtual void OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) {}

  // The bytes of allreduce responses polled (fused or not, every set), or of a schedule's
  // entries as its rounds complete, against set 0's fusion threshold then in force.
  virtual void OnAllreduceResponses(const std::vector<int64_t>& bytes,
                                    int64_t fusion_threshold_bytes) {}

  // Responses about to be sent to every session at `now`, in the job's one order.
  virtual void OnSending(const std::vector<Response>& responses, absl::Time now) {}
};

}  // namespace troika::coordinator
