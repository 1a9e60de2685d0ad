#pragma once
// The address of a coordinator (or of an agent's socket), as every client of the coordinator
// protocol takes it — ranks (Options::coordinator, TROIKA_COORDINATOR), troika-agent and
// troikarun (--coordinator), troikactl (--coordinator) — and the bounded wait for its channel
// to connect. One parser, one set of messages:
//
//   host:port          a name or an IPv4 address; port 1-65535
//   [v6]:port          an IPv6 address, in brackets
//   dns:///host:port   gRPC's explicit DNS form (dns:///[v6]:port too)
//   unix:/abs/path     a Unix socket (unix:///abs/path and unix:relative/path too)
//
// A malformed address is INVALID_ARGUMENT at once, naming the address and what is wrong ("no
// port", "port 99999 is out of range", "empty host", ...). An address that cannot be reached —
// a socket file that does not exist, a host name that does not resolve, nothing accepting
// connections — is UNAVAILABLE naming the address and the cause: "cannot reach the
// coordinator at ADDRESS: ...".
//
// Thread-safe (pure functions, or blocking calls on a thread-safe channel).

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace troika {

// How long a client waits for its first connection to the coordinator unless told otherwise
// (Options::connect_timeout / TROIKA_CONNECT_TIMEOUT, troika-agent --connect_timeout).
inline constexpr absl::Duration kDefaultConnectTimeout = absl::Seconds(10);

struct CoordinatorAddress {
  std::string text;  // as given; also what gRPC is given
  bool is_unix_socket = false;
  std::string host;         // network: the name or address, without brackets
  int port = 0;             // network: 1-65535
  std::string socket_path;  // Unix socket: the path (relative to the working directory
                            // unless it starts with '/')
};

// INVALID_ARGUMENT "coordinator address 'X' is invalid: WHAT (expected ...)".
absl::StatusOr<CoordinatorAddress> ParseCoordinatorAddress(absl::string_view address);

// What can be known without connecting: a Unix socket must exist and be a socket; a host name
// must resolve (getaddrinfo, given at most `resolve_timeout`; a lookup still going on then is
// left to gRPC). UNAVAILABLE "cannot reach the coordinator at X: no socket at PATH (...)" or
// "...: cannot resolve host 'h': <gai_strerror>".
absl::Status CheckCoordinatorEndpoint(const CoordinatorAddress& address,
                                      absl::Duration resolve_timeout = absl::Seconds(10));

// Parses `address` and checks its endpoint: the error of whichever fails.
absl::StatusOr<CoordinatorAddress> CheckCoordinatorAddress(
    absl::string_view address, absl::Duration resolve_timeout = absl::Seconds(10));

// Waits up to `timeout` for `channel` (to `address`) to connect. UNAVAILABLE "cannot reach the
// coordinator at X within 10s: <cause>" — "nothing accepts connections there (connection
// refused)", or gRPC's reason (a failed TLS handshake, ...) — if it did not; CANCELLED if
// `cancelled` (polled every 100 ms; may be empty) returned true first.
absl::Status WaitForCoordinator(const std::shared_ptr<grpc::Channel>& channel,
                                const CoordinatorAddress& address, absl::Duration timeout,
                                const std::function<bool()>& cancelled = nullptr);

}  // namespace troika
