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
// Abort() closes every connection (failing the transfers Gloo tracks as pending) and also
// wakes every wait on the unbound buffers this class creates, because Gloo does not fail a
// send it has already queued, nor a receive already half-read, when a connection breaks.
// A peer of a failed or aborted rank usually fails as soon as its connection breaks, but a
// transfer of that kind waits for the transfer timeout, or for Abort() on the peer too
// (which the job's failure handling calls). Only a receive half-read into the scratch buffer
// inside gloo::allreduce (rare) is beyond Abort()'s reach and waits for the timeout.
//
// Thread contract: collectives from one thread at a time; Abort() from any thread, at any
// time, but not concurrently with destruction.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "libclient/transport/communicator.h"

namespace troika::transport {

namespace gloo_internal {

// The unbound buffers of the collective in progress, so that Abort() can wake their waits.
// Thread-safe.
class WaitRegistry {
 public:
  using Buffers = std::vector<::gloo::transport::UnboundBuffer*>;
  // Tracks `buffers` until the returned guard is destroyed, which must happen before the
  // buffers are. After Abort(), newly tracked buffers are aborted at once.
  class Guard;
  [[nodiscard]] Guard Track(Buffers buffers);
  // Wakes every current and later wait on tracked buffers (they return false).
  void Abort();

 private:
  void Remove(const Buffers& buffers);

  std::mutex mu_;
  Buffers buffers_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

class WaitRegistry::Guard {
 public:
  Guard(WaitRegistry& registry, Buffers buffers)
      : registry_(registry), buffers_(std::move(buffers)) {}
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  ~Guard() { registry_.Remove(buffers_); }

 private:
  WaitRegistry& registry_;
  const Buffers buffers_;
};

}  // namespace gloo_internal

class GlooCommunicator : public Communicator {
 public:
  // `context` is fully connected (connectFullMesh). `timeout` bounds every single transfer.
  GlooCommunicator(std::shared_ptr<::gloo::Context> context, std::chrono::milliseconds timeout);
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
  gloo_internal::WaitRegistry waits_;
  std::mutex mu_;
  // The first error; once set, every call fails.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troika::transport
