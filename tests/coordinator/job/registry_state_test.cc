// The coordinator's state directory: job records written as jobs change, removed when they
// end, and jobs recreated from them by a restarted coordinator's registry.

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "coordinator/job/job_registry.h"
#include "coordinator/state/state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::Register;

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/troika-state-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    auto store = StateStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *store;
  }

  std::unique_ptr<JobRegistry> MakeRegistry() {
    JobRegistryOptions options;
    options.state_store = store_;
    options.autotune_dir = dir_;
    return std::make_unique<JobRegistry>(options, scheduler_, Clock::Real());
  }

  std::string dir_;
  std::shared_ptr<StateStore> store_;
  Scheduler scheduler_;
};

TEST_F(StateStoreTest, RestartedRegistryHasTheJobWithItsTokenAndNodeBlocks) {
  {
    auto registry = MakeRegistry();
    bool created = false;
    auto job = registry->CreateJob("train", 4, &created, Secret::Of("job-secret"));
    ASSERT_TRUE(job.ok());
    ASSERT_TRUE(Register(**job, "node-b", 2, 1).ok());
  }  // the coordinator dies; the record stays
  auto registry = MakeRegistry();
  EXPECT_EQ(registry->RestoreJobs(), 1);
  auto job = registry->Find("train");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)->size(), 4);
  EXPECT_TRUE((*job)->TokenMatches("job-secret"));
  EXPECT_FALSE((*job)->TokenMatches("another job's secret"));
  auto block = Register(**job, "node-b", 2, 1);
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(block->first_rank, 2);
  EXPECT_EQ(Register(**job, "node-c", 2, 1).status().code(), absl::StatusCode::kAlreadyExists)
      << "node 1 belongs to node-b, as before the restart";
  EXPECT_EQ(Register(**job, "node-b", 2, -1)->first_rank, 2) << "a host gets its block back";
}

TEST_F(StateStoreTest, ProcessSetsAndTunedParametersComeBack) {
  v1::JobRecord record;
  record.set_name("sets");
  record.set_size(4);
  record.set_token_sha256(Secret::Of("t").digest());
  (*record.mutable_process_sets())[2].add_ranks(1);
  (*record.mutable_process_sets())[2].add_ranks(3);
  record.set_next_process_set(4);
  store_->Save(record);
  {
    std::ofstream params(dir_ + "/sets-autotune.params");
    params << "fusion_threshold_bytes=1048576\ncycle_time_us=2500\n";
  }
  auto registry = MakeRegistry();
  ASSERT_EQ(registry->RestoreJobs(), 1);
  auto job = registry->Find("sets");
  ASSERT_TRUE(job.ok());
  const v1::JobRecord back = (*job)->Record();
  ASSERT_EQ(back.process_sets().count(2), 1u);
  EXPECT_THAT(back.process_sets().at(2).ranks(), ::testing::ElementsAre(1, 3));
  EXPECT_EQ(back.next_process_set(), 4);
  EXPECT_EQ((*job)->Describe().negotiation.fusion_threshold_bytes, 1048576);
}

TEST_F(StateStoreTest, RecordGoesWhenTheJobIsReleasedAndBadRecordsAreSkipped) {
  {
    std::ofstream junk(dir_ + "/jobs/0123.job");
    junk << "not a record";
  }
  auto registry = MakeRegistry();
  EXPECT_EQ(registry->RestoreJobs(), 0);
  bool created = false;
  auto job = registry->CreateJob("short", 1, &created, Secret::Of("t"));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(store_->Load().size(), 1u);
  (*job)->Abort(AbortCause::kCancelled, "test");
  // The registry releases a done job from the scheduler's thread (60 s: a not-hung bound).
  for (int i = 0; i < 6000 && !store_->Load().empty(); ++i) usleep(10000);
  EXPECT_TRUE(store_->Load().empty());
}

// troikarun --autotune-log-file: a coordinator of one job, without an autotune directory,
// writes the tuning CSV where the job's options say.
TEST(RegistryAutotuneTest, WithoutADirectoryAJobWritesTheFilesItsOptionsName) {
  char dir[] = "/tmp/troika-tune-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string csv = std::string(dir) + "/my log.csv";
  JobRegistryOptions options;
  AutotuneConfig& tune = options.job.autotune.emplace();
  tune.options.warmup_samples = 0;
  tune.options.steps_per_sample = 1;
  tune.options.max_samples = 3;
  tune.csv_path = csv;
  options.job.negotiator.cycle_time = absl::ZeroDuration();
  Scheduler scheduler;
  FakeClock clock;
  JobRegistry registry(options, scheduler, clock);
  bool created = false;
  auto job = registry.CreateJob("tuned", 1, &created, Secret::Of("t"));
  ASSERT_TRUE(job.ok()) << job.status();
  test_util::AttachAll(**job, {"a"});
  test_util::FakeSink session;
  ASSERT_TRUE((*job)->OpenSession({0}, 1, &session).ok());
  auto report = [&](int64_t bytes) {
    ExecReport r;
    r.rank = 0;
    r.sent_at = clock.Now();
    r.allreduce_bytes = bytes;
    ASSERT_TRUE((*job)->ReportExec(&session, r).ok());
  };
  auto step = [&] {
    TensorRequest request;
    request.rank = 0;
    request.name = "grad";
    request.shape = {2};
    ASSERT_TRUE((*job)->Submit(&session, {request}).ok());
  };
  report(0);
  step();
  step();  // "grad" again: one step done
  clock.Advance(absl::Seconds(1));
  report(1000);
  step();  // the sample ends: its row is written
  std::ifstream in(csv);
  ASSERT_TRUE(in.good()) << csv << " was not written";
  std::string header;
  std::getline(in, header);
  EXPECT_THAT(header, ::testing::HasSubstr("fusion"));
  std::remove(csv.c_str());
  rmdir(dir);
}

TEST(StateStoreOpenTest, UnwritableDirectoryIsRefusedWithItsName) {
  auto store = StateStore::Open("/proc/troika-state");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(std::string(store.status().message()), ::testing::HasSubstr("/proc/troika-state"));
}

}  // namespace
}  // namespace troika::coordinator
