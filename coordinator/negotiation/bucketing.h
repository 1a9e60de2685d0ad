#pragma once
// Bucketing: how a job's schedules group their tensors into collectives (docs/design/schedules.md,
// Buckets). It holds what the ranks' progress reports taught the job about neighbouring tensors
// — joinable (no rank ever saw a completion between their submissions: they may share a
// collective) or separable (some rank did: that sticks) — and the grouping of a period that
// follows from it: neighbouring fusible entries fused, up to the fusion threshold, wherever
// every pair of neighbouring tensors is joinable. Buckets join whatever neighbouring responses
// the reports permit, so how negotiation happened to fuse the step a period was taken from
// matters only where the reports say nothing. What they cannot do is cross the period's end:
// Fewest says how many collectives the best rotation of a period runs in, so that the caller
// can wait for it (docs/design/schedules.md, Convergence).
//
// Thread contract: not thread-safe; its owner (Schedules) serialises every call.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/messages.h"
#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator {

class Bucketing {
 public:
  // `enabled`: fuse beyond negotiation at all (ScheduleOptions::buckets). `whole_job`: set 0's
  // negotiator (outlives this), whose cache has the tensors' sizes and whose fusion threshold
  // buckets fill.
  Bucketing(bool enabled, const Negotiator& whole_job);
  Bucketing(const Bucketing&) = delete;
  Bucketing& operator=(const Bucketing&) = delete;

  // Learns from rounds every rank reported of a schedule whose tensors are `names`, in period
  // order (the last followed by the next round's first): the pair after tensor n is separable
  // if n is in `cut_after`, else joinable unless it was separable before.
  void Learn(const std::vector<std::string>& names, const std::set<int>& cut_after);

  // A bucketed schedule ended before every rank completed a round of it: after kMaxYoungEnds,
  // Bucket keeps negotiation's fusion. True when this call turned bucketing off.
  bool EndedYoung();

  // `period` as a schedule would run it from its first entry: bucketed as the reports permit.
  std::vector<Response> Bucket(std::vector<Response> period) const;

  // The fewest collectives Bucket runs `period` (cyclic) in at any of its rotations (a start at
  // any of its entries). Bucket fuses nothing across the period's end, so a rotation that ends
  // where a bucket could go on runs in more.
  size_t Fewest(const std::vector<Response>& period) const;

  // Bucketed schedules that ended in their first round before Bucket keeps negotiation's
  // fusion.
  static constexpr int kMaxYoungEnds = 2;

 private:
  bool on() const { return enabled_ && young_ends_ < kMaxYoungEnds; }
  bool Joinable(const std::string& a, const std::string& b) const {
    return joinable_.count({a, b}) > 0;
  }
  // Whether every pair of neighbouring tensors in `entry` is joinable.
  bool AllJoinable(const Response& entry) const;
  // Whether `entry` and the one after it, `next`, may share a bucket (the threshold aside).
  bool MayJoin(const Response& entry, const Response& next) const;
  int64_t Bytes(const Response& entry) const;

  // Constant after construction.
  const bool enabled_;
  const Negotiator& whole_job_;

  // Pairs of neighbouring tensors (by name, in a period's order).
  std::set<std::pair<std::string, std::string>> joinable_, separable_;
  int young_ends_ = 0;  // see EndedYoung
};

}  // namespace troika::coordinator
