#include "common/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace troika {
namespace {

constexpr char kExpected[] = "expected host:port, [ipv6]:port or unix:/path/to/socket";

absl::Status Invalid(absl::string_view address, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("coordinator address '", address, "' is invalid: ", what, " (", kExpected, ")"));
}

absl::Status Unreachable(absl::string_view address, absl::string_view cause) {
  return absl::UnavailableError(
      absl::StrCat("cannot reach the coordinator at ", address, ": ", cause));
}

bool IsIpv4(const std::string& host) {
  in_addr a;
  return inet_pton(AF_INET, host.c_str(), &a) == 1;
}

bool IsIpv6(absl::string_view host) {
  // A zone ("fe80::1%eth0") is gRPC's business; the address before it must be valid.
  const std::string bare(host.substr(0, host.find('%')));
  in6_addr a;
  return inet_pton(AF_INET6, bare.c_str(), &a) == 1;
}

bool IsHostNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// Whether `host` resolves (getaddrinfo), given at most `timeout`: nullopt if the lookup did
// not finish by then (it goes on in the background and is forgotten), else getaddrinfo's error
// ("" when it resolved).
std::optional<std::string> Resolve(const std::string& host, absl::Duration timeout) {
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error;
  };
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
    const int saved_errno = errno;
    if (result != nullptr) freeaddrinfo(result);
    std::lock_guard<std::mutex> lock(lookup->mu);
    if (rc == EAI_SYSTEM) {
      lookup->error = strerror(saved_errno);
    } else if (rc != 0) {
      lookup->error = gai_strerror(rc);
    }
    lookup->done = true;
    lookup->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(lookup->mu);
  if (!lookup->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                           [&] { return lookup->done; })) {
    return std::nullopt;
  }
  return lookup->error;
}

// Why `channel` is not connected, as a call that does not wait for it finds out: gRPC's last
// connection error. Empty if the call reached a server after all (any answer will do).
std::string WhyNotConnected(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // a default-constructed one is not a message
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  // No such method: a server that gets it answers UNIMPLEMENTED, and nothing else happens.
  stub.UnaryCall(&context, "/troika.v1.Coordinator/ConnectivityProbe", grpc::StubOptions(),
                 &request, &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return "";
  }
  const std::string& message = status.error_message();
  if (absl::StrContains(message, "Connection refused")) {
    return "nothing accepts connections there (connection refused)";
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || message.empty()) {
    return "the connection attempt got no answer";
  }
  return message;
}

}  // namespace

