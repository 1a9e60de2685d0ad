// Hostile and malformed input through gRPC: oversized messages, malformed requests, limits
// exceeded. Each is answered with a clear status, and a legitimate job on the same coordinator
// keeps training throughout.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/request_check.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator::CoordinatorOptions options;
    options.max_message_bytes = 1 << 20;
    options.registry.max_job_size = 64;
    options.registry.max_jobs = 4;
    options.registry.job.negotiator.max_pending_tensors = 8;
    cluster_ = std::make_unique<TestCluster>(options);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
    // The legitimate job, on the same coordinator.
    legit_ = cluster_->Join("legit", 2);
    ASSERT_EQ(legit_.size(), 2u);
    ExpectLegitTrains();
  }
  void TearDown() override {
    ExpectLegitTrains();
    for (auto& ctx : legit_) {
      if (ctx) {
        EXPECT_TRUE(ctx->Shutdown().ok());
      }
    }
  }

  void ExpectLegitTrains() {
    OnEveryRank(2, [&](int rank) {
      std::vector<float> v(8, static_cast<float>(rank));
      absl::Status s =
          legit_[rank]
              ->Allreduce(absl::StrCat("w", step_), v.data(), v.data(), DataType::kFloat32, {8})
              .Wait();
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(v[0], 1.0f);
    });
    ++step_;
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token = kTestJobToken) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context->AddMetadata(kJobTokenHeader, token);
    return context;
  }

  // Opens a session of job `job` for its rank 0 after attaching it, sends `up`, and returns
  // how the stream ended.
  grpc::Status SessionEndsWith(const std::string& job, const v1::Up& up) {
    auto ctx = Context();
    auto stream = stub_->Session(ctx.get());
    v1::Up hello;
    hello.mutable_hello()->set_job(job);
    hello.mutable_hello()->add_ranks(0);
    hello.mutable_hello()->set_epoch(1);
    stream->Write(hello);
    stream->Write(up);
    stream->WritesDone();
    v1::Down down;
    while (stream->Read(&down)) {
    }
    return stream->Finish();
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::vector<std::unique_ptr<troika::Context>> legit_;
  int step_ = 0;
};

