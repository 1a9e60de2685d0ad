#pragma once
// RequestCache: this rank's half of the coordinator's response cache (coordinator/
// response_cache.h, docs/protocol.md). It remembers, per tensor name, the request this rank
// submitted when the coordinator gave that tensor a cache id; a later identical request goes
// up as the id alone. It follows the coordinator's decisions and makes none: ids are learned
// from responses and dropped when the coordinator says they ended.
//
// Thread-safe: the controller's sender thread compresses, its receiver thread applies what
// comes down.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/messages.h"

namespace troika::internal {

class RequestCache {
 public:
  // What to send for `request` (about to go up): its cache id alone when the coordinator
  // assigned one to an identical request of this rank, else the request itself.
  TensorRequest Compress(const TensorRequest& request);

  // Applies a message that came down, in the protocol's order: restores the names of
  // responses sent as ids, records the ids the responses assign, then forgets ended ids.
  // Appends to `resend` the full requests the coordinator asked `rank` to send again.
  // INTERNAL if a response names an id this rank never learned (a protocol violation).
  absl::Status Apply(int rank, DownMessage& message, std::vector<TensorRequest>* resend);

  // Steady-state schedules: for each tensor of `schedule`, this rank's request under the
  // cache id the schedule names it by, where this rank knows that id for that name.
  std::map<std::string, TensorRequest> Expected(const Schedule& schedule) const;
  // The request sent for `name` will get no response: a schedule took it.
  void Absorbed(const std::string& name);

  // Ids known now (for tests and diagnostics).
  int size() const;

 private:
  struct Sent {
    TensorRequest request;  // in full
    int32_t as_id = 0;      // the id it went up as; 0: in full
  };
  struct Known {
    TensorRequest request;
    int32_t id = 0;
  };

  void ForgetLocked(int32_t id);

  mutable std::mutex mu_;
  // Guarded by mu_.
  std::map<std::string, Sent> in_flight_;  // by name, until its response comes down
  std::map<std::string, Known> known_;     // by name
  std::map<int32_t, std::string> names_;   // id -> name, for every id in known_
};

}  // namespace troika::internal
