#pragma once
// GlooCommunicator: the CPU data plane over Gloo's TCP transport, built by GlooTransport.
//
// Only Gloo's option-based collectives (gloo::allreduce, allgatherv, broadcast, alltoallv,
// barrier) and unbound-buffer send/recv are used: the legacy algorithm classes shrink the
// socket send buffers of the context and slow every later collective on it ~100x.
// ReduceScatter is a chunked, pipelined ring over unbound buffers that moves (n-1)/n of the
// data, not an allreduce whose other blocks are thrown away.
//
// Errors: Gloo's exceptions never escape; they become a Status whose message names the
// collective and the rank ("gloo allreduce failed (rank 1 of 4): ..."): UNAVAILABLE for a
// network or peer failure, DEADLINE_EXCEEDED when a transfer outlives the timeout,
// INVALID_ARGUMENT for bad arguments, CANCELLED after Abort(). The first error closes every
// connection (so peers fail fast instead of waiting for their timeout) and the communicator
// is dead: later calls return CANCELLED if it was aborted, FAILED_PRECONDITION otherwise.
//
// Thread contract: collectives from one thread at a time; Abort() from any thread, at any
// time, but not concurrently with destruction. Abort() wakes transfers waiting on a peer at
// once; a send already half-written into a full socket buffer (the peer stopped reading
// mid-message) is only released by the transfer timeout.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/base/thread_annotations.h"
#include "gloo/context.h"
#include "libclient/transport/communicator.h"

namespace troika::transport {

class GlooCommunicator : public Communicator {
 public:
  // `context` is fully connected (connectFullMesh). `timeout` bounds every single transfer.
  GlooCommunicator(std::shared_ptr<::gloo::Context> context,
                   std::chrono::milliseconds timeout);
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;
  ~GlooCommunicator() override;

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  absl::Status Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  absl::Status Allgatherv(const void* in, void* out, std::span<const size_t> recv_bytes) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Alltoallv(const void* in, std::span<const size_t> send_bytes, void* out,
                         std::span<const size_t> recv_bytes) override;
  absl::Status ReduceScatter(void* data, std::span<const size_t> counts, DataType dtype,
                             ReduceOp op) override;
  absl::Status Barrier() override;
  void Abort() override;

 private:
  // Runs `body` unless the communicator is dead, converting exceptions to a Status and
  // killing the communicator on any error.
  template <typename Body>
  absl::Status Run(const char* what, Body&& body);
  absl::Status RingReduceScatter(char* data, std::span<const size_t> counts, DataType dtype,
                                 ReduceOp op);

  // Constant after construction.
  const std::shared_ptr<::gloo::Context> context_;
  const std::chrono::milliseconds timeout_;

  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  // The first error; once set, every call fails.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troika::transport
