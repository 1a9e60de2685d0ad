// Turn: an idle executor's turn is taken by one compare-and-swap, never while it is held,
// entries are queued or the executor closed; giving it back says whether the executor thread
// must be woken. Under contention exactly one thread holds it at a time, and what a holder
// wrote is seen by the next (the counter below is not atomic: TSan checks the hand-offs).

#include "libclient/execution/turn.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

TEST(TurnTest, AnIdleTurnIsTakenOnceAndGivenBack) {
  Turn turn;
  EXPECT_FALSE(turn.Runnable());
  ASSERT_TRUE(turn.TryTake());
  EXPECT_TRUE(turn.held());
  EXPECT_FALSE(turn.TryTake());
  EXPECT_FALSE(turn.Give());  // nothing queued, open: no wake
  EXPECT_FALSE(turn.held());
  EXPECT_TRUE(turn.TryTake());
}

TEST(TurnTest, QueuedEntriesKeepTheTurnForTheExecutorsQueue) {
  Turn turn;
  turn.Queued(true);
  EXPECT_FALSE(turn.TryTake());  // queued entries run first, in order
  EXPECT_TRUE(turn.Runnable());
  turn.TakeQueued(/*more=*/true);
  EXPECT_TRUE(turn.held());
  EXPECT_TRUE(turn.queued());
  EXPECT_FALSE(turn.Runnable());
  EXPECT_FALSE(turn.TryTake());
  EXPECT_TRUE(turn.Give());  // still queued: wake the executor thread
  turn.TakeQueued(/*more=*/false);
  EXPECT_FALSE(turn.queued());
  EXPECT_FALSE(turn.Give());
  EXPECT_TRUE(turn.TryTake());
}

TEST(TurnTest, AGiveReportsWhatWasQueuedWhileTheTurnWasHeld) {
  Turn turn;
  ASSERT_TRUE(turn.TryTake());
  turn.Queued(true);              // enqueued meanwhile (under the executor's lock)
  EXPECT_FALSE(turn.Runnable());  // held: the executor thread waits
  EXPECT_TRUE(turn.Give());
  EXPECT_TRUE(turn.Runnable());
  turn.Queued(false);  // e.g. an abort dropped the queue
  EXPECT_FALSE(turn.Runnable());
  EXPECT_TRUE(turn.TryTake());
}

TEST(TurnTest, AClosedTurnIsNeverTakenAndItsGiveWakes) {
  Turn turn;
  ASSERT_TRUE(turn.TryTake());
  turn.Close();
  EXPECT_TRUE(turn.Give());  // the executor thread must see the close
  EXPECT_TRUE(turn.Runnable());
  EXPECT_FALSE(turn.TryTake());
}

TEST(TurnTest, ContendedTakesAreExclusiveAndSeeThePreviousHoldersWrites) {
  Turn turn;
  int64_t counter = 0;  // written only by the turn's holder
  std::atomic<int> holders{0};
  std::atomic<bool> overlapped{false};
  constexpr int kThreads = 4, kTakes = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int taken = 0; taken < kTakes;) {
        if (!turn.TryTake()) {
          std::this_thread::yield();
          continue;
        }
        // Relaxed: the overlap check itself must order nothing, or it would hide a turn
        // that does not order its holders' writes.
        if (holders.fetch_add(1, std::memory_order_relaxed) != 0) overlapped = true;
        ++counter;
        holders.fetch_sub(1, std::memory_order_relaxed);
        EXPECT_FALSE(turn.Give());
        ++taken;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(counter, int64_t{kThreads} * kTakes);
}

}  // namespace
}  // namespace troika::internal
