#include "libclient/transport/hierarchical/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libclient/transport/hierarchical/pipelined_allreduce.h"

namespace troika::transport {
namespace {

// True when the nodes' ranks, in node order, are 0..n-1: node-major order is rank order.
bool NodesAreContiguous(const NodeMap& map) {
  int next = 0;
  for (const std::vector<int>& node : map.ranks) {
    for (int r : node) {
      if (r != next++) return false;
    }
  }
  return true;
}

}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(int rank, NodeMap map, Parts parts,
                                                   bool hierarchical_allreduce,
                                                   bool hierarchical_allgather)
    : rank_(rank),
      map_(std::move(map)),
      node_(map_.node_of[rank]),
      parts_(std::move(parts)),
      hierarchical_allreduce_(hierarchical_allreduce),
      hierarchical_allgather_(hierarchical_allgather),
      contiguous_(NodesAreContiguous(map_)) {}

absl::Status HierarchicalCommunicator::Run(const char* op, absl::FunctionRef<absl::Status()> body) {
  const std::string where = absl::StrCat(
      "hierarchical ", op, " failed (rank ", rank_, " of ", size(), ", node '", map_.names[node_],
      "' whose local ranks 0.. are ranks ", absl::StrJoin(map_.ranks[node_], ","), "): ");
  if (!failure_.ok()) {
    if (aborted_.load()) return absl::CancelledError(absl::StrCat(where, failure_.message()));
    return absl::FailedPreconditionError(absl::StrCat(
        where, "the communicator is unusable after an earlier error: ", failure_.message()));
  }
  absl::Status status =
      aborted_.load() ? absl::CancelledError("Abort() was called on this rank") : body();
  if (status.ok()) return status;
  failure_ = absl::Status(status.code(), absl::StrCat(where, status.message()));
  AbortParts();
  return failure_;
}

void HierarchicalCommunicator::AbortParts() {
  for (Communicator* part : {parts_.local.get(), parts_.cross.get(), parts_.flat.get()}) {
    if (part != nullptr) part->Abort();
  }
}

void HierarchicalCommunicator::Abort() {
  aborted_.store(true);
  AbortParts();
}

absl::Status HierarchicalCommunicator::HierarchicalAllreduce(const void* in, void* out,
                                                             size_t count, DataType dtype,
                                                             ReduceOp op) {
  const size_t bytes = count * DataTypeSize(dtype);
  const size_t chunk = std::max<size_t>(kPipelineChunkBytes / DataTypeSize(dtype), 1);
  if (count > 2 * chunk) {
    if (in != out) std::memcpy(out, in, bytes);
    return PipelinedAllreduce(parts_.local.get(), parts_.cross.get(), out, count, dtype, op, chunk);
  }
  if (parts_.local) {
    if (absl::Status s = parts_.local->AllreduceInto(in, out, count, dtype, op); !s.ok()) {
      return s;
    }
  } else if (in != out && bytes > 0) {
    std::memcpy(out, in, bytes);
  }
  if (parts_.cross) {
    if (absl::Status s = parts_.cross->Allreduce(out, count, dtype, op); !s.ok()) return s;
  }
  if (parts_.local) return parts_.local->Broadcast(out, bytes, 0);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Allreduce(void* data, size_t count, DataType dtype,
                                                 ReduceOp op) {
  return AllreduceInto(data, data, count, dtype, op);
}

absl::Status HierarchicalCommunicator::AllreduceInto(const void* in, void* out, size_t count,
                                                     DataType dtype, ReduceOp op) {
  return Run("allreduce", [&] {
    if (!hierarchical_allreduce_) return parts_.flat->AllreduceInto(in, out, count, dtype, op);
    return HierarchicalAllreduce(in, out, count, dtype, op);
  });
}

absl::Status HierarchicalCommunicator::ReduceScatter(void* data, std::span<const size_t> counts,
                                                     DataType dtype, ReduceOp op) {
  return Run("reducescatter", [&] {
    if (counts.size() != static_cast<size_t>(size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(counts.size(), " block counts for ", size(), " ranks"));
    }
    if (!hierarchical_allreduce_) return parts_.flat->ReduceScatter(data, counts, dtype, op);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    return HierarchicalAllreduce(data, data, total, dtype, op);
  });
}

absl::Status HierarchicalCommunicator::ContiguousAllgatherv(const void* in, void* out,
                                                            std::span<const size_t> recv_bytes) {
  // Every node's blocks are consecutive in `out`: gathered in place, no staging.
  const std::vector<int>& mine = map_.ranks[node_];
  std::vector<size_t> node_bytes(map_.nodes(), 0);
  for (int r = 0; r < size(); ++r) node_bytes[map_.node_of[r]] += recv_bytes[r];
  size_t node_at = 0;
  for (int k = 0; k < node_; ++k) node_at += node_bytes[k];
  char* node_out = static_cast<char*>(out) + node_at;
  if (parts_.local) {
    std::vector<size_t> local_bytes;
    for (int r : mine) local_bytes.push_back(recv_bytes[r]);
    if (absl::Status s = parts_.local->Allgatherv(in, node_out, local_bytes); !s.ok()) return s;
  } else if (node_bytes[node_] > 0 && in != node_out) {
    std::memmove(node_out, in, node_bytes[node_]);
  }
  if (parts_.cross) {
    if (absl::Status s = parts_.cross->Allgatherv(node_out, out, node_bytes); !s.ok()) return s;
  }
  const size_t total = std::accumulate(node_bytes.begin(), node_bytes.end(), size_t{0});
  if (parts_.local && map_.nodes() > 1) return parts_.local->Broadcast(out, total, 0);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::HierarchicalAllgatherv(const void* in, void* out,
                                                              std::span<const size_t> recv_bytes) {
  if (contiguous_) return ContiguousAllgatherv(in, out, recv_bytes);
  // The node's blocks, in the order of its ranks, then every node's, in node order.
  const std::vector<int>& mine = map_.ranks[node_];
  std::vector<size_t> local_bytes;
  for (int r : mine) local_bytes.push_back(recv_bytes[r]);
  const size_t node_total = std::accumulate(local_bytes.begin(), local_bytes.end(), size_t{0});
  const size_t total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  std::vector<char> node_blocks(node_total);
  if (parts_.local) {
    if (absl::Status s = parts_.local->Allgatherv(in, node_blocks.data(), local_bytes); !s.ok()) {
      return s;
    }
  } else if (node_total > 0) {
    std::memmove(node_blocks.data(), in, node_total);
  }
  if (mine[0] == rank_) {  // the node's leader: every node's blocks, reordered by rank
    std::vector<size_t> node_bytes(map_.nodes(), 0);
    for (int r = 0; r < size(); ++r) node_bytes[map_.node_of[r]] += recv_bytes[r];
    std::vector<char> all(total);
    if (parts_.cross) {
      if (absl::Status s = parts_.cross->Allgatherv(node_blocks.data(), all.data(), node_bytes);
          !s.ok()) {
        return s;
      }
    } else {
      all = std::move(node_blocks);
    }
    std::vector<size_t> out_at(size() + 1, 0);
    for (int r = 0; r < size(); ++r) out_at[r + 1] = out_at[r] + recv_bytes[r];
    size_t at = 0;
    for (const std::vector<int>& node : map_.ranks) {
      for (int r : node) {
        if (recv_bytes[r] > 0) {
          std::memcpy(static_cast<char*>(out) + out_at[r], &all[at], recv_bytes[r]);
        }
        at += recv_bytes[r];
      }
    }
  }
  if (parts_.local) return parts_.local->Broadcast(out, total, 0);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Allgatherv(const void* in, void* out,
                                                  std::span<const size_t> recv_bytes) {
  return Run("allgatherv", [&] {
    if (recv_bytes.size() != static_cast<size_t>(size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(recv_bytes.size(), " receive sizes for ", size(), " ranks"));
    }
    if (!hierarchical_allgather_) return parts_.flat->Allgatherv(in, out, recv_bytes);
    return HierarchicalAllgatherv(in, out, recv_bytes);
  });
}

absl::Status HierarchicalCommunicator::HierarchicalBroadcast(void* data, size_t bytes, int root) {
  const int root_node = map_.node_of[root];
  if (parts_.local && node_ == root_node) {
    if (absl::Status s = parts_.local->Broadcast(data, bytes, map_.LocalIndex(root)); !s.ok()) {
      return s;
    }
  }
  if (parts_.cross) {
    if (absl::Status s = parts_.cross->Broadcast(data, bytes, root_node); !s.ok()) return s;
  }
  if (parts_.local && node_ != root_node) return parts_.local->Broadcast(data, bytes, 0);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Broadcast(void* data, size_t bytes, int root) {
  return Run("broadcast", [&] {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast root ", root, " is not in [0, ", size(), ")"));
    }
    return HierarchicalBroadcast(data, bytes, root);
  });
}

absl::Status HierarchicalCommunicator::Alltoallv(const void* in, std::span<const size_t> send_bytes,
                                                 void* out, std::span<const size_t> recv_bytes) {
  return Run("alltoallv", [&] { return parts_.flat->Alltoallv(in, send_bytes, out, recv_bytes); });
}

absl::Status HierarchicalCommunicator::HierarchicalBarrier() {
  if (parts_.local) {
    if (absl::Status s = parts_.local->Barrier(); !s.ok()) return s;
  }
  if (parts_.cross) {
    if (absl::Status s = parts_.cross->Barrier(); !s.ok()) return s;
  }
  if (parts_.local) return parts_.local->Barrier();
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Barrier() {
  return Run("barrier", [&] { return HierarchicalBarrier(); });
}

}  // namespace troika::transport
