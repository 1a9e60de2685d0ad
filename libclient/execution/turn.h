#pragma once
// Turn: which thread runs the executor's entries now, whether entries wait in its queue, and
// whether it closed (aborted or stopping) — one atomic word. A thread that submits a
// scheduled entry and waits for it takes an idle executor's turn with one compare-and-swap
// and gives it back with one atomic operation (Executor::TryClaim, RunClaimed), where it took
// the executor's lock twice on every synchronous call (issue 49).
//
// Thread contract: TryTake and Give from any thread. Every other call is made under the
// executor's lock, which also guards its queue: Queued and Close mark what the queue and the
// executor's state are, TakeQueued takes the turn for the queue's next entry. So the
// executor thread, waiting on that lock's condition for Runnable(), never misses a change:
// a Give that finds queued entries or a close must wake it under the same lock.
//
// Memory order: what a holder wrote before giving the turn back is seen by the next holder
// (Give releases; TryTake and TakeQueued acquire).

#include <atomic>
#include <cstdint>

namespace troika::internal {

class Turn {
 public:
  // Takes the turn if no thread holds it, nothing is queued and the executor is open.
  bool TryTake() {
    uint32_t idle = 0;
    return word_.compare_exchange_strong(idle, kHeld, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }
  // Gives the turn back (its holder only). True if entries are queued or the executor closed:
  // the executor thread must then be woken (under the executor's lock).
  bool Give() { return (word_.fetch_and(~kHeld, std::memory_order_acq_rel) & kPending) != 0; }

  // Under the executor's lock, unless `held()` is false and queued() true: takes the turn for
  // the queue's next entry; `more` says whether entries are still queued after it is taken.
  // (No TryTake succeeds meanwhile: the word is not idle.)
  void TakeQueued(bool more) {
    word_.fetch_or(kHeld, std::memory_order_acq_rel);
    if (!more) word_.fetch_and(~kQueued, std::memory_order_relaxed);
  }
  // Under the executor's lock: whether its queue holds entries now.
  void Queued(bool any) {
    if (any) {
      word_.fetch_or(kQueued, std::memory_order_relaxed);
    } else {
      word_.fetch_and(~kQueued, std::memory_order_relaxed);
    }
  }
  // Under the executor's lock: it aborts or stops; no TryTake succeeds from now on.
  void Close() { word_.fetch_or(kClosed, std::memory_order_relaxed); }

  bool held() const { return (word_.load(std::memory_order_acquire) & kHeld) != 0; }
  bool queued() const { return (word_.load(std::memory_order_acquire) & kQueued) != 0; }
  // No one holds the turn and entries are queued or the executor closed: the executor
  // thread's to take (its wait condition).
  bool Runnable() const {
    const uint32_t w = word_.load(std::memory_order_acquire);
    return (w & kHeld) == 0 && (w & kPending) != 0;
  }

 private:
  static constexpr uint32_t kHeld = 1;
  static constexpr uint32_t kQueued = 2;
  static constexpr uint32_t kClosed = 4;
  static constexpr uint32_t kPending = kQueued | kClosed;
  std::atomic<uint32_t> word_{0};
};

}  // namespace troika::internal
