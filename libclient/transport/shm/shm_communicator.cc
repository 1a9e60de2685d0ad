#include "libclient/transport/shm/shm_communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "libclient/transport/argument_checks.h"
#include "libclient/transport/reduce.h"

namespace troika::transport {
namespace {

using shm_internal::kBufferBytes;

// [begin, end) of rank r's share when `total` items are split evenly over `n` ranks.
std::pair<size_t, size_t> EvenBlock(size_t total, int n, int r) {
  return {total * r / n, total * (r + 1) / n};
}

// The length of the piece at `at` of a block of `total` items cut into pieces of `piece`.
size_t Piece(size_t total, size_t at, size_t piece) {
  return at < total ? std::min(piece, total - at) : 0;
}

// Allreduces up to this size take one barrier instead of two: every rank stages the whole
// tensor and reduces all n staged copies itself, in rank order (so every rank computes the
// same bits). Above it, reducing n copies everywhere costs more than the second barrier.
constexpr size_t kOneBarrierBytes = 16 * 1024;

// Each rank's region of a staging buffer when it is split by destination rank: 64-byte
// aligned, so a multiple of every element size.
size_t RegionBytes(int n) { return kBufferBytes / n / 64 * 64; }

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

std::vector<size_t> Offsets(std::span<const size_t> sizes) {
  std::vector<size_t> offsets(sizes.size() + 1, 0);
  for (size_t q = 0; q < sizes.size(); ++q) offsets[q + 1] = offsets[q] + sizes[q];
  return offsets;
}

}  // namespace

ShmCommunicator::ShmCommunicator(std::unique_ptr<shm_internal::ShmSegment> segment,
                                 std::unique_ptr<shm_internal::ShmSync> sync, int rank,
                                 absl::Duration timeout)
    : segment_(std::move(segment)), sync_(std::move(sync)), rank_(rank), timeout_(timeout) {}

ShmCommunicator::~ShmCommunicator() = default;

template <typename Body>
absl::Status ShmCommunicator::Run(const char* what, Body&& body) {
  // The healthy path takes no lock and builds no string: a tiny collective costs little more
  // than its barrier.
  if (aborted_.load(std::memory_order_acquire) || failed_.load(std::memory_order_acquire)) {
    return Rejected(what);
  }
  absl::Status status = sync_->AbortStatus();  // a peer may have failed meanwhile
  if (status.ok()) status = body();
  if (status.ok()) return status;
  const std::string where = absl::StrCat(" (rank ", rank_, " of ", size(), ")");
  if (aborted_) {
    status =
        absl::CancelledError(absl::StrCat("shm ", what, " aborted", where, ": Abort() was called"));
  } else {
    status = absl::Status(status.code(),
                          absl::StrCat("shm ", what, " failed", where, ": ", status.message()));
  }
  sync_->Abort(status);  // no peer may wait for this rank; a no-op if the group is aborted
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = status;
  failed_.store(true, std::memory_order_release);
  return status;
}

absl::Status ShmCommunicator::Rejected(const char* what) {
  const std::string where = absl::StrCat(" (rank ", rank_, " of ", size(), ")");
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) {
    return absl::CancelledError(
        absl::StrCat("shm ", what, " rejected", where, ": the communicator was aborted"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("shm ", what, " rejected", where,
                   ": the communicator is unusable after an earlier error: ", error_.message()));
}

absl::Status ShmCommunicator::Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  return AllreduceInto(data, data, count, dtype, op);
}

absl::Status ShmCommunicator::AllreduceInto(const void* in, void* out, size_t count, DataType dtype,
                                            ReduceOp op) {
  return Run("allreduce", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckReduction(dtype, op));
    const size_t width = DataTypeSize(dtype);
    if (size() == 1) {
      if (in != out) Copy(out, in, count * width);
      return absl::OkStatus();
    }
    const char* from = static_cast<const char*>(in);
    char* to = static_cast<char*>(out);
    if (count > 0 && count * width <= kOneBarrierBytes) {
      return AllreduceSmall(from, to, count, dtype, op);
    }
    const size_t per_piece = kBufferBytes / width;
    for (size_t at = 0; at < count; at += per_piece) {
      RETURN_IF_ERROR(AllreducePiece(from + at * width, to + at * width,
                                     std::min(per_piece, count - at), dtype, op));
    }
    return absl::OkStatus();
  });
}

