// A bad coordinator address fails Context::Init promptly, naming the address and the cause:
// a malformed one, a missing socket or a host that does not resolve at once; one where nothing
// accepts connections within the connect timeout — never after the 60 s attach timeout. Only
// loopback is ever contacted ('.invalid' names never resolve, RFC 6761).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "troika/troika.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

Options RankOptions(const std::string& coordinator) {
  Options o;
  o.coordinator = coordinator;
  o.plaintext = true;
  o.job = "address-test";
  o.rank = 0;
  o.size = 1;
  o.host = "localhost";
  o.job_token = "address-test-token";
  return o;
}

// A loopback port nothing listens on: bound, then closed.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(CoordinatorAddressTest, MalformedAddressesFailInitAtOnceSayingWhatIsWrong) {
  struct Case {
    std::string address;
    std::string what;
  };
  for (const Case& c : std::vector<Case>{{"no-port-here", "no port"},
                                         {"localhost:0", "port 0 is out of range (1-65535)"},
                                         {"localhost:99999", "port 99999 is out of range"},
                                         {"[::1", "'[' without a closing ']'"},
                                         {":7070", "empty host"},
                                         {"localhost:http", "port 'http' is not a number"}}) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Init(RankOptions(c.address));
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << c.address;
    ASSERT_FALSE(ctx.ok()) << c.address;
    EXPECT_TRUE(absl::IsInvalidArgument(ctx.status())) << ctx.status();
    EXPECT_THAT(
        std::string(ctx.status().message()),
        HasSubstr(absl::StrCat("coordinator address '", c.address, "' is invalid: ", c.what)));
  }
}

TEST(CoordinatorAddressTest, MissingSocketFailsInitAtOnce) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Context>> ctx =
      Context::Init(RankOptions("unix:/nonexistent/troika-agent.sock"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  ASSERT_FALSE(ctx.ok());
  EXPECT_TRUE(absl::IsUnavailable(ctx.status())) << ctx.status();
  EXPECT_THAT(std::string(ctx.status().message()),
              HasSubstr("cannot reach the coordinator at unix:/nonexistent/troika-agent.sock: no "
                        "socket at /nonexistent/troika-agent.sock (No such file or directory)"));
}

TEST(CoordinatorAddressTest, UnresolvableHostFailsInitSayingItDoesNotResolve) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Context>> ctx =
      Context::Init(RankOptions("troika-no-such-host.invalid:7070"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  ASSERT_FALSE(ctx.ok());
  EXPECT_TRUE(absl::IsUnavailable(ctx.status())) << ctx.status();
  EXPECT_THAT(std::string(ctx.status().message()),
              HasSubstr("cannot reach the coordinator at troika-no-such-host.invalid:7070: cannot "
                        "resolve host 'troika-no-such-host.invalid'"));
}

TEST(CoordinatorAddressTest, RefusedConnectionFailsInitWithinTheConnectTimeout) {
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  {
    const absl::Time start = absl::Now();  // the default connect timeout: 10 s
    absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Init(RankOptions(address));
    const absl::Duration took = absl::Now() - start;
    EXPECT_LT(took, absl::Seconds(15));
    EXPECT_GE(took, absl::Seconds(9)) << "a coordinator still starting gets the connect timeout";
    ASSERT_FALSE(ctx.ok());
    EXPECT_TRUE(absl::IsUnavailable(ctx.status())) << ctx.status();
    EXPECT_THAT(std::string(ctx.status().message()),
                HasSubstr(absl::StrCat("cannot reach the coordinator at ", address,
                                       " within 10s: nothing accepts connections there "
                                       "(connection refused)")));
  }
  Options options = RankOptions(address);
  options.connect_timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::Init(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  ASSERT_FALSE(ctx.ok());
  EXPECT_THAT(std::string(ctx.status().message()),
              HasSubstr(absl::StrCat("cannot reach the coordinator at ", address, " within 1s")));
}

// The variables a rank needs, set for one test's scope; unset after it, with the optional ones
// the tests below set.
class RankEnvironment {
 public:
  RankEnvironment() {
    for (const auto& [name, value] : kRequired) setenv(name, value, 1);
  }
  ~RankEnvironment() {
    for (const auto& [name, value] : kRequired) unsetenv(name);
    for (const char* name : {"TROIKA_CONNECT_TIMEOUT", "TROIKA_EPOCH", "TROIKA_DATA_TIMEOUT",
                             "HOROVOD_GLOO_TIMEOUT_SECONDS"}) {
      unsetenv(name);
    }
  }
  RankEnvironment(const RankEnvironment&) = delete;
  RankEnvironment& operator=(const RankEnvironment&) = delete;

 private:
  static constexpr std::pair<const char*, const char*> kRequired[] = {
      {"TROIKA_COORDINATOR", "127.0.0.1:1"},
      {"TROIKA_JOB", "j"},
      {"TROIKA_RANK", "0"},
      {"TROIKA_SIZE", "1"}};
};

TEST(CoordinatorAddressTest, ConnectTimeoutComesFromTheEnvironment) {
  RankEnvironment environment;
  setenv("TROIKA_CONNECT_TIMEOUT", "2.5", 1);
  absl::StatusOr<Options> options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->connect_timeout, absl::Milliseconds(2500));
  setenv("TROIKA_CONNECT_TIMEOUT", "soon", 1);
  options = Options::FromEnvironment();
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  EXPECT_THAT(std::string(options.status().message()),
              HasSubstr("TROIKA_CONNECT_TIMEOUT='soon' is not a positive number of seconds"));
  unsetenv("TROIKA_CONNECT_TIMEOUT");
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->connect_timeout, absl::Seconds(10));
}

// An elastic rank's generation, as its agent sets it (docs/agent.md).
TEST(CoordinatorAddressTest, EpochComesFromTheEnvironment) {
  RankEnvironment environment;
  absl::StatusOr<Options> options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->epoch, 0) << "not said";
  setenv("TROIKA_EPOCH", "3", 1);
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->epoch, 3);
  for (const char* bad : {"-1", "two"}) {
    setenv("TROIKA_EPOCH", bad, 1);
    options = Options::FromEnvironment();
    EXPECT_TRUE(absl::IsInvalidArgument(options.status())) << bad;
    EXPECT_THAT(std::string(options.status().message()),
                HasSubstr(absl::StrCat("TROIKA_EPOCH='", bad, "' is not a non-negative integer")));
  }
}

