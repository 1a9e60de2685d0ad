#pragma once
// The fixture of the elastic job tests (job_elastic_test.cc: losses and generations;
// job_elastic_nodes_test.cc: nodes joining, draining, never attaching or never opening their
// session): test_util::RegistryFixture, and helpers to attach elastic jobs' nodes and to make
// their requests.

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/job/job.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {

class JobElasticTest : public test_util::RegistryFixture {
 protected:
  // Attaches nodes[i].second on host nodes[i].first, each node in one call (as agents do);
  // the memberships of every node, in order.
  static std::vector<std::vector<Membership>> AttachNodes(
      Job& job, const std::vector<std::pair<std::string, std::vector<int>>>& nodes) {
    std::vector<std::promise<absl::StatusOr<std::vector<Membership>>>> done(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      job.Attach(nodes[i].second, nodes[i].first, absl::Seconds(30),
                 [&done, i](auto m) { done[i].set_value(std::move(m)); });
    }
    std::vector<std::vector<Membership>> out;
    for (auto& d : done) {
      absl::StatusOr<std::vector<Membership>> m = d.get_future().get();
      EXPECT_TRUE(m.ok()) << m.status();
      out.push_back(m.ok() ? *m : std::vector<Membership>{});
    }
    return out;
  }

  static TensorRequest Barrier(int rank, std::string name) {
    TensorRequest r;
    r.rank = rank;
    r.name = std::move(name);
    r.type = CollectiveType::kBarrier;
    r.dtype = DataType::kUint8;
    r.shape = {0};
    return r;
  }
  static constexpr char kCommit[] = "troika/elastic/commit/0";

  // Returns once what the scheduler has due now ran (a job's end is posted there).
  void SettleScheduler() { test_util::SettleScheduler(scheduler_); }
};

}  // namespace troika::coordinator
