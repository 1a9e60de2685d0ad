#include "libclient/transport/gloo/gloo_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/unbound_buffer.h"
#include "libclient/transport/argument_checks.h"
#include "libclient/transport/reduce.h"

namespace troika::transport {
namespace {

// Largest piece of a ReduceScatter block in flight at once; each rank keeps kRecvsInFlight
// receive buffers of this size.
constexpr size_t kChunkBytes = 512 * 1024;
constexpr size_t kRecvsInFlight = 2;

// Allreduce uses Gloo's BCUBE (log2(n) exchange steps) up to this size and RING (2(n-1)
// steps, less data per rank) above it. Measured with 3, 4 and 8 ranks on 2 cores over
// loopback: BCUBE takes 0.5-2 ms from 4 KiB to 1 MiB where RING takes 1-20 ms; at 4 MiB they
// tie. BCUBE is slow when there are fewer elements than ranks, so those stay on RING.
constexpr size_t kBcubeMaxBytes = 1 << 20;

// A stand-in for the null pointer of an empty buffer, which Gloo's memcpy calls dislike.
char empty_buffer[1];

void* NonNull(void* p) { return p != nullptr ? p : empty_buffer; }

// Gloo's reduction callback: c = a (op) b, where c usually aliases a.
void GlooReduce(void* c, const void* a, const void* b, size_t n, DataType dtype, ReduceOp op) {
  if (c == a) return ReduceInto(c, b, n, dtype, op);
  if (c == b) return ReduceInto(c, a, n, dtype, op);  // Every op is commutative.
  std::memmove(c, a, n * DataTypeSize(dtype));
  ReduceInto(c, b, n, dtype, op);
}

// Barrier options whose unbound buffer can be handed to the WaitRegistry.
class TrackableBarrierOptions : public ::gloo::BarrierOptions {
 public:
  using ::gloo::BarrierOptions::BarrierOptions;
  ::gloo::transport::UnboundBuffer* unbound_buffer() { return buffer.get(); }
};

// Fails every pending and later transfer on every connection and closes the sockets, using
// only Gloo's public Pair interface: close() shuts the socket but leaves waiting transfers
// waiting, and setSync() on a closed pair fails ("Socket unexpectedly closed") all of the
// pair's pending transfers, waking whoever waits on them, and throws. Thread-safe (every
// step holds the pair's own lock); idempotent.
void FailAllPairs(::gloo::Context& context) noexcept {
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    try {
      std::unique_ptr<::gloo::transport::Pair>& pair = context.getPair(peer);
      if (pair == nullptr) continue;
      pair->close();
      pair->setSync(true, false);
    } catch (const std::exception&) {
      // Expected: the pair now holds that exception, which later transfers rethrow.
    }
  }
}

}  // namespace

namespace gloo_internal {

WaitRegistry::Guard WaitRegistry::Track(Buffers buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  for (::gloo::transport::UnboundBuffer* buffer : buffers) {
    buffers_.push_back(buffer);
    if (aborted_) {
      buffer->abortWaitSend();
      buffer->abortWaitRecv();
    }
  }
  return Guard(*this, std::move(buffers));
}

void WaitRegistry::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  for (::gloo::transport::UnboundBuffer* buffer : buffers_) {
    buffer->abortWaitSend();
    buffer->abortWaitRecv();
  }
}

void WaitRegistry::Remove(const Buffers& buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  for (::gloo::transport::UnboundBuffer* buffer : buffers) {
    buffers_.erase(std::find(buffers_.begin(), buffers_.end(), buffer));
  }
}

}  // namespace gloo_internal

GlooCommunicator::GlooCommunicator(std::shared_ptr<::gloo::Context> context,
                                   std::chrono::milliseconds timeout)
    : context_(std::move(context)), timeout_(timeout) {}

GlooCommunicator::~GlooCommunicator() = default;

template <typename Body>
absl::Status GlooCommunicator::Run(const char* what, Body&& body) {
  auto where = [this] { return absl::StrCat(" (rank ", rank(), " of ", size(), ")"); };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) {
      return absl::CancelledError(
          absl::StrCat("gloo ", what, " rejected", where(), ": the communicator was aborted"));
    }
    if (!error_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gloo ", what, " rejected", where(),
          ": the communicator is unusable after an earlier error: ", error_.message()));
    }
  }
  absl::Status status;
  try {
    status = body();
  } catch (const ::gloo::IoException& e) {
    status = absl::StrContains(e.what(), "Timed out") ? absl::DeadlineExceededError(e.what())
                                                      : absl::UnavailableError(e.what());
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet, bad_alloc...
    status = absl::InternalError(e.what());
  }
  // An aborted wait returns early without an exception: after Abort(), even a collective
  // that seemed to complete may hold partial data.
  if (aborted_) {
    status = absl::CancelledError(
        absl::StrCat("gloo ", what, " aborted", where(), ": Abort() was called"));
  } else if (!status.ok()) {
    status = absl::Status(status.code(),
                          absl::StrCat("gloo ", what, " failed", where(), ": ", status.message()));
  }
  if (status.ok()) return status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = status;
  }
  FailAllPairs(*context_);
  return status;
}

