#pragma once
// GroupTable: holds the ready tensors of grouped operations (Request.group) until every tensor
// of their group is ready, then hands the whole group back at once, in the order its tensors
// became ready, so the negotiator queues them contiguously and fuses them together.
//
// A group is identified by its name while it is in flight: its first tensor fixes its size,
// its first `size` distinct tensors are its members, and it ends when all of them are ready
// (the name can then be used again, e.g. by the next training step). A tensor beyond `size`
// fails, and so does a member that claims a different size — as part of its group, so the
// group still completes.
//
// Plain state, no threads, no clock. Not thread-safe (the Negotiator owns it).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/messages.h"

namespace troika::coordinator {

// A tensor whose response is decided (agreed, or an error) and waits to be sent.
struct ReadyTensor {
  Response response;
  int64_t bytes = 0;
  absl::Time ready_at;
  bool from_group = false;  // released as part of a complete group: never held back
};

// A held tensor of an incomplete group.
struct HeldTensor {
  std::string group;
  std::string name;
  absl::Time since;
};

class GroupTable {
 public:
  // The first submission of grouped tensor `name` (any rank) arrived, claiming `group` of
  // `size` tensors.
  void Register(const std::string& group, int size, const std::string& name);

  // A tensor of `group` (submitted with group size `size`), registered before, is ready.
  // Returns every tensor of the group, in the order they became ready, once all are; until
  // then holds it and returns nothing. A tensor beyond the group's size comes back at once, as
  // an error; one whose size differs from the group's is held as an error.
  std::vector<ReadyTensor> Add(const std::string& group, int size, ReadyTensor ready);

  // Ends every group; returns what was held (a rank departed: none can complete).
  std::vector<ReadyTensor> TakeAll();

  std::vector<HeldTensor> Held() const;
  bool empty() const { return groups_.empty() && extra_.empty(); }

 private:
  struct Group {
    int size = 0;
    std::vector<std::string> members;  // in order of first submission
    std::vector<ReadyTensor> held;     // in order of readiness
  };

  std::map<std::string, Group> groups_;
  std::set<std::string> extra_;  // names submitted beyond their group's size
};

}  // namespace troika::coordinator
