// Per-job tokens and the admin credential, end to end through gRPC: a wrong token, another
// job's token or none is PERMISSION_DENIED, changes nothing, and the legitimate jobs go on.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/admin/admin_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdmin[] = "the-admin-token";

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TROIKA_JOB_TOKEN");
    coordinator::CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.tls.plaintext = true;
    options.service.admin_token = coordinator::Secret::Of(kAdmin);
    auto c = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
    stub_ =
        v1::Coordinator::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  Options Rank(const std::string& job, int rank, int size, const std::string& token) const {
    Options o;
    o.coordinator = address_;
    o.plaintext = true;
    o.job = job;
    o.rank = rank;
    o.size = size;
    o.host = "localhost";
    o.job_token = token;
    o.attach_timeout = absl::Seconds(20);
    return o;
  }

  // A call context carrying `token` as the job token (none if empty).
  static std::unique_ptr<grpc::ClientContext> WithToken(const std::string& token,
                                                        const char* header = kJobTokenHeader) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) context->AddMetadata(header, token);
    return context;
  }

  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::string address_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(TokenTest, WrongMissingOrAnotherJobsTokenIsDeniedAndChangesNothing) {
  // Job "a" (2 ranks, token "token-a") trains; job "b" exists with "token-b".
  std::vector<std::unique_ptr<Context>> a(2);
  OnEveryRank(2, [&](int rank) {
    auto ctx = Context::Init(Rank("a", rank, 2, "token-a"));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    a[rank] = *std::move(ctx);
  });
  auto b = Context::Init(Rank("b", 0, 1, "token-b"));
  ASSERT_TRUE(b.ok()) << b.status();

  for (const std::string& token :
       {std::string("guess-5eed"), std::string("token-b"), std::string()}) {
    const std::string what = token.empty() ? "no token" : token;
    // Joining job "a" (it has room: a rank of a 3-rank job would be refused anyway).
    Options o = Rank("a", 1, 2, token);
    o.attach_timeout = absl::Seconds(2);
    auto joined = Context::Init(o);
    ASSERT_FALSE(joined.ok()) << what;
    EXPECT_EQ(joined.status().code(), absl::StatusCode::kPermissionDenied) << joined.status();
    EXPECT_THAT(joined.status().message(),
                HasSubstr(token.empty() ? "carries no job token" : "wrong job token"));
    if (!token.empty()) {
      EXPECT_THAT(joined.status().message(), Not(HasSubstr(token)));
    }

    // The job's store: a write is refused and leaves nothing behind.
    v1::KvSetRequest set;
    set.set_job("a");
    set.set_key("planted");
    set.set_value("x");
    v1::KvSetResponse set_response;
    EXPECT_EQ(stub_->KvSet(WithToken(token).get(), set, &set_response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << what;
    // The session stream: hello is answered by the end of the stream.
    auto context = WithToken(token);
    auto stream = stub_->Session(context.get());
    v1::Up hello;
    hello.mutable_hello()->set_job("a");
    hello.mutable_hello()->add_ranks(0);
    hello.mutable_hello()->set_epoch(1);
    stream->Write(hello);
    stream->WritesDone();
    v1::Down down;
    while (stream->Read(&down)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED) << what;
    // Creating job "a" anew (a lookup of the existing one) reveals nothing, not even its size.
    v1::CreateJobRequest create;
    create.set_job("a");
    create.set_size(7);
    v1::CreateJobResponse create_response;
    grpc::Status created = stub_->CreateJob(WithToken(token).get(), create, &create_response);
    EXPECT_EQ(created.error_code(), grpc::StatusCode::PERMISSION_DENIED) << what;
    EXPECT_THAT(created.error_message(), Not(HasSubstr("2 ranks")));
  }
  v1::KvGetRequest get;
  get.set_job("a");
  get.set_key("planted");
  v1::KvGetResponse get_response;
  EXPECT_EQ(stub_->KvGet(WithToken("token-a").get(), get, &get_response).error_code(),
            grpc::StatusCode::NOT_FOUND)
      << "a refused write left a key behind";

  // Both jobs are unaffected.
  OnEveryRank(2, [&](int rank) {
    std::vector<int32_t> v(4, rank + 1);
    ASSERT_TRUE(a[rank]->Allreduce("w", v.data(), v.data(), DataType::kInt32, {4}).Wait().ok());
    EXPECT_EQ(v[0], 3);
  });
  std::vector<int32_t> v(4, 5);
  ASSERT_TRUE((*b)->Allreduce("w", v.data(), v.data(), DataType::kInt32, {4}).Wait().ok());
  EXPECT_EQ(v[0], 5);
  for (auto& ctx : a) EXPECT_TRUE(ctx->Shutdown().ok());
  EXPECT_TRUE((*b)->Shutdown().ok());
}

TEST_F(TokenTest, AJobCreatedWithoutATokenGetsAGeneratedOne) {
  v1::CreateJobRequest create;
  create.set_job("solo");
  create.set_size(2);
  v1::CreateJobResponse created;
  ASSERT_TRUE(stub_->CreateJob(WithToken("").get(), create, &created).ok());
  ASSERT_EQ(created.token().size(), 64u) << "32 random bytes, hex";
  // Only the creator learns it: a second lookup returns none.
  v1::CreateJobResponse again;
  ASSERT_TRUE(stub_->CreateJob(WithToken(created.token()).get(), create, &again).ok());
  EXPECT_TRUE(again.token().empty());
  EXPECT_EQ(stub_->CreateJob(WithToken("").get(), create, &again).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Ranks with the token join it.
  OnEveryRank(2, [&](int rank) {
    auto ctx = Context::Init(Rank("solo", rank, 2, created.token()));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_TRUE((*ctx)->Barrier().Wait().ok());
    EXPECT_TRUE((*ctx)->Shutdown().ok());
  });
}

TEST_F(TokenTest, AdministrativeCallsNeedTheAdminToken) {
  auto ctx = Context::Init(Rank("watched", 0, 1, "token-w"));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const std::string& token : {std::string(), std::string("wrong"), std::string("token-w")}) {
    coordinator::AdminClient admin(address_, {.plaintext = true}, token);
    EXPECT_EQ(admin.ListJobs().status().code(), absl::StatusCode::kPermissionDenied) << token;
    EXPECT_EQ(admin.CancelJob("watched", "no").code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(admin.StartTimeline("watched", "t.json", 0).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(admin.StopTimeline("watched").status().code(), absl::StatusCode::kPermissionDenied);
  }
  // The job's own token may describe its job, and only its job.
  v1::DescribeJobRequest describe;
  describe.set_job("watched");
  v1::JobDescription description;
  EXPECT_TRUE(stub_->DescribeJob(WithToken("token-w").get(), describe, &description).ok());
  EXPECT_EQ(stub_->DescribeJob(WithToken("wrong").get(), describe, &description).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // The refused cancel changed nothing: the job still trains.
  std::vector<float> v(4, 1.0f);
  ASSERT_TRUE((*ctx)->Allreduce("w", v.data(), v.data(), DataType::kFloat32, {4}).Wait().ok());
  coordinator::AdminClient admin(address_, {.plaintext = true}, kAdmin);
  auto jobs = admin.ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  EXPECT_TRUE(admin.DescribeJob("watched").ok());
  EXPECT_TRUE(admin.CancelJob("watched", "enough").ok());
  (*ctx)->Shutdown().IgnoreError();
}

TEST(TokenlessCoordinatorTest, WithoutAnAdminTokenAdministrativeCallsAreDisabled) {
  coordinator::CoordinatorOptions options;
  options.listen_address = "127.0.0.1:0";
  options.tls.plaintext = true;
  auto c = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(c.ok()) << c.status();
  coordinator::AdminClient admin(absl::StrCat("127.0.0.1:", (*c)->port()), {.plaintext = true},
                                 "anything");
  absl::Status s = admin.ListJobs().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("--admin_token_file"));
}

}  // namespace
}  // namespace troika::testing
