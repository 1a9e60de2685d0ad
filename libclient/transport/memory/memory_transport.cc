#include "libclient/transport/memory/memory_transport.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "libclient/transport/memory/memory_group.h"
#include "libclient/transport/reduce.h"

namespace troika::transport {
namespace {

using memory_internal::Call;
using memory_internal::Group;

// [begin, end) of rank r's share when `total` items are split evenly over `n` ranks.
std::pair<size_t, size_t> EvenBlock(size_t total, int n, int r) {
  return {total * r / n, total * (r + 1) / n};
}

// Debian's Abseil has its own string_view, which StrCat does not take from std::string_view.
std::string Name(CollectiveType kind) { return std::string(CollectiveName(kind)); }

size_t PrefixSum(std::span<const size_t> v, int end) {
  return std::accumulate(v.begin(), v.begin() + end, size_t{0});
}

bool SameSizes(std::span<const size_t> a, std::span<const size_t> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

class MemoryCommunicator : public Communicator {
 public:
  MemoryCommunicator(std::shared_ptr<Group> group, int rank, absl::Duration timeout)
      : group_(std::move(group)), rank_(rank), timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  absl::Status Allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override {
    return AllreduceInto(data, data, count, dtype, op);
  }

  // Each rank reduces its block from every rank's input into its output, then copies the
  // other blocks from their owners' outputs. An input is only read (it may be the output).
  absl::Status AllreduceInto(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override {
    const Call call{.kind = CollectiveType::kAllreduce,
                    .in = in,
                    .out = out,
                    .count = count,
                    .dtype = dtype,
                    .op = op};
    return Run(call, [&]() -> absl::Status {
      const size_t width = DataTypeSize(dtype);
      char* mine = static_cast<char*>(out);
      const auto [begin, end] = EvenBlock(count, size(), rank_);
      if (in != out && end > begin) {
        std::memcpy(mine + begin * width, static_cast<const char*>(in) + begin * width,
                    (end - begin) * width);
      }
      for (int q = 0; q < size(); ++q) {
        if (q == rank_) continue;
        const char* theirs = static_cast<const char*>(group_->call(q).in);
        ReduceInto(mine + begin * width, theirs + begin * width, end - begin, dtype, op);
      }
      RETURN_IF_ERROR(group_->Arrive(rank_, timeout_));
      for (int q = 0; q < size(); ++q) {
        if (q == rank_) continue;
        const auto [qbegin, qend] = EvenBlock(count, size(), q);
        const char* theirs = static_cast<const char*>(group_->call(q).out);
        std::memcpy(mine + qbegin * width, theirs + qbegin * width, (qend - qbegin) * width);
      }
      return absl::OkStatus();
    });
  }

  absl::Status Allgatherv(const void* in, void* out, std::span<const size_t> recv_bytes) override {
    const Call call{.kind = CollectiveType::kAllgather, .in = in, .out = out, .sizes = recv_bytes};
    return Run(call, [&]() -> absl::Status {
      for (int q = 0; q < size(); ++q) {
        char* dst = static_cast<char*>(out) + PrefixSum(recv_bytes, q);
        const void* src = group_->call(q).in;
        if (recv_bytes[q] > 0 && dst != src) std::memmove(dst, src, recv_bytes[q]);
      }
      return absl::OkStatus();
    });
  }

  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    const Call call{.kind = CollectiveType::kBroadcast, .out = data, .count = bytes, .root = root};
    return Run(call, [&]() -> absl::Status {
      if (rank_ != root && bytes > 0) std::memcpy(data, group_->call(root).out, bytes);
      return absl::OkStatus();
    });
  }

  absl::Status Alltoallv(const void* in, std::span<const size_t> send_bytes, void* out,
                         std::span<const size_t> recv_bytes) override {
    const Call call{.kind = CollectiveType::kAlltoall,
                    .in = in,
                    .out = out,
                    .sizes = recv_bytes,
                    .send_sizes = send_bytes};
    return Run(call, [&]() -> absl::Status {
      for (int q = 0; q < size(); ++q) {
        const Call& theirs = group_->call(q);
        const char* src = static_cast<const char*>(theirs.in) + PrefixSum(theirs.send_sizes, rank_);
        char* dst = static_cast<char*>(out) + PrefixSum(recv_bytes, q);
        if (recv_bytes[q] > 0) std::memcpy(dst, src, recv_bytes[q]);
      }
      return absl::OkStatus();
    });
  }

  absl::Status ReduceScatter(void* data, std::span<const size_t> counts, DataType dtype,
                             ReduceOp op) override {
    const Call call{.kind = CollectiveType::kReducescatter,
                    .out = data,
                    .dtype = dtype,
                    .op = op,
                    .sizes = counts};
    return Run(call, [&]() -> absl::Status {
      const size_t width = DataTypeSize(dtype);
      const size_t offset = PrefixSum(counts, rank_) * width;
      for (int q = 0; q < size(); ++q) {
        if (q == rank_) continue;
        const char* theirs = static_cast<const char*>(group_->call(q).out);
        ReduceInto(static_cast<char*>(data) + offset, theirs + offset, counts[rank_], dtype, op);
      }
      return absl::OkStatus();
    });
  }

  absl::Status Barrier() override {
    return Run(Call{.kind = CollectiveType::kBarrier}, [] { return absl::OkStatus(); });
  }

  void Abort() override {
    group_->Break(absl::CancelledError(absl::StrCat("aborted by rank ", rank_)));
  }

 private:
  // Publishes `call`, waits for every rank, checks that all calls match, runs `body` (which
  // may use further barriers), then waits until no rank reads this rank's buffers any more.
  template <typename Body>
  absl::Status Run(const Call& call, Body body) {
    absl::Status status = CheckLocal(call);
    if (status.ok()) status = group_->Publish(rank_, call);
    if (status.ok()) status = group_->Arrive(rank_, timeout_);
    if (status.ok()) status = CheckAgreement();
    if (status.ok()) status = body();
    if (status.ok()) status = group_->Arrive(rank_, timeout_);
    if (status.ok()) {
      group_->Leave(rank_, /*drain=*/false);
      return status;
    }
    group_->Break(status);  // No-op if the group was already broken.
    group_->Leave(rank_, /*drain=*/true);
    return absl::Status(status.code(),
                        absl::StrCat("memory ", Name(call.kind), " failed (rank ", rank_, " of ",
                                     size(), "): ", status.message()));
  }

  absl::Status CheckLocal(const Call& call) const {
    const size_t n = static_cast<size_t>(size());
    const bool per_rank = call.kind == CollectiveType::kAllgather ||
                          call.kind == CollectiveType::kReducescatter ||
                          call.kind == CollectiveType::kAlltoall;
    if ((per_rank && call.sizes.size() != n) ||
        (call.kind == CollectiveType::kAlltoall && call.send_sizes.size() != n)) {
      return absl::InvalidArgumentError(absl::StrCat("expected one size per rank (", n, ")"));
    }
    if (call.root < 0 || call.root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("root ", call.root, " is not a rank"));
    }
    const int op = static_cast<int>(call.op);
    if (DataTypeSize(call.dtype) == 0 || op < 0 || op > static_cast<int>(ReduceOp::kProduct)) {
      return absl::InvalidArgumentError("unknown dtype or reduce op");
    }
    return absl::OkStatus();
  }

  // Every rank checks every call against rank 0's, so all ranks reach the same verdict.
  absl::Status CheckAgreement() const {
    const Call& first = group_->call(0);
    for (int q = 1; q < size(); ++q) {
      const Call& c = group_->call(q);
      const bool same = c.kind == first.kind && c.count == first.count && c.dtype == first.dtype &&
                        c.op == first.op && c.root == first.root &&
                        (c.kind == CollectiveType::kAlltoall || SameSizes(c.sizes, first.sizes));
      if (!same) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", q, " called ", Name(c.kind),
                                                       " with arguments that differ from "
                                                       "rank 0's ",
                                                       Name(first.kind),
                                                       " (sizes, dtype, op or root)"));
      }
    }
    if (first.kind != CollectiveType::kAlltoall) return absl::OkStatus();
    for (int s = 0; s < size(); ++s) {
      for (int d = 0; d < size(); ++d) {
        if (group_->call(s).send_sizes[d] != group_->call(d).sizes[s]) {
          return absl::InvalidArgumentError(
              absl::StrCat("alltoallv: rank ", s, " sends ", group_->call(s).send_sizes[d],
                           " bytes to rank ", d, ", which expects ", group_->call(d).sizes[s]));
        }
      }
    }
    return absl::OkStatus();
  }

  // Constant after construction.
  const std::shared_ptr<Group> group_;
  const int rank_;
  const absl::Duration timeout_;
};

}  // namespace

MemoryTransport::~MemoryTransport() = default;

absl::StatusOr<std::unique_ptr<Communicator>> MemoryTransport::Connect(const CommunicatorSpec& spec,
                                                                       Store& /*store*/) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory transport: invalid rank ", spec.rank, " for group size ", spec.size));
  }
  std::shared_ptr<Group> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Group>& pending = pending_[spec.store_prefix];
    if (pending == nullptr || pending->complete()) {
      pending = std::make_shared<Group>(spec.store_prefix, spec.size);
    }
    if (pending->size() != spec.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory transport: rank ", spec.rank, " joins group '", spec.store_prefix,
                       "' with size ", spec.size, " but its other ranks use ", pending->size()));
    }
    group = pending;
  }
  RETURN_IF_ERROR(group->Join(spec.rank, spec.timeout));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(spec.store_prefix);
    if (it != pending_.end() && it->second == group) pending_.erase(it);
  }
  return std::make_unique<MemoryCommunicator>(std::move(group), spec.rank, spec.timeout);
}

}  // namespace troika::transport
