#pragma once
// HierarchicalCommunicator: the data plane of a group whose ranks span nodes, composed of
// three communicators (built by HierarchicalTransport; design in docs/shm.md):
// - local: shared memory among the ranks of this node (none when this node holds one rank);
// - cross: Gloo among the node leaders, the lowest rank of each node (leaders only; none
//   with one node);
// - flat: Gloo among every rank, for alltoallv and for the collectives set to run flat.
// - Allreduce: allreduce within the node, allreduce between the leaders, broadcast from the
//   leader within the node; above two chunks pipelined chunk by chunk, the leaders' part on a
//   helper thread of the leader (pipelined_allreduce.h). ReduceScatter is that allreduce
//   (every block reduced).
// - Allgatherv: allgather within the node, allgather of the nodes' blocks between leaders,
//   reordered by rank on the leader, broadcast within the node. Where every node's ranks are
//   consecutive (ranks 0..k-1 on the first node, and so on), straight into the output.
// - Broadcast: within the root's node from the root, between leaders from the root's node,
//   within every other node from its leader.
// - Alltoallv: flat (every byte crosses to its own destination once; staging it through the
//   leaders would only add copies). Barrier: local, cross, local.
//
// Errors: the first error (or Abort()) aborts all three, so the peers of every part fail too
// (a dead rank's node-mates through shared memory, the other nodes as the Gloo connections of
// their leaders break); later calls return CANCELLED after Abort(), FAILED_PRECONDITION
// otherwise. Messages name the collective, the rank, the node and the part's own message.
//
// Thread contract: collectives from one thread at a time; Abort() from any thread, at any time.

#include <atomic>
#include <memory>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "libclient/transport/communicator.h"
#include "libclient/transport/hierarchical/node_map.h"

namespace troika::transport {

class HierarchicalCommunicator : public Communicator {
 public:
  struct Parts {
    std::unique_ptr<Communicator> local;  // null when this node holds only this rank
    std::unique_ptr<Communicator> cross;  // null unless this rank leads one of several nodes
    std::unique_ptr<Communicator> flat;
  };
  HierarchicalCommunicator(int rank, NodeMap map, Parts parts, bool hierarchical_allreduce,
                           bool hierarchical_allgather);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(map_.node_of.size()); }
  absl::Status Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  // The flat path passes `in` and `out` on; the hierarchical path reduces in -> out within
  // the node, then on `out` (the pipelined one copies `in` into `out` first).
  absl::Status AllreduceInto(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override;
  absl::Status Allgatherv(const void* in, void* out, std::span<const size_t> recv_bytes) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Alltoallv(const void* in, std::span<const size_t> send_bytes, void* out,
                         std::span<const size_t> recv_bytes) override;
  absl::Status ReduceScatter(void* data, std::span<const size_t> counts, DataType dtype,
                             ReduceOp op) override;
  absl::Status Barrier() override;
  void Abort() override;

 private:
  // Runs `body` unless the communicator is dead; on its error aborts every part and returns
  // the error, naming `op`, the rank and the node.
  absl::Status Run(const char* op, absl::FunctionRef<absl::Status()> body);
  absl::Status HierarchicalAllreduce(const void* in, void* out, size_t count, DataType dtype,
                                     ReduceOp op);
  absl::Status HierarchicalAllgatherv(const void* in, void* out,
                                      std::span<const size_t> recv_bytes);
  // HierarchicalAllgatherv when node-major order is rank order: straight into `out`.
  absl::Status ContiguousAllgatherv(const void* in, void* out, std::span<const size_t> recv_bytes);
  absl::Status HierarchicalBroadcast(void* data, size_t bytes, int root);
  absl::Status HierarchicalBarrier();
  void AbortParts();

  const int rank_;
  const NodeMap map_;
  const int node_;  // this rank's node
  const Parts parts_;
  const bool hierarchical_allreduce_;  // else flat over Gloo
  const bool hierarchical_allgather_;
  const bool contiguous_;             // the nodes' ranks in node order are 0..n-1
  std::atomic<bool> aborted_{false};  // Abort() was called here
  absl::Status failure_;              // the first error; the collective thread only
};

}  // namespace troika::transport
