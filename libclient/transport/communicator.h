#pragma once
// Communicator: one rank's endpoint of a fixed group of ranks, moving bytes for collectives.
// The interface of every data plane (Gloo over TCP, in-memory, NCCL); it knows nothing of
// gRPC or of negotiation. Collective calls are blocking and must be issued in the same order
// on every rank of the group.
//
// Thread contract: collective calls come from one thread at a time (the executor);
// Abort() may be called from any thread, at any time, and makes any blocked or later
// collective return an error promptly. After any error the communicator is dead: every later
// call fails and the owner must create a new one.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "absl/status/status.h"
#include "common/types.h"

namespace troika::transport {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place elementwise reduction of `count` elements of `dtype` at `data` across the group.
  // `op` is kSum, kMin, kMax or kProduct (averaging is the caller's post-scale).
  virtual absl::Status Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;

  // Out-of-place Allreduce: reduces the `count` elements at `in` across the group into `out`;
  // `in` is only read. `in == out` is Allreduce(out); otherwise they do not overlap. The
  // default copies `in` into `out` and reduces in place; a data plane that can read its
  // input and write its output separately (shared memory, the in-memory fake) overrides it
  // and saves that copy. Same thread contract and errors as Allreduce.
  virtual absl::Status AllreduceInto(const void* in, void* out, size_t count, DataType dtype,
                                     ReduceOp op) {
    if (in != out && count > 0) std::memcpy(out, in, count * DataTypeSize(dtype));
    return Allreduce(out, count, dtype, op);
  }

  // Gathers `recv_bytes[r]` bytes from every rank r into `out`, concatenated in rank order.
  // `in` holds this rank's recv_bytes[rank()] bytes; `in` may alias its place in `out`.
  virtual absl::Status Allgatherv(const void* in, void* out,
                                  std::span<const size_t> recv_bytes) = 0;

  // Copies `bytes` bytes at `data` on `root` to `data` on every rank.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;

  // Sends send_bytes[r] bytes (consecutive blocks of `in`, in rank order) to rank r and
  // receives recv_bytes[r] bytes from rank r into consecutive blocks of `out`.
  // `in` and `out` do not overlap.
  virtual absl::Status Alltoallv(const void* in, std::span<const size_t> send_bytes, void* out,
                                 std::span<const size_t> recv_bytes) = 0;

  // Reduces `data` (sum(counts) elements, identical layout on every rank) across the group;
  // afterwards rank r's block (counts[r] elements starting at sum(counts[0..r))) holds the
  // reduced values. Other blocks are left in an unspecified state.
  virtual absl::Status ReduceScatter(void* data, std::span<const size_t> counts, DataType dtype,
                                     ReduceOp op) = 0;

  virtual absl::Status Barrier() = 0;

  // Unblocks every pending and later collective with an error. Thread-safe, idempotent.
  virtual void Abort() = 0;
};

}  // namespace troika::transport
