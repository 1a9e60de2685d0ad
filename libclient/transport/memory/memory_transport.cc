#include "libclient/transport/memory/memory_transport.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "libclient/transport/reduce.h"

namespace troika::transport {
namespace memory_internal {

// condition_variable::wait_for overflows on huge durations (absl::InfiniteDuration()).
std::chrono::milliseconds ChronoTimeout(absl::Duration timeout) {
  return absl::ToChronoMilliseconds(std::min(timeout, absl::Hours(24 * 365)));
}

// What one rank published for the collective in progress. Written by its rank before the
// first barrier of a collective, read by every rank between that barrier and the last one.
struct Call {
  CollectiveType kind = CollectiveType::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;  // Elements (allreduce) or bytes (broadcast).
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::span<const size_t> sizes = {};       // counts, recv_bytes
  std::span<const size_t> send_sizes = {};  // alltoallv send_bytes
};

// One group of ranks: membership while connecting, then a generation barrier and the
// published calls. Thread-safe.
class Group {
 public:
  Group(std::string name, int size)
      : name_(std::move(name)), size_(size), present_(size), arrivals_(size), calls_(size) {}

  const std::string& name() const { return name_; }
  int size() const { return size_; }

  bool complete() {
    std::lock_guard<std::mutex> lock(mu_);
    return joined_ == size_;
  }

  absl::Status Join(int rank, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (present_[rank]) {
      return absl::AlreadyExistsError(
          absl::StrCat("memory transport: rank ", rank, " already joined group '", name_, "'"));
    }
    present_[rank] = true;
    if (++joined_ == size_) {
      cv_.notify_all();
      return absl::OkStatus();
    }
    if (cv_.wait_for(lock, ChronoTimeout(timeout), [&] { return joined_ == size_; })) {
      return absl::OkStatus();
    }
    absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        "memory transport: only ", joined_, " of ", size_, " ranks joined group '", name_,
        "' within ", absl::FormatDuration(timeout), "; missing ranks: ", MissingRanks(present_)));
    present_[rank] = false;
    --joined_;
    return status;
  }

  // Fails if the group is broken; otherwise records `call` as this rank's current call.
  absl::Status Publish(int rank, const Call& call) {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(error_);
    calls_[rank] = call;
    return absl::OkStatus();
  }

  // Only valid between the first and the last barrier of a collective.
  const Call& call(int rank) const { return calls_[rank]; }