absl::Status GlooCommunicator::Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  return Run("allreduce", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckReduction(dtype, op));
    if (count == 0) return absl::OkStatus();
    const size_t bytes = count * DataTypeSize(dtype);
    // Only the element width matters to Gloo; the reduction function knows the type. Gloo's
    // ring sends a message per segment that holds data, at most one per element: a few
    // elements that fill 2, 4 or 8 bytes go as one wide element (one message per step: a
    // float32 and a schedule's vote cost what one float32 does, docs/PERFORMANCE.md).
    const size_t width = bytes == 2 || bytes == 4 || bytes == 8 ? bytes : DataTypeSize(dtype);
    const size_t per_element = width / DataTypeSize(dtype);  // the type's elements in one
    ::gloo::AllreduceOptions opts(context_);
    opts.setTimeout(timeout_);
    const size_t elements = bytes / width;
    const bool bcube = elements >= static_cast<size_t>(size()) && bytes <= kBcubeMaxBytes;
    opts.setAlgorithm(bcube ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                            : ::gloo::AllreduceOptions::Algorithm::RING);
    auto buffer = context_->createUnboundBuffer(data, bytes);
    auto guard = waits_.Track({buffer.get()});
    switch (width) {
      case 1:
        opts.setOutput<uint8_t>(std::move(buffer));
        break;
      case 2:
        opts.setOutput<uint16_t>(std::move(buffer));
        break;
      case 4:
        opts.setOutput<uint32_t>(std::move(buffer));
        break;
      default:
        opts.setOutput<uint64_t>(std::move(buffer));
        break;
    }
    opts.setReduceFunction(
        [dtype, op, per_element](void* c, const void* a, const void* b, size_t n) {
          GlooReduce(c, a, b, n * per_element, dtype, op);
        });
    ::gloo::allreduce(opts);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::Allgatherv(const void* in, void* out,
                                          std::span<const size_t> recv_bytes) {
  return Run("allgatherv", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckPerRank(recv_bytes, size(), "recv_bytes"));
    size_t offset = 0;
    for (int r = 0; r < rank(); ++r) offset += recv_bytes[r];
    // Place this rank's block ourselves: Gloo would memcpy it even when `in` aliases it.
    char* mine = static_cast<char*>(out) + offset;
    if (recv_bytes[rank()] > 0 && mine != in) std::memmove(mine, in, recv_bytes[rank()]);
    size_t total = 0;
    for (size_t bytes : recv_bytes) total += bytes;
    if (total == 0 || size() == 1) return absl::OkStatus();
    ::gloo::AllgathervOptions opts(context_);
    opts.setTimeout(timeout_);
    auto buffer = context_->createUnboundBuffer(out, total);
    auto guard = waits_.Track({buffer.get()});
    opts.setOutput<uint8_t>(std::move(buffer),
                            std::vector<size_t>(recv_bytes.begin(), recv_bytes.end()));
    ::gloo::allgatherv(opts);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::Broadcast(void* data, size_t bytes, int root) {
  return Run("broadcast", [&]() -> absl::Status {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("root ", root, " is not a rank"));
    }
    if (bytes == 0 || size() == 1) return absl::OkStatus();
    ::gloo::BroadcastOptions opts(context_);
    opts.setTimeout(timeout_);
    opts.setRoot(root);
    auto buffer = context_->createUnboundBuffer(data, bytes);
    auto guard = waits_.Track({buffer.get()});
    opts.setOutput<uint8_t>(std::move(buffer));
    ::gloo::broadcast(opts);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::Alltoallv(const void* in, std::span<const size_t> send_bytes,
                                         void* out, std::span<const size_t> recv_bytes) {
  return Run("alltoallv", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckPerRank(send_bytes, size(), "send_bytes"));
    RETURN_IF_ERROR(CheckPerRank(recv_bytes, size(), "recv_bytes"));
    if (send_bytes[rank()] != recv_bytes[rank()]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sends ", send_bytes[rank()], " bytes to itself but expects ", recv_bytes[rank()]));
    }
    // Every rank takes part even with nothing to move: its peers' zero-byte transfers must
    // still be matched.
    ::gloo::AlltoallvOptions opts(context_);
    opts.setTimeout(timeout_);
    size_t send_total = 0, recv_total = 0;
    for (size_t bytes : send_bytes) send_total += bytes;
    for (size_t bytes : recv_bytes) recv_total += bytes;
    auto in_buffer = context_->createUnboundBuffer(NonNull(const_cast<void*>(in)), send_total);
    auto out_buffer = context_->createUnboundBuffer(NonNull(out), recv_total);
    auto guard = waits_.Track({in_buffer.get(), out_buffer.get()});
    opts.setInput<uint8_t>(std::move(in_buffer),
                           std::vector<int64_t>(send_bytes.begin(), send_bytes.end()));
    opts.setOutput<uint8_t>(std::move(out_buffer),
                            std::vector<int64_t>(recv_bytes.begin(), recv_bytes.end()));
    ::gloo::alltoallv(opts);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::ReduceScatter(void* data, std::span<const size_t> counts,
                                             DataType dtype, ReduceOp op) {
  return Run("reducescatter", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckPerRank(counts, size(), "counts"));
    RETURN_IF_ERROR(CheckReduction(dtype, op));
    return RingReduceScatter(static_cast<char*>(data), counts, dtype, op);
  });
}

// Ring reduce-scatter: in step s (0 <= s < n-1) rank r receives block (r-s-2) mod n from
// rank r-1 and reduces it into its own copy, then forwards that block to rank r+1 in step
// s+1; rank r's own block r is complete after step n-2. Blocks travel in chunks of at most
// kChunkBytes, so a chunk is forwarded as soon as it is reduced while later chunks are still
// arriving. Transfers between two ranks match in order (one slot), so both sides only need
// to enumerate the same chunks in the same order.
absl::Status GlooCommunicator::RingReduceScatter(char* data, std::span<const size_t> counts,
                                                 DataType dtype, ReduceOp op) {
  const int n = size();
  const int r = rank();
  const size_t width = DataTypeSize(dtype);
  std::vector<size_t> offset(n + 1, 0);
  for (int b = 0; b < n; ++b) offset[b + 1] = offset[b] + counts[b] * width;
  if (n == 1 || offset[n] == 0) return absl::OkStatus();

  struct Chunk {
    size_t offset;
    size_t bytes;
    bool forward;  // Forwarded to the next rank once reduced (every step but the last).
  };
  const size_t chunk_bytes = std::max(width, kChunkBytes / width * width);
  auto chunks_of = [&](int block, bool forward, std::vector<Chunk>& chunks) {
    for (size_t o = offset[block]; o < offset[block + 1]; o += chunk_bytes) {
      chunks.push_back({o, std::min(chunk_bytes, offset[block + 1] - o), forward});
    }
  };
  std::vector<Chunk> first_sends;
  chunks_of((r - 1 + n) % n, false, first_sends);
  std::vector<Chunk> recvs;
  for (int s = 0; s + 1 < n; ++s) chunks_of(((r - s - 2) % n + n) % n, s + 2 < n, recvs);

  const int send_to = (r + 1) % n;
  const int recv_from = (r - 1 + n) % n;
  const uint64_t slot = context_->nextSlot();
  auto data_buffer = context_->createUnboundBuffer(data, offset[n]);
  std::vector<char> scratch(kRecvsInFlight * chunk_bytes);
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> tmp;
  gloo_internal::WaitRegistry::Buffers tracked = {data_buffer.get()};
  for (size_t i = 0; i < kRecvsInFlight; ++i) {
    tmp.push_back(context_->createUnboundBuffer(scratch.data() + i * chunk_bytes, chunk_bytes));
    tracked.push_back(tmp.back().get());
  }
  auto guard = waits_.Track(std::move(tracked));
  const absl::Status aborted = absl::CancelledError("a transfer was aborted");

  size_t sends = 0;
  for (const Chunk& c : first_sends) {
    data_buffer->send(send_to, slot, c.offset, c.bytes);
    ++sends;
  }
  for (size_t k = 0; k < std::min(kRecvsInFlight, recvs.size()); ++k) {
    tmp[k]->recv(recv_from, slot, 0, recvs[k].bytes);
  }
  for (size_t k = 0; k < recvs.size(); ++k) {
    auto& buffer = tmp[k % kRecvsInFlight];
    if (!buffer->waitRecv(timeout_)) return aborted;
    ReduceInto(data + recvs[k].offset, buffer->ptr, recvs[k].bytes / width, dtype, op);
    if (k + kRecvsInFlight < recvs.size()) {
      buffer->recv(recv_from, slot, 0, recvs[k + kRecvsInFlight].bytes);
    }
    if (recvs[k].forward) {
      data_buffer->send(send_to, slot, recvs[k].offset, recvs[k].bytes);
      ++sends;
    }
  }
  for (size_t i = 0; i < sends; ++i) {
    if (!data_buffer->waitSend(timeout_)) return aborted;
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Barrier() {
  return Run("barrier", [&]() -> absl::Status {
    TrackableBarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    auto guard = waits_.Track({opts.unbound_buffer()});
    ::gloo::barrier(opts);
    return absl::OkStatus();
  });
}

void GlooCommunicator::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  FailAllPairs(*context_);
  waits_.Abort();
}

}  // namespace troika::transport
