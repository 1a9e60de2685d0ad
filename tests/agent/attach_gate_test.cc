#include "agent/service/attach_gate.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

std::vector<Membership> NodeMemberships() {
  std::vector<Membership> out;
  for (int rank : {2, 3}) {
    Membership m;
    m.rank = rank;
    m.size = 4;
    m.local_rank = rank - 2;
    out.push_back(m);
  }
  return out;
}

TEST(AttachGateTest, WaitersGetTheirOwnMembershipsOnceTheNodeAttached) {
  AttachGate gate;
  std::vector<int> answered;
  gate.Wait({3}, [&](absl::StatusOr<std::vector<Membership>> m) {
    ASSERT_TRUE(m.ok());
    answered.push_back(m->front().rank);
  });
  EXPECT_TRUE(answered.empty()) << "waits for the upstream attach";
  gate.Complete(NodeMemberships());
  gate.Wait({2}, [&](absl::StatusOr<std::vector<Membership>> m) {
    ASSERT_TRUE(m.ok());
    answered.push_back(m->front().rank);
    EXPECT_EQ(m->front().local_rank, 0);
  });
  EXPECT_THAT(answered, ::testing::ElementsAre(3, 2));
}

TEST(AttachGateTest, FailedAttachFailsEveryWaiterWithTheSameErrorAndOnlyTheFirstOutcomeCounts) {
  AttachGate gate;
  std::vector<absl::Status> errors;
  auto record = [&](absl::StatusOr<std::vector<Membership>> m) { errors.push_back(m.status()); };
  gate.Wait({2}, record);
  gate.Wait({3}, record);
  gate.Complete(absl::DeadlineExceededError("ranks 0-1 did not attach within 60s"));
  gate.Complete(NodeMemberships());
  gate.Wait({2}, record);
  ASSERT_EQ(errors.size(), 3u);
  for (const absl::Status& s : errors) {
    EXPECT_EQ(s, absl::DeadlineExceededError("ranks 0-1 did not attach within 60s"));
  }
}

// The node's attach for a generation completes after that generation already ended (its
// change came down the session the attach opened, and the gate was reset for the next): the
// ranks attaching with the next generation's numbers must not get the ended one's.
TEST(AttachGateTest, TheOutcomeOfAnAttachForAGenerationThatEndedIsDropped) {
  AttachGate gate;
  const uint64_t ended = gate.generation();
  gate.Reset();  // the change reached the node first
  std::vector<int> answered;
  gate.Wait({2}, [&](absl::StatusOr<std::vector<Membership>> m) {
    ASSERT_TRUE(m.ok());
    answered.push_back(m->front().size);
  });
  gate.Complete(NodeMemberships(), ended);
  EXPECT_TRUE(answered.empty()) << "the ended generation's memberships answer no one";
  std::vector<Membership> next = NodeMemberships();
  for (Membership& m : next) m.size = 3;
  gate.Complete(next, gate.generation());
  EXPECT_THAT(answered, ::testing::ElementsAre(3));
}

TEST(AttachGateTest, AfterAResetWaitersWaitForTheNextGenerationsAttach) {
  AttachGate gate;
  gate.Complete(NodeMemberships());
  gate.Reset();  // an elastic job's next generation
  std::vector<int> answered;
  gate.Wait({2}, [&](absl::StatusOr<std::vector<Membership>> m) {
    ASSERT_TRUE(m.ok()) << m.status();
    answered.push_back(m->front().size);
  });
  EXPECT_TRUE(answered.empty()) << "the ended generation's outcome is gone";
  Membership next;
  next.rank = 2;
  next.size = 3;
  gate.Complete(std::vector<Membership>{next});
  EXPECT_THAT(answered, ::testing::ElementsAre(3));
}

// An elastic job changed again before the node's ranks attached: those still waiting for the
// ended generation's attach are answered ABORTED, not later with the next generation's
// memberships of the numbers they asked for (another process's, or none).
TEST(AttachGateTest, AResetAnswersTheEndedGenerationsWaitersAborted) {
  AttachGate gate;
  std::vector<absl::Status> answers;
  gate.Wait({3}, [&](absl::StatusOr<std::vector<Membership>> m) { answers.push_back(m.status()); });
  gate.Reset();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_TRUE(absl::IsAborted(answers[0])) << answers[0];
  EXPECT_THAT(answers[0].message(), ::testing::HasSubstr("membership changed while rank 3"));
  gate.Complete(NodeMemberships());
  EXPECT_EQ(answers.size(), 1u) << "answered once";
}

}  // namespace
}  // namespace troika::agent