// The data plane's settings (docs/shm.md): "auto" unless TROIKA_TRANSPORT says otherwise, and
// the hierarchical switches in Troika's or Horovod's spelling (Troika's first).
TEST(CoordinatorAddressTest, DataPlaneSettingsComeFromTheEnvironment) {
  RankEnvironment environment;
  absl::StatusOr<Options> options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->transport, "auto");
  EXPECT_FALSE(options->hierarchical_allreduce.has_value());
  EXPECT_FALSE(options->hierarchical_allgather.has_value());
  setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "1", 1);
  setenv("HOROVOD_HIERARCHICAL_ALLGATHER", "0", 1);
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->hierarchical_allreduce, true);
  EXPECT_EQ(options->hierarchical_allgather, false);
  setenv("TROIKA_HIERARCHICAL_ALLREDUCE", "false", 1);
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->hierarchical_allreduce, false);
  setenv("TROIKA_HIERARCHICAL_ALLGATHER", "maybe", 1);
  options = Options::FromEnvironment();
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  EXPECT_THAT(std::string(options.status().message()),
              HasSubstr("TROIKA_HIERARCHICAL_ALLGATHER='maybe' is not 1 or 0"));
  for (const char* name : {"HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLGATHER",
                           "TROIKA_HIERARCHICAL_ALLREDUCE", "TROIKA_HIERARCHICAL_ALLGATHER"}) {
    unsetenv(name);
  }
}

// The data plane's timeout: TROIKA_DATA_TIMEOUT, else Horovod's HOROVOD_GLOO_TIMEOUT_SECONDS
// (the variable horovodrun leaves to the ranks when --gloo-timeout-seconds is not given:
// Horovod's test_library_env_override), else 300 s.
TEST(CoordinatorAddressTest, DataTimeoutFromTroikasVariableOrHorovodsGlooTimeout) {
  RankEnvironment environment;
  absl::StatusOr<Options> options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->data_timeout, absl::Seconds(300));
  setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "1800", 1);
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->data_timeout, absl::Seconds(1800));
  setenv("TROIKA_DATA_TIMEOUT", "60", 1);
  options = Options::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->data_timeout, absl::Seconds(60)) << "Troika's own variable wins";
  unsetenv("TROIKA_DATA_TIMEOUT");
  setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "never", 1);
  options = Options::FromEnvironment();
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  EXPECT_THAT(
      std::string(options.status().message()),
      HasSubstr("HOROVOD_GLOO_TIMEOUT_SECONDS='never' is not a positive number of seconds"));
}

}  // namespace
}  // namespace troika::testing
