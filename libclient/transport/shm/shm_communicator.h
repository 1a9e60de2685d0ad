#pragma once
// ShmCommunicator: the data plane of ranks on one host, through a POSIX shared-memory
// segment that every rank has mapped (built by ShmTransport; design in docs/shm.md).
//
// Every collective moves its data in pieces of at most kBufferBytes per rank through the
// ranks' staging buffers in the segment, with a process-shared barrier between a piece's
// writes and its reads. The two buffers of a slot alternate by phase, so that a rank stages
// the next piece while slower ranks still read the previous one: one barrier per piece for
// copies, two for an allreduce.
// - Allreduce: a reduce-scatter plus an allgather per piece. Each rank stages its input,
//   reduces its own slice straight from the peers' staged copies into its buffer, publishes
//   the reduced slice, and copies the other ranks' reduced slices out. Up to 16 KiB, one
//   barrier instead: every rank stages its tensor and reduces all n copies in rank order.
// - ReduceScatter: each rank stages every other rank's block and reduces its own from the
//   peers' staged copies. Allgatherv, Broadcast, Alltoallv: staged copies (Alltoallv first
//   exchanges every rank's send sizes and checks them against the receivers' expectations).
//
// Errors: the first error aborts the whole group through the segment, so that no peer waits
// for this rank; later calls return CANCELLED if this rank called Abort(), FAILED_PRECONDITION
// otherwise. Messages name the collective and the rank ("shm allreduce failed (rank 1 of 4):
// rank 2 (pid 4711) exited during a collective"): UNAVAILABLE when a peer process exited,
// DEADLINE_EXCEEDED when a wait outlived the timeout (naming the ranks that never arrived),
// INVALID_ARGUMENT for bad arguments, CANCELLED after Abort() on any rank.
//
// Thread contract: collectives from one thread at a time; Abort() from any thread, at any
// time, but not concurrently with destruction.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "libclient/transport/communicator.h"
#include "libclient/transport/shm/shm_segment.h"
#include "libclient/transport/shm/shm_sync.h"

namespace troika::transport {

class ShmCommunicator : public Communicator {
 public:
  // `segment` is mapped by every rank of the group and `sync` watches the peers.
  // `timeout` bounds every wait for the other ranks.
  ShmCommunicator(std::unique_ptr<shm_internal::ShmSegment> segment,
                  std::unique_ptr<shm_internal::ShmSync> sync, int rank, absl::Duration timeout);
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;
  ~ShmCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return segment_->ranks(); }

  absl::Status Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  // Stages from `in` and writes the reduced slices straight to `out`: no copy of in to out.
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

  // How this rank's waits for its peers ended (shm_sync.h); only the collective thread.
  const shm_internal::ShmWaitCounts& wait_counts() const { return sync_->wait_counts(); }

 private:
  // Runs `body` unless the communicator is dead; on any error records it, aborts the group
  // and returns it with the collective and rank in its message.
  template <typename Body>
  absl::Status Run(const char* what, Body&& body);
  // The status of a call made after Abort() or an error.
  absl::Status Rejected(const char* what);
  absl::Status AllreducePiece(const char* in, char* out, size_t count, DataType dtype, ReduceOp op);
  absl::Status AllreduceSmall(const char* in, char* out, size_t count, DataType dtype, ReduceOp op);
  // Waits for every rank.
  absl::Status Step() { return sync_->Barrier(timeout_); }
  // The staging buffer parity of the next phase.
  int NextParity() { return static_cast<int>(phase_++ & 1); }

  // Constant after construction.
  const std::unique_ptr<shm_internal::ShmSegment> segment_;
  const std::unique_ptr<shm_internal::ShmSync> sync_;
  const int rank_;
  const absl::Duration timeout_;

  // Only the collective thread: phases so far, equal on every rank between collectives.
  uint64_t phase_ = 0;

  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};  // error_ is set
  std::mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // the first error; once set, every call fails
};

}  // namespace troika::transport