TEST_F(HostileInputTest, OversizedMessagesAreRefusedByTheTransport) {
  v1::KvSetRequest set;
  set.set_job("legit");
  set.set_key("big");
  set.set_value(std::string(2 << 20, 'x'));
  v1::KvSetResponse response;
  grpc::Status s = stub_->KvSet(Context().get(), set, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
}

TEST_F(HostileInputTest, MalformedCallsGetAClearStatus) {
  v1::CreateJobRequest create;
  create.set_job(std::string(300, 'j'));
  create.set_size(2);
  v1::CreateJobResponse created;
  grpc::Status s = stub_->CreateJob(Context().get(), create, &created);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1 to 256 characters"));
  create.set_job("huge");
  create.set_size(1000);  // --max_job_size 64
  s = stub_->CreateJob(Context().get(), create, &created);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("outside [1, 64]"));
  create.set_size(-3);
  EXPECT_EQ(stub_->CreateJob(Context().get(), create, &created).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::KvSetRequest set;
  set.set_job("legit");
  v1::KvSetResponse set_response;
  s = stub_->KvSet(Context().get(), set, &set_response);  // empty key
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  set.set_key(std::string(5000, 'k'));
  s = stub_->KvSet(Context().get(), set, &set_response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1 to 1024 bytes"));

  v1::AttachRequest attach;
  attach.set_job("legit");
  attach.set_rank(99);
  v1::AttachResponse attached;
  s = stub_->Attach(Context().get(), attach, &attached);
  EXPECT_FALSE(s.ok());

  v1::StartTimelineRequest timeline;
  timeline.set_job("legit");
  timeline.set_file("../../etc/passwd");
  v1::StartTimelineResponse started;
  auto admin = Context();
  admin->AddMetadata(kAdminTokenHeader, kTestAdminToken);
  s = stub_->StartTimeline(admin.get(), timeline, &started);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("plain file name"));
}

TEST_F(HostileInputTest, MalformedSessionsEndWithTheReasonAndHurtOnlyTheirOwnJob) {
  // Victim jobs whose only rank is a hand-written hostile client.
  for (const char* victim : {"victim", "victim2"}) {
    v1::CreateJobRequest create;
    create.set_job(victim);
    create.set_size(1);
    v1::CreateJobResponse created;
    ASSERT_TRUE(stub_->CreateJob(Context().get(), create, &created).ok());
    v1::AttachRequest attach;
    attach.set_job(victim);
    attach.set_rank(0);
    v1::AttachResponse attached;
    ASSERT_TRUE(stub_->Attach(Context().get(), attach, &attached).ok());
  }

  // Requests before hello.
  {
    auto context = Context();
    auto stream = stub_->Session(context.get());
    v1::Up up;
    up.mutable_requests()->add_requests()->set_name("t");
    stream->Write(up);
    stream->WritesDone();
    v1::Down down;
    while (stream->Read(&down)) {
    }
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr("must start with hello"));
  }
  // An out-of-range dtype; a name beyond kMaxNameBytes (a client refuses it itself).
  v1::Up bad_dtype;
  v1::Request* r = bad_dtype.mutable_requests()->add_requests();
  r->set_name("t");
  r->set_dtype(static_cast<v1::DataType>(77));
  r->add_shape(4);
  grpc::Status s = SessionEndsWith("victim", bad_dtype);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("unknown dtype"));
  v1::Up long_name;
  r = long_name.mutable_requests()->add_requests();
  r->set_name(std::string(kMaxNameBytes + 1, 'n'));
  r->add_shape(4);
  s = SessionEndsWith("victim2", long_name);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("longer than the 1024 bytes allowed"));
}

TEST_F(HostileInputTest, LimitsOnNamesAndPendingTensorsReachTheClient) {
  auto contexts = cluster_->Join("greedy", 2);
  ASSERT_EQ(contexts.size(), 2u);
  // Rank 0 alone submits more tensors than may be pending (8): its context fails with
  // RESOURCE_EXHAUSTED naming the limit; the rest of the coordinator is untouched.
  std::vector<Handle> handles;
  std::vector<float> v(4, 1.0f);
  for (int i = 0; i < 12; ++i) {
    handles.push_back(
        contexts[0]->Allreduce(absl::StrCat("t", i), v.data(), v.data(), DataType::kFloat32, {4}));
  }
  absl::Status last = handles.back().Wait();
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_THAT(last.message(), HasSubstr("--max_pending_tensors"));
  for (auto& ctx : contexts) ctx->Shutdown().IgnoreError();

  // A name beyond kMaxNameBytes fails that one op at once on the rank that submitted it; the
  // job goes on.
  auto named = cluster_->Join("named", 2);
  ASSERT_EQ(named.size(), 2u);
  Handle too_long = named[0]->Allreduce(std::string(100 * 1024, 'n'), v.data(), v.data(),
                                        DataType::kFloat32, {4});
  ASSERT_TRUE(too_long.Poll()) << "refused before anything left the process";
  absl::Status s = too_long.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("name of 102400 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("longer than the 1024 bytes allowed"));
  OnEveryRank(2, [&](int rank) {
    std::vector<float> x(4, 1.0f);
    EXPECT_TRUE(named[rank]
                    ->Allreduce(std::string(kMaxNameBytes, 'm'), x.data(), x.data(),
                                DataType::kFloat32, {4})
                    .Wait()
                    .ok());
    EXPECT_EQ(x[0], 2.0f);
  });
  for (auto& ctx : named) ctx->Shutdown().IgnoreError();
}

}  // namespace
}  // namespace troika::testing
