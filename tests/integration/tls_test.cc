// Transport security of the control plane: a coordinator serving TLS and mutual TLS, ranks and
// admin clients with and without the right credentials. Certificates are made fresh per test
// run with openssl (a CA, a server certificate for 127.0.0.1, a client certificate, and a
// client certificate from another CA).

#include <stdlib.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/admin/admin_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unsetenv("TROIKA_PLAINTEXT");
    char pattern[] = "/tmp/troika-tls-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string d = *dir_;
    // EC keys: fast to make. Server SAN 127.0.0.1 and localhost.
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = absl::StrCat(
        "set -e; cd ", d, "; ",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext; ",
        "for ca in ca rogue; do openssl req -x509 ", key, " -keyout $ca.key -out $ca.crt ",
        "-days 2 -subj /CN=troika-test-$ca; done; ", "openssl req ", key,
        " -keyout server.key -out server.csr -subj /CN=localhost; ",
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial ",
        "-out server.crt -days 2 -extfile server.ext; ",
        "for who in client:ca intruder:rogue; do name=${who%%:*}; ca=${who#*:}; ", "openssl req ",
        key, " -keyout $name.key -out $name.csr -subj /CN=$name; ",
        "openssl x509 -req -in $name.csr -CA $ca.crt -CAkey $ca.key -CAcreateserial ",
        "-out $name.crt -days 2; done");
    { std::ofstream(d + "/make-certs.sh") << script << "\n"; }
    std::string output;
    ASSERT_EQ(RunCommand("sh " + d + "/make-certs.sh", &output), 0) << output;
  }
  static void TearDownTestSuite() {
    std::string output;
    RunCommand("rm -rf " + *dir_, &output);
    delete dir_;
  }

  static std::string File(const std::string& name) { return *dir_ + "/" + name; }

  std::unique_ptr<coordinator::Coordinator> Start(bool mutual) {
    coordinator::CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.tls.cert_file = File("server.crt");
    options.tls.key_file = File("server.key");
    if (mutual) options.tls.client_ca_file = File("ca.crt");
    options.service.admin_token = coordinator::Secret::Of("admin");
    auto c = coordinator::Coordinator::Start(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static Options Rank(const coordinator::Coordinator& c, const std::string& job, int rank,
                      int size) {
    Options o;
    o.coordinator = absl::StrCat("127.0.0.1:", c.port());
    o.job = job;
    o.rank = rank;
    o.size = size;
    o.host = "localhost";
    o.tls_ca = File("ca.crt");
    o.job_token = "token-of-" + job;
    o.attach_timeout = absl::Seconds(20);
    return o;
  }

  // Runs a 2-rank job with `options_for(rank)`; every rank must get the right sum.
  static void RunJob(const std::function<Options(int)>& options_for) {
    OnEveryRank(2, [&](int rank) {
      auto ctx = Context::Init(options_for(rank));
      ASSERT_TRUE(ctx.ok()) << "rank " << rank << ": " << ctx.status();
      std::vector<float> v(16, static_cast<float>(rank + 1));
      ASSERT_TRUE((*ctx)->Allreduce("w", v.data(), v.data(), DataType::kFloat32, {16}).Wait().ok());
      EXPECT_EQ(v[0], 3.0f);
      EXPECT_TRUE((*ctx)->Shutdown().ok());
    });
  }

  static std::string* dir_;
};

std::string* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, RanksWithTheCaTrainOverTlsAndPlaintextIsRefused) {
  auto c = Start(/*mutual=*/false);
  ASSERT_NE(c, nullptr);
  RunJob([&](int rank) { return Rank(*c, "tls", rank, 2); });

  // A plaintext client cannot talk to a TLS coordinator.
  Options plain = Rank(*c, "plain", 0, 1);
  plain.tls_ca.clear();
  plain.plaintext = true;
  plain.attach_timeout = absl::Seconds(3);
  auto refused = Context::Init(plain);
  EXPECT_FALSE(refused.ok());
  // Neither a CA nor plaintext: refused before anything is sent, saying what to set.
  Options neither = Rank(*c, "neither", 0, 1);
  neither.tls_ca.clear();
  auto unset = Context::Init(neither);
  EXPECT_EQ(unset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unset.status().message(), HasSubstr("TROIKA_TLS_CA"));
  // A CA that did not sign the server's certificate: no connection.
  Options wrong_ca = Rank(*c, "wrong-ca", 0, 1);
  wrong_ca.tls_ca = File("rogue.crt");
  wrong_ca.attach_timeout = absl::Seconds(3);
  EXPECT_FALSE(Context::Init(wrong_ca).ok());
}

TEST_F(TlsTest, MutualTlsRefusesClientsWithoutACertificateFromItsCa) {
  auto c = Start(/*mutual=*/true);
  ASSERT_NE(c, nullptr);
  auto with_cert = [&](const std::string& job, int rank, int size) {
    Options o = Rank(*c, job, rank, size);
    o.tls_cert = File("client.crt");
    o.tls_key = File("client.key");
    return o;
  };
  // The legitimate job, before and after the refusals.
  RunJob([&](int rank) { return with_cert("legit", rank, 2); });
  const int64_t jobs_before = c->registry().counts().started;
  for (const char* who : {"", "intruder"}) {
    Options o = Rank(*c, absl::StrCat("bad-", who), 0, 1);
    if (*who != '\0') {
      o.tls_cert = File(absl::StrCat(who, ".crt"));
      o.tls_key = File(absl::StrCat(who, ".key"));
    }
    o.attach_timeout = absl::Seconds(3);
    auto refused = Context::Init(o);
    ASSERT_FALSE(refused.ok()) << (*who ? who : "no certificate");
    EXPECT_THAT(refused.status().code(),
                AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
        << refused.status();
  }
  EXPECT_EQ(c->registry().counts().started, jobs_before) << "a refused client created a job";
  RunJob([&](int rank) { return with_cert("legit-again", rank, 2); });

  // Administrative clients too.
  const std::string address = absl::StrCat("127.0.0.1:", c->port());
  coordinator::AdminClient admin(address, {File("ca.crt"), File("client.crt"), File("client.key")},
                                 "admin");
  EXPECT_TRUE(admin.ListJobs().ok());
  coordinator::AdminClient anonymous(address, {File("ca.crt")}, "admin", absl::Seconds(3));
  EXPECT_FALSE(anonymous.ListJobs().ok());
}

TEST_F(TlsTest, ListenerNeedsACertificateOrAnExplicitPlaintext) {
  coordinator::CoordinatorOptions options;
  options.listen_address = "127.0.0.1:0";
  auto none = coordinator::Coordinator::Start(options);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("--plaintext"));

  options.tls.cert_file = File("server.crt");
  options.tls.key_file = File("missing.key");
  auto missing = coordinator::Coordinator::Start(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(File("missing.key")));

  options.tls.key_file = File("server.key");
  options.tls.plaintext = true;
  EXPECT_EQ(coordinator::Coordinator::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A key is never echoed, even when it is not what was expected.
  options.tls.plaintext = false;
  options.tls.cert_file = File("server.ext");
  auto not_pem = coordinator::Coordinator::Start(options);
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_pem.status().message(), HasSubstr("is not PEM"));
  EXPECT_THAT(not_pem.status().message(), ::testing::Not(HasSubstr("subjectAltName")));
}

}  // namespace
}  // namespace troika::testing
