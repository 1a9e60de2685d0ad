#pragma once
// NodeRelay's tests' fakes and fixture: an upstream that records what the relay sends it, a sink
// that keeps what it sends a rank, and a relay for ranks 2 and 3 of a job of 4.

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/relay/node_relay.h"
#include "common/clock.h"
#include "common/scheduler.h"
#include "gtest/gtest.h"

namespace troika::agent::test_util {

// Records what the relay sends upstream, in order, as short strings:
// "requests grad:2,3", "goodbye 2", "exit 3 code 1 signal 0".
class FakeUpstream : public RelayUpstream {
 public:
  void SendRequests(v1::RequestBatch batch) override {
    std::string text = "requests";
    for (const v1::Request& r : batch.requests()) {
      text += " " + (r.cache_id() ? "#" + std::to_string(r.cache_id()) : r.name()) + ":";
      if (r.ranks().empty()) text += std::to_string(r.rank());
      for (int i = 0; i < r.ranks_size(); ++i) {
        text += (i ? "," : "") + std::to_string(r.ranks(i));
      }
    }
    Record(text);
  }
  void SendGoodbye(const std::vector<int>& ranks) override {
    std::string text = "goodbye";
    for (int r : ranks) text += " " + std::to_string(r);
    Record(text);
  }
  void SendWaitState(const WaitState& state) override {
    std::string text = "waits " + std::to_string(state.rank);
    for (const std::string& name : state.waiting_for) text += " " + name;
    Record(text);
  }
  void SendExecReport(const ExecReport& report) override {
    Record("report " + std::to_string(report.rank) + " bytes " +
           std::to_string(report.allreduce_bytes));
  }
  void SendScheduleEnded(int64_t id, const std::vector<int>& ranks) override {
    std::string text = "schedule " + std::to_string(id) + " ended";
    for (int r : ranks) text += " " + std::to_string(r);
    Record(text);
  }
  void SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) override {
    std::string text = "schedule " + std::to_string(id) + " deviated";
    for (int r : ranks) text += " " + std::to_string(r);
    Record(text);
  }
  void SendReplay(v1::ResponseBatch batch) override {
    std::string text = "replay from " + std::to_string(batch.seq());
    for (const v1::Response& r : batch.responses()) {
      text += " " + (r.names().empty() ? std::string("#") : r.names(0));
    }
    Record(text);
  }
  void SendRankExit(const RankExit& exit) override {
    Record("exit " + std::to_string(exit.rank) + " code " + std::to_string(exit.exit_code) +
           " signal " + std::to_string(exit.signal) + " on " + exit.host);
    std::lock_guard<std::mutex> lock(mu_);
    exits_.push_back(exit);
  }
  std::vector<RankExit> exits() {
    std::lock_guard<std::mutex> lock(mu_);
    return exits_;
  }
  std::vector<std::string> sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }
  // Resolves with the next message recorded after this call.
  std::future<std::string> Next() {
    std::lock_guard<std::mutex> lock(mu_);
    next_ = std::promise<std::string>();
    waiting_ = true;
    return next_.get_future();
  }

 private:
  void Record(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    sent_.push_back(text);
    if (waiting_) {
      waiting_ = false;
      next_.set_value(text);
    }
  }
  std::vector<RankExit> exits_;  // guarded by mu_
  std::mutex mu_;
  std::vector<std::string> sent_;
  std::promise<std::string> next_;
  bool waiting_ = false;
};

class FakeSink : public session::SessionSink {
 public:
  void Send(std::shared_ptr<const DownMessage> message) override {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(std::move(message));
  }
  std::vector<std::shared_ptr<const DownMessage>> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<const DownMessage>> messages_;
};

inline TensorRequest Request(int rank, const std::string& name) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.shape = {4};
  return r;
}

class NodeRelayTest : public ::testing::Test {
 protected:
  // Ranks 2 and 3 of a job of 4, on "node-b"; an hour-long window and grace, so only the
  // fake clock and explicit calls move things.
  std::shared_ptr<NodeRelay> MakeRelay(absl::Duration lost_grace = absl::Hours(1)) {
    NodeRelayOptions options;
    options.job = "train";
    options.size = 4;
    options.ranks = {2, 3};
    options.host = "node-b";
    options.aggregation_window = absl::Hours(1);
    options.lost_session_grace = lost_grace;
    auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
    relay->Attached(1);
    return relay;
  }

  // Opens one session per rank.
  void OpenBoth(NodeRelay& relay) {
    ASSERT_TRUE(relay.OpenSession({2}, 1, &sink2_).ok());
    ASSERT_TRUE(relay.OpenSession({3}, 1, &sink3_).ok());
  }

  FakeUpstream upstream_;
  Scheduler scheduler_;
  FakeClock clock_;
  FakeSink sink2_, sink3_;
};

}  // namespace troika::agent::test_util
