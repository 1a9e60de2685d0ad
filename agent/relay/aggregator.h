#pragma once
// Aggregator: turns the requests of a node's ranks into what the node's agent sends upstream,
// one request per tensor where it can.
//
// A tensor (matched by process set and name) waits here until every live local rank of its
// set has submitted it; it then
// goes upstream as ONE compacted request standing for all of them (CompactToWire). If some
// live local rank has not submitted it `window` after the first local arrival, what has arrived
// goes upstream as it is, so the coordinator's stall and mismatch detection sees partial
// arrivals; a late rank's request then goes upstream as soon as it arrives. Requests that
// CompactToWire refuses to combine (they disagree on more than dim 0 and splits) go upstream
// one by one, so the coordinator reports the mismatch. A rank's request is never forwarded
// twice. A window of zero forwards at once whatever has arrived.
//
// A rank stops being live when it leaves (goodbye, exit): its own waiting requests go
// upstream at once, and tensors that waited only for it too. A rank's join sends its waiting
// requests upstream first: the coordinator must see them before it (the rank is a joined
// one only for what it did not submit).
//
// Process sets: the same name may be in flight in several sets at once (each set has its own
// namespace). A set's local members are known once SetMembers() names them (the relay learns
// them from the AddProcessSet response); until then every live local rank counts as a member,
// so a tensor of that set goes upstream when its window ends.
//
// Plain state, no threads, no clock: callers pass the time. Not thread-safe (NodeRelay locks).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
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

  // Process set `id` (> 0) has the job's ranks `ranks`: only the local ones among them are
  // waited for. RemoveSet(): the set is gone; what waits for it goes upstream now (the
  // coordinator fails it).
  void SetMembers(int id, const std::vector<int>& ranks, v1::RequestBatch* out);
  void RemoveSet(int id, v1::RequestBatch* out);

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

  using Key = std::pair<int, std::string>;  // (process set, tensor name)

  // Forwards `tensor`'s waiting requests; the tensor is late from now on.
  void FlushLate(Tensor& tensor, v1::RequestBatch* out);
  // Every live local member of the tensor's set has arrived or was forwarded.
  bool Complete(const Key& key, const Tensor& tensor) const;
  // Drops `key` if every live member was forwarded; forwards the rest first if complete.
  void Settle(const Key& key, v1::RequestBatch* out);
  // Settles every tensor (after membership changed).
  void SettleAll(v1::RequestBatch* out);
  static void Emit(std::vector<TensorRequest> requests, v1::RequestBatch* out);

  const absl::Duration window_;
  const std::set<int> node_ranks_;
  std::set<int> live_;
  std::map<int, std::set<int>> set_members_;  // local members of the sets named so far
  std::map<Key, Tensor> tensors_;
  // Tensors whose window runs, in first-arrival order: seq -> (deadline, key).
  std::map<uint64_t, std::pair<absl::Time, Key>> windows_;
  uint64_t next_seq_ = 1;
};

}  // namespace troika::agent
