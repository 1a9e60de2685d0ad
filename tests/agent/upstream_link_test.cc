// UpstreamLink: the node's session as named states; every transition is taken from the states
// it names and refused from the others, leaving the state as it was.

#include "agent/node/upstream_link.h"

#include <map>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using State = UpstreamLink::State;

const std::vector<State> kAll = {State::kAttaching, State::kOpen,          State::kReforming,
                                 State::kLeaving,   State::kReincarnating, State::kReconnecting,
                                 State::kResuming,  State::kClosed};

// A link brought to `state` through valid transitions.
UpstreamLink In(State state) {
  UpstreamLink link(absl::Seconds(30));
  auto ok = [](bool moved) { EXPECT_TRUE(moved); };
  switch (state) {
    case State::kAttaching:
      break;
    case State::kOpen:
      ok(link.Opened());
      break;
    case State::kReforming:
      ok(link.Opened());
      ok(link.Reform(true));
      break;
    case State::kLeaving:
      ok(link.Opened());
      ok(link.Reform(false));
      break;
    case State::kReincarnating:
      ok(link.Opened());
      ok(link.Reincarnate());
      break;
    case State::kReconnecting:
      ok(link.Opened());
      ok(link.Lost(absl::Now() + absl::Minutes(1)));
      break;
    case State::kResuming:
      ok(link.Opened());
      ok(link.Lost(absl::Now() + absl::Minutes(1)));
      ok(link.Reattached());
      break;
    case State::kClosed:
      link.Closed();
      break;
  }
  EXPECT_EQ(link.state(), state) << UpstreamLink::Name(state);
  return link;
}

struct Transition {
  const char* name;
  bool (*take)(UpstreamLink&);
  // From -> to, for the states it leaves from; refused from every other.
  std::map<State, State> moves;
};

const Transition kTransitions[] = {
    {"Opened", [](UpstreamLink& l) { return l.Opened(); }, {{State::kAttaching, State::kOpen}}},
    {"AttachFailed",
     [](UpstreamLink& l) { return l.AttachFailed(); },
     {{State::kAttaching, State::kClosed}}},
    {"Reform(survivors)",
     [](UpstreamLink& l) { return l.Reform(true); },
     {{State::kAttaching, State::kReforming},
      {State::kOpen, State::kReforming},
      {State::kResuming, State::kReforming}}},
    {"Reform(none)",
     [](UpstreamLink& l) { return l.Reform(false); },
     {{State::kAttaching, State::kLeaving},
      {State::kOpen, State::kLeaving},
      {State::kResuming, State::kLeaving}}},
    {"ReformClosed",
     [](UpstreamLink& l) { return l.ReformClosed(); },
     {{State::kReforming, State::kAttaching}, {State::kLeaving, State::kClosed}}},
    {"ReformBeforeSession",
     [](UpstreamLink& l) { return l.ReformBeforeSession(); },
     {{State::kAttaching, State::kAttaching},
      {State::kReconnecting, State::kAttaching},
      {State::kResuming, State::kAttaching}}},
    {"Rejoin",
     [](UpstreamLink& l) { return l.Rejoin(); },
     {{State::kClosed, State::kAttaching}, {State::kLeaving, State::kReforming}}},
    {"Reincarnate",
     [](UpstreamLink& l) { return l.Reincarnate(); },
     {{State::kOpen, State::kReincarnating}}},
    {"Reincarnated(goes on)",
     [](UpstreamLink& l) { return l.Reincarnated(true); },
     {{State::kReincarnating, State::kAttaching}}},
    {"Reincarnated(not)",
     [](UpstreamLink& l) { return l.Reincarnated(false); },
     {{State::kReincarnating, State::kClosed}}},
    {"Lost",
     [](UpstreamLink& l) { return l.Lost(absl::Now() + absl::Minutes(1)); },
     {{State::kAttaching, State::kReconnecting},
      {State::kOpen, State::kReconnecting},
      {State::kResuming, State::kReconnecting}}},
    {"Reattached",
     [](UpstreamLink& l) { return l.Reattached(); },
     {{State::kReconnecting, State::kResuming}}},
    {"Resumed", [](UpstreamLink& l) { return l.Resumed(); }, {{State::kResuming, State::kOpen}}},
    {"GaveUp",
     [](UpstreamLink& l) { return l.GaveUp(); },
     {{State::kReconnecting, State::kClosed}, {State::kResuming, State::kClosed}}},
};

