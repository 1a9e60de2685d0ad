#pragma once
// ClientSchedule: this rank's side of a steady-state schedule (docs/protocol.md, Schedules).
// The coordinator sends one period of the job's responses; the rank executes its entries
// cyclically — entry e of round r is position r * K + e — each as soon as it has submitted
// every tensor the entry names with the request the entry's cache id stands for, without
// asking anyone. Each scheduled collective carries a vote; the first entry where any rank
// votes void ends the schedule on every rank, and what was submitted for it and later is
// negotiated again.
//
// The rank deviates (votes void at the first position it has not entered, and stops entering
// entries) when it submits what the schedule does not name or names with another request,
// or waits for a scheduled tensor whose entry it cannot enter yet.
//
// It also keeps what the coordinator's stall inspector, straggler statistics, metrics and
// timeline would have learned from requests (TakeProgress): when each tensor was submitted
// and each entry completed, per round; and between which neighbouring tensors the rank saw
// an operation complete, which the coordinator must not fuse into one collective.
//
// Plain state, no threads, no I/O: the controller calls it under its lock, with the time.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "libclient/execution/scheduled_step.h"

namespace troika::internal {

// A submission: its number on this rank (the order submitted) and its request.
using Submission = std::pair<uint64_t, TensorRequest>;
// Sorts `submissions` into the order they were submitted.
void SortBySubmission(std::vector<Submission>& submissions);

class ClientSchedule {
 public:
  // An entry to execute (the executor's ScheduledStep).
  using Step = ScheduledStep;

  // `expected[name]`: the request this rank submitted when the coordinator gave the name the
  // cache id the schedule names it by.
  ClientSchedule(Schedule schedule, const std::map<std::string, TensorRequest>& expected);

  int64_t id() const { return id_; }
  // False if `expected` lacked one of the schedule's tensors (or it has none): this rank
  // cannot take part in it.
  bool complete() const { return complete_; }
  bool deviated() const { return deviated_; }
  // Whether `name` (process set 0) is one of the schedule's tensors.
  bool Names(const std::string& name) const { return slot_.contains(name); }

  // This rank submitted `request` (the `order`-th submission) at `now`, when it had seen
  // `observed` operations complete (WaitTracker::Observations): true if the schedule takes it;
  // false if it is a deviation (Deviate() must follow) or the rank already deviated.
  bool Submit(const TensorRequest& request, uint64_t order, absl::Time now, uint64_t observed = 0);
  // Submit() in two halves: the index in the period of the tensor `request` is, if the
  // schedule would take it (-1: a deviation, or the rank already deviated); then taking that
  // tensor.
  int Match(const TensorRequest& request) const;
  void Take(int tensor, uint64_t order, absl::Time now, uint64_t observed = 0);
  // The entries that can be entered now, in order (each once).
  absl::InlinedVector<Step, 1> TakeReady();
  // Whether taking tensor `tensor` (Match) now makes the next entry to enter ready, that
  // entry holding this tensor alone: TakeReady's first step is then that entry.
  bool EntersAlone(int tensor) const;
  // The rank deviates: the entry to enter with a void vote (the first not entered). Once.
  Step Deviate();
  // How long this rank has been in the oldest entry it entered and has not seen complete (since
  // it submitted the entry's last tensor); zero if none.
  absl::Duration BlockedFor(absl::Time now) const;
  // A thread waits for the tensor `name`: whether that must end the schedule (its entry, or
  // an earlier one, still misses this rank's tensors, so waiting would never end).
  bool WaitDeviates(const std::string& name) const;

  // The entry at `position` completed at `now` with a go vote: its tensors are done.
  void Completed(int64_t position, absl::Time now);
  // The entry at `position` ended the schedule (void): the requests submitted for it and for
  // later positions, in the order they were submitted, to negotiate instead.
  std::vector<Submission> Ended(int64_t position);

  // What happened since the last call, as of `now` (the report's sent_at): the rounds that
  // completed (the first kMaxReportedTensors tensors' worth; rounds completed after those are
  // left out), and every tensor submitted and not completed if one of them was submitted at
  // least `stalling` ago. Empty if there is nothing to say.
  ScheduleProgress TakeProgress(absl::Time now, absl::Duration stalling);
  static constexpr size_t kMaxReportedTensors = 8192;

 private:
  // One of the period's tensors, by its index in the period: its entry and the request the
  // schedule expects for it.
  struct Tensor {
    size_t entry;
    TensorRequest request;
  };
  // A tensor submitted and not completed.
  struct Taken {
    int64_t position;
    uint64_t order;
    absl::Time submitted;
  };
  // A round some of whose tensors were submitted; the times by tensor and by entry, and the
  // completions seen before each tensor's submission.
  struct Round {
    std::vector<absl::Time> submitted;
    std::vector<uint64_t> observed;
    std::vector<absl::Time> completed;
    size_t entries_completed = 0;
  };
  Step MakeStep(int64_t position, bool vote_void) const;
  // Round number `round`, made (with those between it and the open ones) if there is none.
  Round& OpenRound(int64_t round);

  const int64_t id_;
  std::vector<std::shared_ptr<const Response>> entries_;
  std::vector<size_t> first_tensor_;  // by entry: its tensors are the next names.size() ones
  std::vector<Tensor> tensors_;       // the period's tensors, in entry order
  absl::flat_hash_map<std::string, int> slot_;  // name -> index in tensors_
  size_t next_tensor_ = 0;  // the index after the last tensor taken: Match tries it first
  int64_t next_ = 0;        // the first position not entered
  // By position % period: the tensors submitted for that position in [next_, next_ + period)
  // (a name is in flight once, so every submission's position is in that window).
  std::vector<size_t> submitted_;
  std::vector<std::optional<Taken>> taken_;  // by tensor index
  bool complete_ = true;
  bool deviated_ = false;
  // Rounds not completed: numbers [rounds_begin_, rounds_begin_ + open_rounds_), round n in
  // ring_[n % ring_.size()] (a power of two). A slot's vectors are sized when the ring is and
  // reused by every round that lands there (a name is in flight once: few rounds are open).
  std::vector<Round> ring_;
  int64_t rounds_begin_ = 0;
  size_t open_rounds_ = 0;
  Round& RoundAt(int64_t number) { return ring_[static_cast<size_t>(number) & (ring_.size() - 1)]; }
  // Makes room for `rounds` open rounds, keeping the open ones.
  void GrowRing(size_t rounds);
  // Rounds completed since the last TakeProgress, consecutive from `first_round_`: their
  // times, rounds x tensors and rounds x entries.
  int64_t first_round_ = 0;
  std::vector<absl::Time> done_submitted_, done_completed_;
  std::set<int32_t> done_cut_after_;  // ScheduleProgress::cut_after of those rounds
  // The last round completed, and the completions seen before its last tensor's submission.
  int64_t tail_round_ = -2;
  uint64_t tail_observed_ = 0;
};

}  // namespace troika::internal
