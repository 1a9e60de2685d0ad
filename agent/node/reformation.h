#pragma once
// Reformation: a job that is not elastic forming anew on this node (docs/agent.md, "Shutting
// down and attaching again"). Its ranks ask to attach again one by one; each ask is attached
// upstream and answered with its memberships; once every rank of the node is, the re-formation
// is complete and its memberships wait, held here, until the ended incarnation's session has
// closed. Each re-formation has a number, so that an answer to one that was given up is told
// apart from the next one's. Plain state: not thread-safe (the Agent's lock guards it).

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "troika/types.h"

namespace troika::agent {

class Reformation {
 public:
  // `labels`: every rank of the node.
  void Start(std::vector<int> labels) { labels_ = std::move(labels); }

  // Ranks ask to attach again: the number of the re-formation they join, and whether they
  // began it (the first to ask since the last one ended).
  struct Ask {
    uint64_t id = 0;
    bool began = false;
  };
  Ask Asked();

  // The upstream answered an attach of re-formation `id`:
  //   kStale     not the re-formation in progress (it ended or was given up): ignore;
  //   kWaiting   recorded; other ranks of the node have not been answered yet;
  //   kComplete  every rank attached: `*all` holds their memberships in label order;
  //   kFailed    the attach failed (the answer's status says why).
  // Complete and failed end the re-formation.
  enum class Outcome { kStale, kWaiting, kComplete, kFailed };
  Outcome Answered(uint64_t id, const absl::StatusOr<std::vector<Membership>>& memberships,
                   std::vector<Membership>* all);
  bool in_progress() const { return current_.has_value(); }

  // The complete re-formation's memberships, held while the ended incarnation's session closes.
  void Hold(std::vector<Membership> memberships) { held_ = std::move(memberships); }
  std::vector<Membership> TakeHeld();

 private:
  struct Current {
    uint64_t id = 0;
    std::map<int, Membership> attached;  // by rank (a job formed anew keeps its numbers)
  };
  std::vector<int> labels_;
  std::optional<Current> current_;
  uint64_t count_ = 0;
  std::vector<Membership> held_;
};

}  // namespace troika::agent
