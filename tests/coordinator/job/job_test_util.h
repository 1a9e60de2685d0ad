#pragma once
// Helpers for tests that drive a Job directly: a session sink that keeps what the job sends
// it, a registry fixture, attaching every rank, and reading a metrics scrape.

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/scheduler.h"
#include "common/session/session_sink.h"
#include "coordinator/job/job.h"
#include "coordinator/job/job_registry.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"

namespace troika::coordinator::test_util {

class FakeSink : public session::SessionSink {
 public:
  // What peer_lost() answers: set it before CloseSession for a peer that went away.
  bool lost = false;
  bool peer_lost() const override { return lost; }

  void Send(std::shared_ptr<const DownMessage> message) override {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(*message);
  }
  std::vector<DownMessage> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

 private:
  std::mutex mu_;
  std::vector<DownMessage> messages_;
};

// The fixture of tests of jobs made by a registry: one on a real scheduler and a fake clock,
// negotiating at once (no cycle time) with `options`' other fields, and its job "train".
class RegistryFixture : public ::testing::Test {
 protected:
  static JobRegistryOptions NoCycleOptions() {
    JobRegistryOptions options;
    options.job.negotiator.cycle_time = absl::ZeroDuration();
    return options;
  }
  explicit RegistryFixture(JobRegistryOptions options = NoCycleOptions())
      : registry_(std::move(options), scheduler_, clock_) {}

  // Job "train" of `size` ranks (elastic between `min_size` and `max_size` if given).
  std::shared_ptr<Job> Create(int size, int min_size = 0, int max_size = 0) {
    bool created = false;
    auto job = registry_.CreateJob("train", size, &created, {}, min_size, max_size);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : nullptr;
  }
  // The job serving the name "train" (an elastic or re-formed job's latest).
  std::shared_ptr<Job> Find() {
    auto job = registry_.Find("train");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : nullptr;
  }
  // Rank `rank`'s allreduce of 2 floats named `name`.
  static TensorRequest Allreduce(int rank, std::string name) {
    TensorRequest r;
    r.rank = rank;
    r.name = std::move(name);
    r.shape = {2};
    return r;
  }

  // The registry goes first: nothing may run on its scheduler then (a job ending calls back
  // into it there).
  void TearDown() override { scheduler_.Stop(); }

  Scheduler scheduler_;
  FakeClock clock_;
  JobRegistry registry_;
};

// Returns once what `scheduler` has due now ran (it runs in order: everything posted before,
// such as a job's done report).
inline void SettleScheduler(Scheduler& scheduler) {
  std::promise<void> ran;
  scheduler.RunAfter(absl::ZeroDuration(), [&ran] { ran.set_value(); });
  ran.get_future().wait();
}

// Attaches rank r on hosts[r], every rank, and returns their memberships.
inline std::vector<Membership> AttachAll(Job& job, const std::vector<std::string>& hosts) {
  std::vector<std::promise<absl::StatusOr<std::vector<Membership>>>> promises(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    job.Attach(
        {static_cast<int>(r)}, hosts[r], absl::Seconds(30),
        [&promises, r](absl::StatusOr<std::vector<Membership>> m) { promises[r].set_value(m); });
  }
  std::vector<Membership> out;
  for (auto& p : promises) {
    absl::StatusOr<std::vector<Membership>> m = p.get_future().get();
    EXPECT_TRUE(m.ok()) << m.status();
    out.push_back(m.ok() ? m->front() : Membership{});
  }
  return out;
}

// RegisterNode's answer; UNKNOWN "waiting" while the node waits to join (an elastic job):
// `*held` then gets the answer when it comes.
inline absl::StatusOr<Job::NodeBlock> Register(
    Job& job, const std::string& host, int nproc, int node_rank,
    std::shared_ptr<std::optional<absl::StatusOr<Job::NodeBlock>>> held = nullptr,
    std::function<bool()> cancelled = nullptr, std::string join_id = {}) {
  if (!held) held = std::make_shared<std::optional<absl::StatusOr<Job::NodeBlock>>>();
  job.RegisterNode(
      host, nproc, node_rank, [held](absl::StatusOr<Job::NodeBlock> block) { *held = block; },
      std::move(cancelled), std::move(join_id));
  if (!held->has_value()) return absl::UnknownError("waiting");
  return **held;
}

// Sample values of one family in a scrape, keyed by their labels rendered "k=v,k=v".
inline std::map<std::string, double> Samples(const std::vector<prometheus::MetricFamily>& families,
                                             const std::string& name) {
  std::map<std::string, double> out;
  for (const auto& family : families) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      std::string key;
      for (const auto& label : m.label) {
        key += (key.empty() ? "" : ",") + label.name + "=" + label.value;
      }
      out[key] = family.type == prometheus::MetricType::Counter     ? m.counter.value
                 : family.type == prometheus::MetricType::Histogram ? m.histogram.sample_count
                                                                    : m.gauge.value;
    }
  }
  return out;
}

}  // namespace troika::coordinator::test_util