  // Generation barrier. Returns the group's error if it breaks before every rank arrives;
  // breaks it with DEADLINE_EXCEEDED if `timeout` passes first.
  absl::Status Arrive(int rank, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    RETURN_IF_ERROR(error_);
    const uint64_t generation = generation_;
    ++arrivals_[rank];
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return absl::OkStatus();
    }
    cv_.wait_for(lock, ChronoTimeout(timeout),
                 [&] { return generation_ != generation || !error_.ok(); });
    if (generation_ != generation) return absl::OkStatus();
    if (error_.ok()) {
      std::vector<bool> arrived(size_);
      for (int r = 0; r < size_; ++r) arrived[r] = arrivals_[r] == arrivals_[rank];
      BreakLocked(absl::DeadlineExceededError(
          absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                       " waiting for ranks ", MissingRanks(arrived), " of group '", name_, "'")));
    }
    return error_;
  }

  // Breaks the group with `status` unless already broken; wakes every waiter.
  void Break(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    BreakLocked(std::move(status));
  }

 private:
  void BreakLocked(absl::Status status) {
    if (!error_.ok()) return;
    error_ = std::move(status);
    cv_.notify_all();
  }

  static std::string MissingRanks(const std::vector<bool>& present) {
    std::vector<int> missing;
    for (size_t r = 0; r < present.size(); ++r) {
      if (!present[r]) missing.push_back(static_cast<int>(r));
    }
    return absl::StrCat("[", absl::StrJoin(missing, ","), "]");
  }

  // Constant after construction.
  const std::string name_;
  const int size_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  int joined_ = 0;
  std::vector<bool> present_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<uint64_t> arrivals_;  // Barriers each rank has entered.
  absl::Status error_;
  // calls_[r] is written under mu_ by rank r and read without it by every rank between
  // barriers, which order those accesses.
  std::vector<Call> calls_;
};

}  // namespace memory_internal

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
    const Call call{.kind = CollectiveType::kAllreduce, .out = data, .count = count,
                    .dtype = dtype, .op = op};
    return Run(call, [&]() -> absl::Status {
      const size_t width = DataTypeSize(dtype);
      char* mine = static_cast<char*>(data);
      const auto [begin, end] = EvenBlock(count, size(), rank_);
      for (int q = 0; q < size(); ++q) {
        if (q == rank_) continue;
        const char* theirs = static_cast<const char*>(group_->call(q).out);
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
    const Call call{.kind = CollectiveType::kAllgather, .in = in, .out = out,
                    .sizes = recv_bytes};
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
    const Call call{.kind = CollectiveType::kAlltoall, .in = in, .out = out,
                    .sizes = recv_bytes, .send_sizes = send_bytes};
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
    const Call call{.kind = CollectiveType::kReducescatter, .out = data, .dtype = dtype,
                    .op = op, .sizes = counts};
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
    if (status.ok()) return status;
    group_->Break(status);  // No-op if the group was already broken.
    return absl::Status(status.code(),
                        absl::StrCat("memory ", Name(call.kind), " failed (rank ", rank_,
                                     " of ", size(), "): ", status.message()));
  }

  absl::Status CheckLocal(const Call& call) const {
    const size_t n = static_cast<size_t>(size());
    const bool sizes_ok = call.kind == CollectiveType::kAllgather ||
                                  call.kind == CollectiveType::kReducescatter ||
                                  call.kind == CollectiveType::kAlltoall
                              ? call.sizes.size() == n
                              : true;
    if (!sizes_ok || (call.kind == CollectiveType::kAlltoall && call.send_sizes.size() != n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected one size per rank (", n, "), got ", call.sizes.size()));
    }
    if (call.kind == CollectiveType::kBroadcast && (call.root < 0 || call.root >= size())) {
      return absl::InvalidArgumentError(absl::StrCat("root ", call.root, " out of range"));
    }
    return absl::OkStatus();
  }

  // Every rank checks every call against rank 0's, so all ranks reach the same verdict.
  absl::Status CheckAgreement() const {
    const Call& first = group_->call(0);
    for (int q = 1; q < size(); ++q) {
      const Call& c = group_->call(q);
      const bool same = c.kind == first.kind && c.count == first.count &&
                        c.dtype == first.dtype && c.op == first.op && c.root == first.root &&
                        (c.kind == CollectiveType::kAlltoall || SameSizes(c.sizes, first.sizes));
      if (!same) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", q, " called ", Name(c.kind), " with arguments that differ from "
            "rank 0's ", Name(first.kind), " (sizes, dtype, op or root)"));
      }
    }
    if (first.kind != CollectiveType::kAlltoall) return absl::OkStatus();
    for (int s = 0; s < size(); ++s) {
      for (int d = 0; d < size(); ++d) {
        if (group_->call(s).send_sizes[d] != group_->call(d).sizes[s]) {
          return absl::InvalidArgumentError(absl::StrCat(
              "alltoallv: rank ", s, " sends ", group_->call(s).send_sizes[d], " bytes to rank ",
              d, ", which expects ", group_->call(d).sizes[s]));
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

absl::StatusOr<std::unique_ptr<Communicator>> MemoryTransport::Connect(
    const CommunicatorSpec& spec, Store& /*store*/) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat("memory transport: invalid rank ", spec.rank,
                                                   " for group size ", spec.size));
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
