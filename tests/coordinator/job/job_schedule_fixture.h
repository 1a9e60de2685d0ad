#pragma once
// JobScheduleTest: a job of 2 ranks (sessions s0_, s1_) that repeated steps of x (2 floats)
// and y (3 floats) until it published a schedule (schedule_). Shared by the job's schedule
// tests and the service's scrape of schedules.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/job/job.h"
#include "coordinator/job/job_registry.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator::test_util {

class JobScheduleTest : public RegistryFixture {
 protected:
  static JobRegistryOptions Options() {
    JobRegistryOptions options = NoCycleOptions();
    options.job.schedules = true;
    return options;
  }
  JobScheduleTest() : RegistryFixture(Options()) {}

  void SetUp() override {
    job_ = Create(2);
    ASSERT_NE(job_, nullptr);
    AttachAll(*job_, {"a", "a"});
    ASSERT_TRUE(job_->OpenSession({0}, 1, &s0_).ok());
    ASSERT_TRUE(job_->OpenSession({1}, 1, &s1_).ok());
    // Steps of x (2 floats) and y (3 floats), sent by cache id once the ids are known, until
    // the job publishes a schedule.
    for (int step = 0; step < 10 && !schedule_; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<TensorRequest> requests;
        for (const auto& [name, elements] : {std::pair<std::string, int64_t>{"x", 2}, {"y", 3}}) {
          TensorRequest r;
          r.rank = rank;
          r.name = name;
          r.shape = {elements};
          if (ids_.count(name)) {
            r = TensorRequest{};
            r.rank = rank;
            r.cache_id = ids_[name];
          }
          requests.push_back(r);
        }
        ASSERT_TRUE(job_->Submit(rank == 0 ? &s0_ : &s1_, requests).ok());
      }
      for (const DownMessage& m : s0_.messages()) {
        for (const Response& r : m.responses) {
          for (size_t i = 0; i < r.cache_ids.size() && i < r.names.size(); ++i) {
            ids_[r.names[i]] = r.cache_ids[i];
          }
        }
        if (m.schedule) schedule_ = m.schedule;
      }
    }
    ASSERT_TRUE(schedule_.has_value()) << "no schedule formed";
  }

  // Rank `rank`'s report of `rounds` rounds from `first`: tensor n submitted `submitted_ms[n]`
  // and each entry completed `completed_ms` before it was sent.
  ExecReport Report(int rank, int64_t first, int rounds, std::vector<int> submitted_ms,
                    int completed_ms) {
    ExecReport report;
    report.rank = rank;
    report.sent_at = clock_.Now();
    ScheduleProgress& p = report.schedule.emplace();
    p.schedule = schedule_->id;
    p.first_round = first;
    for (int i = 0; i < rounds; ++i) {
      for (int ms : submitted_ms) p.submitted_ago.push_back(absl::Milliseconds(ms));
      for (size_t e = 0; e < schedule_->entries.size(); ++e) {
        p.completed_ago.push_back(absl::Milliseconds(completed_ms));
      }
    }
    return report;
  }

  std::shared_ptr<Job> job_;
  FakeSink s0_, s1_;
  std::map<std::string, int32_t> ids_;
  std::optional<Schedule> schedule_;
};

}  // namespace troika::coordinator::test_util
