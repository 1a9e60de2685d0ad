#pragma once
// The shared state of one MemoryTransport group (see memory_transport.h): membership while
// connecting, a generation barrier, and the call each rank published for the collective in
// progress. Internal to the memory transport.
//
// Thread contract: Group is thread-safe; every rank's thread calls into the same object.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/types.h"

namespace troika::transport {
namespace memory_internal {

// condition_variable::wait_for overflows on huge durations (absl::InfiniteDuration()).
inline std::chrono::milliseconds ChronoTimeout(absl::Duration timeout) {
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
      : name_(std::move(name)),
        size_(size),
        present_(size),
        arrivals_(size),
        in_phase_(size),
        calls_(size) {}

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
    LeavePhaseLocked(rank);
    RETURN_IF_ERROR(error_);
    const uint64_t generation = generation_;
    ++arrivals_[rank];
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      // Every rank is now past the barrier, including those not yet awake.
      std::fill(in_phase_.begin(), in_phase_.end(), true);
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
          absl::StrCat("timed out after ", absl::FormatDuration(timeout), " waiting for ranks ",
                       MissingRanks(arrived), " of group '", name_, "'")));
    }
    return error_;
  }

  // Breaks the group with `status` unless already broken; wakes every waiter.
  void Break(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    BreakLocked(std::move(status));
  }

  // Ends this rank's collective. With `drain`, first waits until no other rank is between
  // two barriers, where it may still read this rank's buffers: a rank that fails returns
  // early, and its caller may free them. Phases only compute, so the wait is short.
  void Leave(int rank, bool drain) {
    std::unique_lock<std::mutex> lock(mu_);
    LeavePhaseLocked(rank);
    if (!drain) return;
    cv_.wait(lock, [&] {
      return std::none_of(in_phase_.begin(), in_phase_.end(), [](bool b) { return b; });
    });
  }

 private:
  void LeavePhaseLocked(int rank) {
    if (!in_phase_[rank]) return;
    in_phase_[rank] = false;
    cv_.notify_all();
  }

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
  std::vector<bool> in_phase_;      // Between two barriers: may read other ranks' buffers.
  absl::Status error_;
  // calls_[r] is written under mu_ by rank r and read without it by every rank between
  // barriers, which order those accesses.
  std::vector<Call> calls_;
};

}  // namespace memory_internal

}  // namespace troika::transport