absl::StatusOr<CoordinatorAddress> ParseCoordinatorAddress(absl::string_view address) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no coordinator address given (", kExpected, ")"));
  }
  for (char c : address) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return Invalid(address, "it contains whitespace or a control character");
    }
  }
  CoordinatorAddress a;
  a.text = std::string(address);
  absl::string_view rest = address;
  if (absl::ConsumePrefix(&rest, "unix:")) {
    // gRPC's forms: unix:path (relative), unix:/path, unix:///path (an empty authority).
    if (absl::StartsWith(rest, "//") && !absl::StartsWith(rest, "///")) {
      return Invalid(address, "unix:// must be followed by an absolute path (unix:///path)");
    }
    if (absl::StartsWith(rest, "//")) rest.remove_prefix(2);
    if (rest.empty()) return Invalid(address, "empty socket path");
    if (rest.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return Invalid(address,
                     absl::StrCat("the socket path is ", rest.size(), " bytes long; the limit is ",
                                  sizeof(sockaddr_un{}.sun_path) - 1));
    }
    a.is_unix_socket = true;
    a.socket_path = std::string(rest);
    return a;
  }
  if (absl::ConsumePrefix(&rest, "dns:") && !absl::ConsumePrefix(&rest, "///")) {
    return Invalid(address, "dns: must be followed by /// (dns:///host:port)");
  }
  if (absl::StrContains(rest, "://")) {
    return Invalid(address, "unsupported scheme");
  }
  if (absl::StrContains(rest, '/')) {
    return Invalid(address, "a network address has no '/' (a Unix socket is unix:/path)");
  }
  absl::string_view host;
  absl::string_view port;
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return Invalid(address, "'[' without a closing ']'");
    host = rest.substr(1, close - 1);
    const absl::string_view after = rest.substr(close + 1);
    if (host.empty()) return Invalid(address, "empty host");
    if (!IsIpv6(host)) {
      return Invalid(address, absl::StrCat("'", host, "' in brackets is not an IPv6 address"));
    }
    if (after.empty()) return Invalid(address, "no port");
    if (after[0] != ':') return Invalid(address, "expected ':' and a port after ']'");
    port = after.substr(1);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) return Invalid(address, "no port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (absl::StrContains(host, ':')) {
      return Invalid(address, IsIpv6(rest)
                                  ? "no port (an IPv6 address goes in brackets: [::1]:7070)"
                                  : "too many ':' (an IPv6 address goes in brackets: "
                                    "[::1]:7070)");
    }
    if (host.empty()) return Invalid(address, "empty host");
    for (char c : host) {
      if (!IsHostNameChar(c)) {
        return Invalid(address, absl::StrCat("host '", host, "' contains '", std::string(1, c),
                                             "' (a host is a name, an IPv4 address, or an "
                                             "IPv6 address in brackets)"));
      }
    }
  }
  if (port.empty()) return Invalid(address, "no port");
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return Invalid(address, absl::StrCat("port '", port, "' is not a number"));
    }
  }
  int value = 0;
  if (port.size() > 5 || !absl::SimpleAtoi(port, &value) || value < 1 || value > 65535) {
    return Invalid(address, absl::StrCat("port ", port, " is out of range (1-65535)"));
  }
  a.host = std::string(host);
  a.port = value;
  return a;
}

absl::Status CheckCoordinatorEndpoint(const CoordinatorAddress& address,
                                      absl::Duration resolve_timeout) {
  if (address.is_unix_socket) {
    struct stat st;
    if (stat(address.socket_path.c_str(), &st) != 0) {
      return Unreachable(address.text, absl::StrCat("no socket at ", address.socket_path, " (",
                                                    strerror(errno), ")"));
    }
    if (!S_ISSOCK(st.st_mode)) {
      return Unreachable(address.text, absl::StrCat(address.socket_path, " is not a socket"));
    }
    return absl::OkStatus();
  }
  if (IsIpv4(address.host) || IsIpv6(address.host)) return absl::OkStatus();
  const std::optional<std::string> error = Resolve(address.host, resolve_timeout);
  if (error.has_value() && !error->empty()) {
    return Unreachable(address.text,
                       absl::StrCat("cannot resolve host '", address.host, "': ", *error));
  }
  return absl::OkStatus();  // resolved, or still resolving: gRPC resolves it again anyway
}

absl::StatusOr<CoordinatorAddress> CheckCoordinatorAddress(absl::string_view address,
                                                           absl::Duration resolve_timeout) {
  absl::StatusOr<CoordinatorAddress> parsed = ParseCoordinatorAddress(address);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status s = CheckCoordinatorEndpoint(*parsed, resolve_timeout); !s.ok()) return s;
  return parsed;
}

absl::Status WaitForCoordinator(const std::shared_ptr<grpc::Channel>& channel,
                                const CoordinatorAddress& address, absl::Duration timeout,
                                const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          absl::StrCat("stopped waiting for the coordinator at ", address.text));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    channel->WaitForStateChange(
        state, absl::ToChronoTime(std::min(deadline, now + absl::Milliseconds(100))));
  }
  const std::string why = WhyNotConnected(channel);
  if (why.empty()) return absl::OkStatus();  // connected meanwhile
  return absl::UnavailableError(absl::StrCat("cannot reach the coordinator at ", address.text,
                                             " within ", absl::FormatDuration(timeout), ": ", why));
}

}  // namespace troika
