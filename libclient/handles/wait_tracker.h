#pragma once
// WaitTracker: which ops this rank's user threads are blocked on, for the coordinator's
// deadlock detection. A thread waiting in Handle::Wait()/WaitFor() on an op that is still not
// done after kBlockedAfter registers as blocked on the op's name; when the set of names the
// rank's threads are blocked on changes, the tracker hands a WaitState to its sink (the
// controller's outbox). Once every blocked thread returned it sends one empty WaitState —
// only if a non-empty one was sent, so fast ops never cost a message.
//
// A rank that spins on Handle::Poll() is as stuck as one in Wait, so polling counts too — but
// only while it goes on: a poll is a lease, not a wait. Polls of one not-done op (Polled) whose
// run spans at least kBlockedAfter register the rank as blocked on the op's name; the
// registration lapses when no poll of the op came for kPollLease (Expire, which the
// controller's send loop calls at the time its last call returned) or when the op completes
// (PollEnded). A rank that polled once and went off to compute is therefore never counted as
// blocked, and one that stopped polling is counted for at most kPollLease more.
//
// Thread-safe: any thread may call any method. The sink and the wake callback are called
// under the tracker's lock (so states leave in order) and must not block or call back.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/messages.h"

namespace troika::internal {

// How long a thread waits on an op that is not done before it counts as blocked. Long enough
// that a training step's ordinary waits (ops completing within milliseconds) report nothing;
// short enough that a deadlock is detected well within a second.
inline constexpr absl::Duration kBlockedAfter = absl::Milliseconds(50);
// How long a registration by polling outlives the op's last poll. A loop that polls a handle
// between chunks of other work stays registered if the chunks are shorter than this; a rank
// that stopped polling (and may be computing what the others wait for) is taken for blocked
// for at most this long — the window in which a rank that polled for a while and then went off
// to compute could be mistaken for a deadlocked one. Half a second keeps that window small
// while covering polling loops far slower than any spin.
inline constexpr absl::Duration kPollLease = absl::Milliseconds(500);
// Handle::Poll tells the tracker about a not-done op at most this often (per op), so a spin
// on Poll costs the op's lock and a clock read, not the tracker's lock. Well below
// kBlockedAfter and kPollLease.
inline constexpr absl::Duration kPollNoticeEvery = absl::Milliseconds(5);

class WaitTracker {
 public:
  using Sink = std::function<void(WaitState)>;

  WaitTracker(int rank, Sink sink) : rank_(rank), sink_(std::move(sink)) {}
  WaitTracker(const WaitTracker&) = delete;
  WaitTracker& operator=(const WaitTracker&) = delete;

  // A thread is now blocked on the op named `name`; pass the token to Unblocked(). Calls the
  // flush (below) again for it.
  uint64_t Blocked(const std::string& name);
  // The ops threads are blocked on now (Blocked and not Unblocked).
  std::vector<std::string> BlockedNames() const;
  // The thread holding `token` stopped waiting (a token of Blocked or BlockedFrom).
  void Unblocked(uint64_t token);
  // A thread of the application began waiting for the op named `name` at `since`, with no
  // thread of Troika's waiting with it (Handle::OnDone's caller_waits: the application's
  // framework completes it by callback). As for a Wait, it counts as blocked once it has
  // waited kBlockedAfter: Expire registers it then (its caller learns when through the wake,
  // below), so fast ops never cost a message. Pass the token to Unblocked().
  uint64_t BlockedFrom(const std::string& name, absl::Time since);
  // Drops the sink: nothing is sent after this returns (the context is shutting down).
  void Detach();

  // The op named `name`, identified by `op` (unique per op, nonzero; OpState::poll_id), was
  // polled at `now` and was not done. Starts a run of polls (or a new one, if the last poll
  // is kPollLease old or more); registers the rank as blocked on `name` once the run spans
  // kBlockedAfter; renews the registration. Allocates only for an op's first poll.
  void Polled(uint64_t op, const std::string& name, absl::Time now);
  // The polled op `op` completed: its run of polls and any registration end now.
  void PollEnded(uint64_t op);
  // Lapses the registrations (and forgets the runs) whose last poll is kPollLease or more
  // before `now`, and registers the waits of BlockedFrom that began kBlockedAfter or more
  // before it. Returns when the next registration lapses if not renewed, or the next such wait
  // is due (InfiniteFuture: none) — when to call Expire again.
  absl::Time Expire(absl::Time now);
  // `wake` is called (under the tracker's lock; it must not block or call back) whenever a
  // registration by polling begins or a wait of BlockedFrom is added, so that whoever calls
  // Expire looks at its result again.
  void SetWake(std::function<void()> wake);
  // A thread is about to wait for (or poll) the op named `name`, which is not done: `flush`
  // (set by the controller; it must not block or call back) sends the requests it holds back
  // at once, and ends a steady-state schedule that would never complete the op.
  void Waiting(const std::string& name);
  void SetFlush(std::function<void(const std::string& name)> flush);

  // A thread saw an op complete (a Wait returned, a Poll found it done, a completion callback
  // of Handle::OnDone is about to run): what is submitted next may depend on the result.
  // Observations() counts them (steady-state schedules keep such submissions out of the collective
  // of what came before, ClientSchedule::Submit).
  void Observed() { observations_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t Observations() const { return observations_.load(std::memory_order_relaxed); }

 private:
  // A run of polls of one not-done op.
  struct PollRun {
    std::string name;
    absl::Time since;      // the run's first poll
    absl::Time last;       // its latest poll
    bool blocked = false;  // registered: polled for at least kBlockedAfter
  };

  // Sends the current wait set if it differs from the last one sent.
  void ReportLocked();

  const int rank_;
  mutable std::mutex mu_;
  // Guarded by mu_.
  Sink sink_;
  std::function<void()> wake_;
  std::function<void(const std::string&)> flush_;
  std::map<uint64_t, std::string> blocked_;  // token -> name
  // BlockedFrom's waits not yet kBlockedAfter old: token -> {name, since}.
  std::map<uint64_t, std::pair<std::string, absl::Time>> waiting_;
  std::map<uint64_t, PollRun> polls_;  // op -> its run of polls
  uint64_t next_token_ = 1;
  std::vector<std::string> reported_;  // the last wait set sent; sorted, distinct
  std::atomic<uint64_t> observations_{0};
};

}  // namespace troika::internal
