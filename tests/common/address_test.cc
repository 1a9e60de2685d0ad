// The coordinator address every client parses (common/address.h): the accepted forms, what
// each malformed one is told, and the checks that need no connection.

#include "common/address.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika {
namespace {

using ::testing::HasSubstr;

TEST(CoordinatorAddressTest, AcceptsEveryDocumentedForm) {
  struct Case {
    std::string text;
    bool is_unix_socket;
    std::string host;
    int port;
    std::string path;
  };
  for (const Case& c : std::vector<Case>{
           {"127.0.0.1:7070", false, "127.0.0.1", 7070, ""},
           {"coordinator.troika.svc:1", false, "coordinator.troika.svc", 1, ""},
           {"my_host-2:65535", false, "my_host-2", 65535, ""},
           {"[::1]:7070", false, "::1", 7070, ""},
           {"[fe80::1%eth0]:7070", false, "fe80::1%eth0", 7070, ""},
           {"dns:///coordinator:7070", false, "coordinator", 7070, ""},
           {"dns:///[::1]:7070", false, "::1", 7070, ""},
           {"unix:/tmp/troika-agent-1.sock", true, "", 0, "/tmp/troika-agent-1.sock"},
           {"unix:///tmp/c.sock", true, "", 0, "/tmp/c.sock"},
           {"unix:relative/c.sock", true, "", 0, "relative/c.sock"},
       }) {
    absl::StatusOr<CoordinatorAddress> a = ParseCoordinatorAddress(c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status();
    EXPECT_EQ(a->text, c.text);
    EXPECT_EQ(a->is_unix_socket, c.is_unix_socket) << c.text;
    EXPECT_EQ(a->host, c.host) << c.text;
    EXPECT_EQ(a->port, c.port) << c.text;
    EXPECT_EQ(a->socket_path, c.path) << c.text;
  }
}

TEST(CoordinatorAddressTest, MalformedAddressesSayWhatIsWrong) {
  struct Case {
    std::string text;
    std::string what;
  };
  for (const Case& c : std::vector<Case>{
           {"no-port-here", "no port"},
           {"host:", "no port"},
           {"host:0", "port 0 is out of range (1-65535)"},
           {"host:99999", "port 99999 is out of range (1-65535)"},
           {"host:123456789012", "port 123456789012 is out of range"},
           {"host:-1", "port '-1' is not a number"},
           {"host:http", "port 'http' is not a number"},
           {":7070", "empty host"},
           {"[]:7070", "empty host"},
           {"[::1", "'[' without a closing ']'"},
           {"[::1]", "no port"},
           {"[::1]7070", "expected ':' and a port after ']'"},
           {"[not-v6]:7070", "'not-v6' in brackets is not an IPv6 address"},
           {"::1:7070", "an IPv6 address goes in brackets"},
           {"a:b:7070", "too many ':'"},
           {"host name:7070", "whitespace"},
           {"http://host:7070", "unsupported scheme"},
           {"host/x:7070", "a network address has no '/'"},
           {"dns:host:7070", "dns: must be followed by ///"},
           {"h@st:7070", "host 'h@st' contains '@'"},
           {"unix:", "empty socket path"},
           {"unix://host/path", "unix:// must be followed by an absolute path"},
           {absl::StrCat("unix:/", std::string(200, 'x')), "the socket path is 201 bytes long"},
       }) {
    absl::StatusOr<CoordinatorAddress> a = ParseCoordinatorAddress(c.text);
    ASSERT_FALSE(a.ok()) << c.text;
    EXPECT_TRUE(absl::IsInvalidArgument(a.status())) << a.status();
    EXPECT_THAT(std::string(a.status().message()),
                HasSubstr(absl::StrCat("coordinator address '", c.text, "' is invalid: ")));
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.what)) << c.text;
    EXPECT_THAT(std::string(a.status().message()),
                HasSubstr("expected host:port, [ipv6]:port or unix:/path/to/socket"));
  }
  absl::StatusOr<CoordinatorAddress> empty = ParseCoordinatorAddress("");
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status()));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("no coordinator address given"));
}

TEST(CoordinatorAddressTest, MissingSocketAndUnresolvableHostFailAtOnce) {
  const absl::Time start = absl::Now();
  absl::StatusOr<CoordinatorAddress> missing =
      CheckCoordinatorAddress("unix:/nonexistent/troika.sock");
  EXPECT_TRUE(absl::IsUnavailable(missing.status())) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("cannot reach the coordinator at unix:/nonexistent/troika.sock: no socket "
                        "at /nonexistent/troika.sock (No such file or directory)"));

  absl::StatusOr<CoordinatorAddress> not_socket = CheckCoordinatorAddress("unix:/dev/null");
  EXPECT_TRUE(absl::IsUnavailable(not_socket.status())) << not_socket.status();
  EXPECT_THAT(std::string(not_socket.status().message()), HasSubstr("/dev/null is not a socket"));

  // RFC 6761: names under .invalid never resolve.
  absl::StatusOr<CoordinatorAddress> unresolvable =
      CheckCoordinatorAddress("troika-no-such-host.invalid:7070");
  EXPECT_TRUE(absl::IsUnavailable(unresolvable.status())) << unresolvable.status();
  EXPECT_THAT(std::string(unresolvable.status().message()),
              HasSubstr("cannot reach the coordinator at troika-no-such-host.invalid:7070: "
                        "cannot resolve host 'troika-no-such-host.invalid': "));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  EXPECT_TRUE(CheckCoordinatorAddress("127.0.0.1:1").ok()) << "an IP needs no lookup";
  EXPECT_TRUE(CheckCoordinatorAddress("[::1]:1").ok());
  EXPECT_TRUE(CheckCoordinatorAddress("localhost:1").ok());
}

TEST(CoordinatorAddressTest, AnExistingSocketPasses) {
  const std::string path = absl::StrCat("/tmp/troika-address-test-", getpid(), ".sock");
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_TRUE(CheckCoordinatorAddress("unix:" + path).ok());
  close(fd);
  unlink(path.c_str());
}

}  // namespace
}  // namespace troika
