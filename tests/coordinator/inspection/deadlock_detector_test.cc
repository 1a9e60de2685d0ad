#include "coordinator/inspection/deadlock_detector.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

std::vector<PendingTensor> Pending(const std::vector<std::string>& names) {
  std::vector<PendingTensor> out;
  for (const std::string& name : names) out.push_back({name, absl::UnixEpoch(), {}});
  return out;
}

TEST(DeadlockDetectorTest, EveryRankBlockedOnPendingTensorsIsADeadlock) {
  DeadlockDetector detector;
  for (int r = 0; r < 3; ++r) detector.Update(r, {"grad/a"});
  detector.Update(3, {"grad/b"});
  std::optional<std::string> message =
      detector.Check(Pending({"grad/a", "grad/b"}), /*departed=*/{}, 4);
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(*message, "deadlock: rank 3 waits for 'grad/b'; ranks 0-2 wait for 'grad/a'");
}

// Rank 0 joined; ranks 1 and 2 wait for tensors each of them alone submitted (e.g. unnamed
// ops whose generated names diverged): they can never join, so rank 0's join never completes.
TEST(DeadlockDetectorTest, ARankInAJoinWhileTheOthersAreBlockedIsADeadlock) {
  DeadlockDetector detector;
  detector.Update(0, {"troika/join"});
  detector.Update(1, {"x.1"});
  detector.Update(2, {"x.2"});
  std::optional<std::string> message = detector.Check(Pending({"x.1", "x.2"}), {}, 3);
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(*message,
            "deadlock: rank 0 waits for 'troika/join'; rank 1 waits for 'x.1'; rank 2 waits for "
            "'x.2'");
  // Every rank in the join: the last join completes it (its response may trail).
  detector.Update(1, {"troika/join"});
  detector.Update(2, {"troika/join"});
  EXPECT_FALSE(detector.Check(Pending({}), {}, 3).has_value());
}

TEST(DeadlockDetectorTest, OneRankNotBlockedIsNoDeadlock) {
  DeadlockDetector detector;
  detector.Update(0, {"a"});
  detector.Update(1, {"a"});
  EXPECT_FALSE(detector.Check(Pending({"a"}), {}, 3).has_value());
  detector.Update(2, {"b"});
  EXPECT_TRUE(detector.Check(Pending({"a", "b"}), {}, 3).has_value());
  detector.Update(2, {});  // rank 2 returned from its wait
  EXPECT_FALSE(detector.AllBlocked({}, 3));
  EXPECT_FALSE(detector.Check(Pending({"a", "b"}), {}, 3).has_value());
}

TEST(DeadlockDetectorTest, WaitingForAnAlreadyNegotiatedTensorIsNoDeadlock) {
  DeadlockDetector detector;
  detector.Update(0, {"a", "b"});
  detector.Update(1, {"b"});
  // "b" is no longer pending: every rank submitted it and it will complete.
  EXPECT_FALSE(detector.Check(Pending({"a"}), {}, 2).has_value());
}

// Seen on a loaded machine: rank 1 finished step k and submitted step k+1's "grad" and
// "loss"; rank 0 still waits for step k's "loss", whose response is on its way. The pending
// "loss" is step k+1's, which rank 0 has not submitted: it is not what rank 0 waits for.
TEST(DeadlockDetectorTest, WaitingForAnEarlierTensorOfAPendingNameIsNoDeadlock) {
  DeadlockDetector detector;
  detector.Update(0, {"loss"});
  detector.Update(1, {"grad"});
  const std::vector<PendingTensor> pending = {{"grad", absl::UnixEpoch(), {0}},
                                              {"loss", absl::UnixEpoch(), {0}}};
  EXPECT_FALSE(detector.Check(pending, {}, 2).has_value());
  // Once rank 0 waits for what it submitted and rank 1 lacks, it is one.
  const std::vector<PendingTensor> crossed = {{"grad", absl::UnixEpoch(), {0}},
                                              {"loss", absl::UnixEpoch(), {1}}};
  EXPECT_TRUE(detector.Check(crossed, {}, 2).has_value());
}

TEST(DeadlockDetectorTest, DepartedRanksAreIgnored) {
  DeadlockDetector detector;
  detector.Update(0, {"a"});
  detector.Update(2, {"a"});
  EXPECT_FALSE(detector.Check(Pending({"a"}), {}, 3).has_value());
  std::optional<std::string> message = detector.Check(Pending({"a"}), {1}, 3);
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(*message, "deadlock: ranks 0, 2 wait for 'a'");
  detector.Forget(0);
  EXPECT_FALSE(detector.Check(Pending({"a"}), {1}, 3).has_value());
  EXPECT_FALSE(detector.AllBlocked({0, 1, 2}, 3)) << "no live rank is no deadlock";
}

TEST(DeadlockDetectorTest, MessageGroupsRanksWithTheSameWaitSetAndQuotesEveryName) {
  DeadlockDetector detector;
  detector.Update(0, {"y", "x", "x"});
  detector.Update(1, {"z"});
  detector.Update(2, {"x", "y"});
  detector.Update(3, {"z"});
  detector.Update(4, {"w"});
  std::optional<std::string> message = detector.Check(Pending({"w", "x", "y", "z"}), {}, 5);
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(*message,
            "deadlock: rank 4 waits for 'w'; ranks 0, 2 wait for 'x', 'y'; ranks 1, 3 wait for "
            "'z'");
}

}  // namespace
}  // namespace troika::coordinator
