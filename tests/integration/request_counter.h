#pragma once
// RequestCounter: how many messages carrying tensor requests each rank's control channel sent
// up, and apart, how many wait states. The coordinator's up_messages counts every message — also
// the wait states of a rank blocked over 50 ms in a Wait and its progress reports (about one a
// second), whose number depends on how fast the machine is. The messages that carry tensor
// requests do not: they are what negotiation costs, what a send cycle batches and what a
// steady-state schedule saves. JoinCounting() joins ranks as TestCluster::Join does (over the
// data plane RankOptions names), each rank's channel counting into a RequestCounter.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "tests/integration/forwarding_channel.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {

// Thread-safe.
class RequestCounter {
 public:
  explicit RequestCounter(int size) : requests_(size), blocked_(size), unblocked_(size) {}

  // Messages with tensor requests that rank `rank` sent, and all ranks together.
  int64_t Of(int rank) const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_[rank];
  }
  int64_t Total() const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t total = 0;
    for (int64_t n : requests_) total += n;
    return total;
  }

  // Waits until `rank` has sent more than `than` request messages; false if it had not within
  // `timeout` (a not-hung bound).
  bool WaitForMoreThan(int rank, int64_t than, absl::Duration timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return requests_[rank] > than; });
  }

  // Wait states that rank `rank` sent naming ops it is blocked on (`blocked`), or none.
  int64_t WaitStatesOf(int rank, bool blocked) const {
    std::lock_guard<std::mutex> lock(mu_);
    return (blocked ? blocked_ : unblocked_)[rank];
  }
  // Waits until `rank` has sent more than `than` such wait states; false if it had not within
  // `timeout` (a not-hung bound).
  bool WaitForWaitStates(int rank, bool blocked, int64_t than, absl::Duration timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return (blocked ? blocked_ : unblocked_)[rank] > than; });
  }

  void SentWaitState(int rank, const WaitState& state) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++(state.waiting_for.empty() ? unblocked_ : blocked_)[rank];
    }
    cv_.notify_all();
  }

  void Sent(int rank, const std::vector<TensorRequest>& requests) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (requests.empty()) return;
      ++requests_[rank];
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<int64_t> requests_;   // guarded by mu_: by rank
  std::vector<int64_t> blocked_;    // guarded by mu_: by rank
  std::vector<int64_t> unblocked_;  // guarded by mu_: by rank
};

// Rank `rank`'s real channel, counting into `counter`.
class CountingChannel : public ForwardingChannel {
 public:
  CountingChannel(std::unique_ptr<internal::ControlChannel> inner, int rank,
                  RequestCounter& counter)
      : ForwardingChannel(std::move(inner)), rank_(rank), counter_(counter) {}
  absl::Status Send(const std::vector<TensorRequest>& requests) override {
    counter_.Sent(rank_, requests);
    return ForwardingChannel::Send(requests);
  }
  absl::Status SendWaitState(const WaitState& state) override {
    counter_.SentWaitState(rank_, state);
    return ForwardingChannel::SendWaitState(state);
  }

 private:
  const int rank_;
  RequestCounter& counter_;
};

// Joins `size` ranks of `job` to `cluster` concurrently, as TestCluster::Join does, each rank's
// channel counting into `counter` (of at least `size` ranks); every join must succeed.
inline std::vector<std::unique_ptr<Context>> JoinCounting(TestCluster& cluster,
                                                          const std::string& job, int size,
                                                          RequestCounter& counter) {
  return JoinThrough(cluster, job, size, [&counter](int rank, auto real) {
    return std::make_unique<CountingChannel>(std::move(real), rank, counter);
  });
}

}  // namespace troika::testing
