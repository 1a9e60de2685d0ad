#pragma once
// Aggregator: turns the requests of a node's ranks into what the node's agent sends upstream,
// one request per tensor where it can.
//
// A tensor (matched by name) waits here until every live local rank has submitted it; it then
// goes upstream as ONE compacted request standing for all of them (CompactToWire). If some
// live local rank has not submitted it `window` after the first local arrival, what has arrived
// goes upstream as it is, so the coordinator's stall and mismatch detection sees partial
// arrivals; a late rank's request then goes upstream as soon as it arrives. Requests that
// CompactToWire refuses to combine (they disagree on more than dim 0 and splits) go upstream
// one by one, so the coordinator reports the mismatch. A rank's request is never forwarded
// twice. A window of zero forwards at once whatever has arrived.
//
// A rank stops being live when it leaves (goodbye, exit): its own waiting requests go
// upstream at once, and tensors that waited only for it too.
//
// Plain state, no threads, no clock: callers pass the time. Not thread-safe (NodeRelay locks).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "troika/v1/troika.pb.h"

namespace troika::agent {

class Aggregator {
 public:
  // `ranks`: the node's ranks, all live at first.
  Aggregator(const std::vector<int>& ranks, absl::Duration window);

  // Takes `requests` (arrived at `now`, in order) and appends to `out` what is ready to go
  // upstream, including tensors whose window ended by `now`. ALREADY_EXISTS, taking none of
  // `requests`, if a rank submits a name it already has waiting here. A request from a rank
  // that is not live goes upstream on its own, at once.
  absl::Status Add(std::vector<TensorRequest> requests, absl::Time now, v1::RequestBatch* out);
  // Appends the tensors whose window ended by `now`: what has arrived of them.
  void Expire(absl::Time now, v1::RequestBatch* out);
  // `rank` is no longer live. Appends its waiting requests (with the rest of their tensors'
  // arrivals) and the tensors that now have every live rank's request.
  void RemoveRank(int rank, v1::RequestBatch* out);

  // When Expire() next has work; InfiniteFuture() if no tensor waits.
  absl::Time NextDeadline() const;
  // Requests waiting here, not yet forwarded.
  int waiting() const;

 private:
  struct Tensor {
    std::vector<TensorRequest> waiting;  // arrived, not forwarded, in arrival order
    std::set<int> forwarded;             // ranks whose request went upstream
    uint64_t seq = 0;                    // key in windows_ while the window runs; 0 once late
  };

  // Forwards `tensor`'s waiting requests; the tensor is late from now on.
  void FlushLate(Tensor& tensor, v1::RequestBatch* out);
  // Every live rank has arrived or was forwarded.
  bool Complete(const Tensor& tensor) const;
  // Drops `name` if every live rank was forwarded; forwards the rest first if complete.
  void Settle(const std::string& name, v1::RequestBatch* out);
  static void Emit(std::vector<TensorRequest> requests, v1::RequestBatch* out);

  const absl::Duration window_;
  std::set<int> live_;
  std::map<std::string, Tensor> tensors_;  // by name
  // Tensors whose window runs, in first-arrival order: seq -> (deadline, name).
  std::map<uint64_t, std::pair<absl::Time, std::string>> windows_;
  uint64_t next_seq_ = 1;
};

}  // namespace troika::agent
