#pragma once
// ForwardingChannel: a rank's real gRPC control channel with a seam for tests. Every call goes
// to the wrapped channel; a test overrides what it watches or holds back. JoinThrough() joins
// ranks as TestCluster::Join does, each through the channel `wrap` makes of its real one.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libclient/context_impl.h"
#include "libclient/control/control_channel.h"
#include "libclient/control/grpc_control_channel.h"
#include "libclient/transport/transport.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {

class ForwardingChannel : public internal::ControlChannel {
 public:
  explicit ForwardingChannel(std::unique_ptr<internal::ControlChannel> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<Membership> Join(const std::string& job, int size, int rank, int64_t epoch,
                                  const std::string& host, absl::Duration timeout) override {
    return inner_->Join(job, size, rank, epoch, host, timeout);
  }
  absl::Status OpenSession(const std::string& job, const std::vector<int>& ranks,
                           int64_t epoch) override {
    return inner_->OpenSession(job, ranks, epoch);
  }
  absl::Status Send(const std::vector<TensorRequest>& requests) override {
    return inner_->Send(requests);
  }
  absl::Status SendWaitState(const WaitState& state) override {
    return inner_->SendWaitState(state);
  }
  absl::Status SendExecReport(const ExecReport& report) override {
    return inner_->SendExecReport(report);
  }
  absl::Status SendScheduleEnded(int64_t id, const std::vector<int>& ranks) override {
    return inner_->SendScheduleEnded(id, ranks);
  }
  absl::Status SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) override {
    return inner_->SendScheduleDeviated(id, ranks);
  }
  absl::Status Goodbye(const std::vector<int>& ranks) override { return inner_->Goodbye(ranks); }
  internal::SessionEvent Receive() override { return inner_->Receive(); }
  void Cancel() override { inner_->Cancel(); }
  transport::Store& store() override { return inner_->store(); }

 private:
  std::unique_ptr<internal::ControlChannel> inner_;
};

// Rank r's channel: wrap(r, its real channel).
using WrapChannel = std::function<std::unique_ptr<internal::ControlChannel>(
    int rank, std::unique_ptr<internal::ControlChannel> real)>;

// Joins `size` ranks of `job` to `cluster` concurrently, as TestCluster::Join does (over the
// data plane RankOptions names), each through its wrapped channel; every join must succeed.
inline std::vector<std::unique_ptr<Context>> JoinThrough(TestCluster& cluster,
                                                         const std::string& job, int size,
                                                         const WrapChannel& wrap) {
  std::vector<std::unique_ptr<Context>> contexts(size);
  OnEveryRank(size, [&](int rank) {
    const Options options = cluster.RankOptions(job, rank, size);
    auto channel = internal::GrpcControlChannel::Connect(cluster.address(), {.plaintext = true},
                                                         kTestJobToken);
    ASSERT_TRUE(channel.ok()) << channel.status();
    auto transport = transport::CreateTransport(
        options.transport, {options.hierarchical_allreduce, options.hierarchical_allgather});
    ASSERT_TRUE(transport.ok()) << transport.status();
    auto context = internal::ContextImpl::Create(options, wrap(rank, *std::move(channel)),
                                                 *std::move(transport));
    ASSERT_TRUE(context.ok()) << "rank " << rank << ": " << context.status();
    contexts[rank] = *std::move(context);
  });
  for (auto& c : contexts) {
    if (!c) ADD_FAILURE() << "a rank failed to join";
  }
  return contexts;
}

}  // namespace troika::testing
