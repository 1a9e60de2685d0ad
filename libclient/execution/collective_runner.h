#pragma once
// CollectiveRunner: executes one negotiated response on the data plane for this rank's
// entries — packing fused allreduces into the fusion buffer with their scaling, sizing and
// filling handle-owned outputs, and unpacking results.
//
// Not thread-safe: owned by the executor thread.

#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/messages.h"
#include "libclient/execution/fusion_buffer.h"
#include "libclient/execution/output_pool.h"
#include "libclient/handles/op_state.h"
#include "libclient/transport/communicator.h"

namespace troika::internal {

// An allreduce of at most this many bytes carries its vote (steady-state schedules,
// docs/protocol.md) in trailing elements of the fusion buffer, scheduled or not, so that both
// move the same bytes; a larger one, only when scheduled, votes in a 4-byte allreduce first.
inline constexpr size_t kInlineVoteBytes = size_t{1} << 20;

class CollectiveRunner {
 public:
  explicit CollectiveRunner(OutputPool& outputs) : outputs_(outputs) {}

  // A scheduled allreduce's vote: in, this rank's; out, the ranks' combined vote (void if
  // any rank voted void). A void allreduce writes no output.
  enum class Vote { kGo, kVoid };

  // `entries[i]` is this rank's entry for response.names[i]. Runs on `comm`, the
  // communicator of the response's process set (ranks, roots and averaging are the set's).
  // Writes outputs; does not complete the handles. A non-OK status is a data-plane failure.
  // `vote`: non-null for a scheduled allreduce (entries without input contribute zeros).
  absl::Status Run(transport::Communicator& comm, const Response& response,
                   absl::Span<Entry> entries, Vote* vote = nullptr);
  // A vote alone, in a 4-byte allreduce on `comm`: a large scheduled allreduce's before its
  // data moves, and a scheduled GPU allreduce's before it is issued on the device.
  static absl::Status CombineVotes(transport::Communicator& comm, Vote* vote);

  // What the last Run did, for ExecReports: when the fused input was in place and when the
  // collective ended (InfinitePast: not an allreduce, or not timed), and the bytes it
  // allreduced.
  struct Marks {
    absl::Time copied_in = absl::InfinitePast();
    absl::Time reduced = absl::InfinitePast();
    int64_t allreduce_bytes = 0;
  };
  const Marks& marks() const { return marks_; }
  // Before a Run; `timed`: whether it reads the clock for the marks' times.
  void ResetMarks(bool timed) {
    marks_ = {};
    timed_ = timed;
  }

 private:
  absl::Status Allreduce(const Response& response, absl::Span<Entry> entries, Vote* vote);
  absl::Status Allgather(const Response& response, Entry& entry);
  absl::Status Broadcast(const Response& response, Entry& entry);
  absl::Status Alltoall(const Response& response, Entry& entry);
  absl::Status Reducescatter(const Response& response, Entry& entry);

  // A handle-owned result of `bytes` bytes for `e`.
  uint8_t* Output(Entry& e, size_t bytes) {
    return e.state->SetOutput(outputs_.Acquire(bytes), bytes);
  }
  // Where `e`'s result of `bytes` bytes (shaped `shape`) goes: the caller's buffer if it asked
  // for that and it has room (the handle's output() is then that pointer), else a handle-owned
  // one. A caller's buffer too small gives a handle-owned one if e.owned_if_too_small, else sets
  // e.outcome (OUT_OF_RANGE, needed vs given bytes) and gives a scratch buffer, kept alive by
  // `*scratch`, to receive into and discard — or null if `scratch` is null (the result need not be
  // received anywhere). The rank takes part in the collective either way, so the other ranks never
  // wait for it.
  uint8_t* Result(Entry& e, size_t bytes, const std::vector<int64_t>& shape,
                  std::shared_ptr<uint8_t>* scratch);

  transport::Communicator* comm_ = nullptr;  // during Run()
  OutputPool& outputs_;
  FusionBuffer fusion_;
  Marks marks_;
  bool timed_ = true;
  absl::Time Mark() const { return timed_ ? absl::Now() : absl::InfinitePast(); }
};

}  // namespace troika::internal