absl::Status ShmCommunicator::AllreduceSmall(const char* in, char* out, size_t count,
                                             DataType dtype, ReduceOp op) {
  const size_t bytes = count * DataTypeSize(dtype);
  const int p = NextParity();
  Copy(segment_->buffer(rank_, p), in, bytes);
  RETURN_IF_ERROR(Step());
  Copy(out, segment_->buffer(0, p), bytes);
  for (int q = 1; q < size(); ++q) ReduceInto(out, segment_->buffer(q, p), count, dtype, op);
  return absl::OkStatus();
}

// Stage every slice of `in` but this rank's own; reduce the own slice from `in` and the
// peers' staged copies into `out` and publish it; then copy the peers' reduced slices out.
// `in` is only read (it may be `out`).
absl::Status ShmCommunicator::AllreducePiece(const char* in, char* out, size_t count,
                                             DataType dtype, ReduceOp op) {
  const int n = size();
  const size_t w = DataTypeSize(dtype);
  const int p = NextParity();
  char* mine = segment_->buffer(rank_, p);
  const auto [begin, end] = EvenBlock(count, n, rank_);
  Copy(mine, in, begin * w);
  Copy(mine + end * w, in + end * w, (count - end) * w);
  RETURN_IF_ERROR(Step());
  if (in != out) Copy(out + begin * w, in + begin * w, (end - begin) * w);
  for (int q = 0; q < n; ++q) {
    if (q == rank_ || end == begin) continue;
    ReduceInto(out + begin * w, segment_->buffer(q, p) + begin * w, end - begin, dtype, op);
  }
  Copy(mine + begin * w, out + begin * w, (end - begin) * w);
  RETURN_IF_ERROR(Step());
  for (int q = 0; q < n; ++q) {
    if (q == rank_) continue;
    const auto [qbegin, qend] = EvenBlock(count, n, q);
    Copy(out + qbegin * w, segment_->buffer(q, p) + qbegin * w, (qend - qbegin) * w);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Allgatherv(const void* in, void* out,
                                         std::span<const size_t> recv_bytes) {
  return Run("allgatherv", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckPerRank(recv_bytes, size(), "recv_bytes"));
    const std::vector<size_t> offset = Offsets(recv_bytes);
    char* all = static_cast<char*>(out);
    char* mine = all + offset[rank_];
    if (recv_bytes[rank_] > 0 && mine != in) std::memmove(mine, in, recv_bytes[rank_]);
    const size_t most = *std::max_element(recv_bytes.begin(), recv_bytes.end());
    if (size() == 1) return absl::OkStatus();
    for (size_t at = 0; at < most; at += kBufferBytes) {
      const int p = NextParity();
      Copy(segment_->buffer(rank_, p), mine + at, Piece(recv_bytes[rank_], at, kBufferBytes));
      RETURN_IF_ERROR(Step());
      for (int q = 0; q < size(); ++q) {
        if (q == rank_) continue;
        Copy(all + offset[q] + at, segment_->buffer(q, p), Piece(recv_bytes[q], at, kBufferBytes));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status ShmCommunicator::Broadcast(void* data, size_t bytes, int root) {
  return Run("broadcast", [&]() -> absl::Status {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("root ", root, " is not a rank"));
    }
    if (size() == 1) return absl::OkStatus();
    char* buffer = static_cast<char*>(data);
    for (size_t at = 0; at < bytes; at += kBufferBytes) {
      const int p = NextParity();
      const size_t len = std::min(kBufferBytes, bytes - at);
      if (rank_ == root) Copy(segment_->buffer(root, p), buffer + at, len);
      RETURN_IF_ERROR(Step());
      if (rank_ != root) Copy(buffer + at, segment_->buffer(root, p), len);
    }
    return absl::OkStatus();
  });
}

absl::Status ShmCommunicator::Alltoallv(const void* in, std::span<const size_t> send_bytes,
                                        void* out, std::span<const size_t> recv_bytes) {
  return Run("alltoallv", [&]() -> absl::Status {
    const int n = size();
    RETURN_IF_ERROR(CheckPerRank(send_bytes, n, "send_bytes"));
    RETURN_IF_ERROR(CheckPerRank(recv_bytes, n, "recv_bytes"));
    if (send_bytes[rank_] != recv_bytes[rank_]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sends ", send_bytes[rank_], " bytes to itself but expects ", recv_bytes[rank_]));
    }
    const std::vector<size_t> send_offset = Offsets(send_bytes);
    const std::vector<size_t> recv_offset = Offsets(recv_bytes);
    const char* from = static_cast<const char*>(in);
    char* to = static_cast<char*>(out);
    Copy(to + recv_offset[rank_], from + send_offset[rank_], send_bytes[rank_]);
    if (n == 1) return absl::OkStatus();
    // Every rank learns every send size: the number of pieces, and a check of this rank's
    // expectations.
    const int sp = NextParity();
    std::copy(send_bytes.begin(), send_bytes.end(), segment_->send_sizes(rank_, sp));
    RETURN_IF_ERROR(Step());
    size_t most = 0;
    for (int s = 0; s < n; ++s) {
      const uint64_t* sizes = segment_->send_sizes(s, sp);
      for (int d = 0; d < n; ++d) {
        if (d != s) most = std::max<size_t>(most, sizes[d]);
      }
      if (s != rank_ && sizes[rank_] != recv_bytes[s]) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", s, " sends ", sizes[rank_],
                                                       " bytes to rank ", rank_, ", which expects ",
                                                       recv_bytes[s]));
      }
    }
    const size_t region = RegionBytes(n);
    for (size_t at = 0; at < most; at += region) {
      const int p = NextParity();
      char* mine = segment_->buffer(rank_, p);
      for (int d = 0; d < n; ++d) {
        if (d == rank_) continue;
        Copy(mine + d * region, from + send_offset[d] + at, Piece(send_bytes[d], at, region));
      }
      RETURN_IF_ERROR(Step());
      for (int q = 0; q < n; ++q) {
        if (q == rank_) continue;
        Copy(to + recv_offset[q] + at, segment_->buffer(q, p) + rank_ * region,
             Piece(recv_bytes[q], at, region));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status ShmCommunicator::ReduceScatter(void* data, std::span<const size_t> counts,
                                            DataType dtype, ReduceOp op) {
  return Run("reducescatter", [&]() -> absl::Status {
    const int n = size();
    RETURN_IF_ERROR(CheckPerRank(counts, n, "counts"));
    RETURN_IF_ERROR(CheckReduction(dtype, op));
    if (n == 1) return absl::OkStatus();
    const size_t w = DataTypeSize(dtype);
    const std::vector<size_t> offset = Offsets(counts);
    const size_t most = *std::max_element(counts.begin(), counts.end());
    const size_t region = RegionBytes(n) / w;  // elements
    char* bytes = static_cast<char*>(data);
    for (size_t at = 0; at < most; at += region) {
      const int p = NextParity();
      char* mine = segment_->buffer(rank_, p);
      for (int q = 0; q < n; ++q) {
        if (q == rank_) continue;
        Copy(mine + q * region * w, bytes + (offset[q] + at) * w, Piece(counts[q], at, region) * w);
      }
      RETURN_IF_ERROR(Step());
      const size_t len = Piece(counts[rank_], at, region);
      for (int q = 0; q < n && len > 0; ++q) {
        if (q == rank_) continue;
        ReduceInto(bytes + (offset[rank_] + at) * w, segment_->buffer(q, p) + rank_ * region * w,
                   len, dtype, op);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status ShmCommunicator::Barrier() {
  return Run("barrier", [&] { return Step(); });
}

void ShmCommunicator::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  sync_->Abort(absl::CancelledError(absl::StrCat("Abort() was called on rank ", rank_)));
}

}  // namespace troika::transport