TEST(UpstreamLinkTest, EveryTransitionMovesFromItsStatesAndIsRefusedFromTheOthers) {
  for (const Transition& t : kTransitions) {
    for (State from : kAll) {
      UpstreamLink link = In(from);
      const bool moved = t.take(link);
      auto it = t.moves.find(from);
      if (it != t.moves.end()) {
        EXPECT_TRUE(moved) << t.name << " from " << UpstreamLink::Name(from);
        EXPECT_EQ(link.state(), it->second) << t.name << " from " << UpstreamLink::Name(from);
      } else {
        EXPECT_FALSE(moved) << t.name << " from " << UpstreamLink::Name(from) << " is invalid";
        EXPECT_EQ(link.state(), from) << t.name << " refused leaves the state";
      }
    }
  }
}

TEST(UpstreamLinkTest, ClosedIsReachedFromEveryState) {
  for (State from : kAll) {
    UpstreamLink link = In(from);
    link.Closed();
    EXPECT_EQ(link.state(), State::kClosed);
  }
}

TEST(UpstreamLinkTest, AnAttachAnsweredAfterItsSessionBrokeLeavesTheNodeReconnecting) {
  UpstreamLink link(absl::Seconds(30));
  ASSERT_TRUE(link.Lost(absl::Now() + absl::Minutes(1)));  // the session closed at once
  EXPECT_FALSE(link.Opened());                             // the attach's callback, late
  EXPECT_EQ(link.state(), State::kReconnecting);
  EXPECT_FALSE(link.connected());
  EXPECT_TRUE(link.settled());
}

TEST(UpstreamLinkTest, AnEndedGenerationsSessionThatBreaksIsNotResumed) {
  // Its close was not answered before the coordinator went: the node attaches the next
  // generation (waiting for a restarted coordinator) instead of resuming the ended one.
  UpstreamLink link = In(State::kReforming);
  EXPECT_FALSE(link.Lost(absl::Now() + absl::Minutes(1)));
  EXPECT_TRUE(link.ReformClosed());
  EXPECT_EQ(link.state(), State::kAttaching);
}

TEST(UpstreamLinkTest, WhatTheAgentWaitsForInEachState) {
  for (State state : kAll) {
    UpstreamLink link = In(state);
    EXPECT_EQ(link.connected(), state == State::kOpen || state == State::kResuming)
        << UpstreamLink::Name(state);
    EXPECT_EQ(link.settled(), state != State::kAttaching && state != State::kReforming)
        << UpstreamLink::Name(state);
    EXPECT_EQ(link.between_sessions(), state == State::kReconnecting || state == State::kResuming ||
                                           state == State::kReincarnating)
        << UpstreamLink::Name(state);
  }
}

TEST(UpstreamLinkTest, EachAttachHasItsOwnDeadlineAndLostKeepsTheReconnectDeadline) {
  UpstreamLink link(absl::Seconds(30));
  const absl::Time first = link.attach_deadline();
  EXPECT_GE(first, absl::Now() + absl::Seconds(29));
  ASSERT_TRUE(link.Opened());
  absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(link.Reform(true));
  EXPECT_GT(link.attach_deadline(), first) << "the next generation's attach starts now";
  ASSERT_TRUE(link.ReformClosed());
  const absl::Time until = absl::Now() + absl::Minutes(3);
  ASSERT_TRUE(link.Lost(until));
  EXPECT_EQ(link.reconnect_deadline(), until);
}

}  // namespace
}  // namespace troika::agent
