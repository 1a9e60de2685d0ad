#pragma once
// Security of the control plane: the credential metadata, and the gRPC credentials of the
// coordinator's listener and of every client of it (ranks, agents, troikactl). TLS unless plaintext
// is asked for explicitly; mutual TLS when the server is given a client CA. Unix-socket addresses
// ("unix:/path", the agent's socket for its ranks) are local: always plaintext, guarded by the
// socket's file permissions.

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace troika {

// Call metadata carrying the credentials the coordinator checks (docs/security.md): a job's
// token on job-scoped calls, the admin token on administrative ones.
inline constexpr char kJobTokenHeader[] = "troika-job-token";
inline constexpr char kAdminTokenHeader[] = "troika-admin-token";

// A token from a file: its contents without surrounding whitespace. NOT_FOUND /
// PERMISSION_DENIED naming the path (never the contents); INVALID_ARGUMENT if empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

struct ServerTls {
  // PEM files: the server's certificate chain and private key. Required unless plaintext.
  std::string cert_file{};
  std::string key_file{};
  // PEM file of the CA that signs client certificates. Set: mutual TLS — a client without a
  // certificate from this CA cannot connect.
  std::string client_ca_file{};
  // No TLS at all (loopback, tests). Must not be combined with the files.
  bool plaintext = false;
};

struct ClientTls {
  // PEM file of the CA that signed the server's certificate. Required for a network address
  // unless plaintext.
  std::string ca_file{};
  // PEM files of this client's certificate and key, for a server that requires mutual TLS.
  std::string cert_file{};
  std::string key_file{};
  bool plaintext = false;
};

// INVALID_ARGUMENT naming the missing or contradictory setting; NOT_FOUND / PERMISSION_DENIED
// for a file that cannot be read (the path is named, the contents never are).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls);
// `address` is where the channel goes: "unix:..." is always plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls, const std::string& address);

// A client's security settings as the environment gives them — the one reading of these
// variables for ranks, agents and troikarun: TROIKA_TLS_CA, TROIKA_TLS_CERT, TROIKA_TLS_KEY,
// TROIKA_PLAINTEXT (1, true, 0 or false), and the job token: TROIKA_JOB_TOKEN, else the
// contents of the file TROIKA_JOB_TOKEN_FILE, else none. INVALID_ARGUMENT for a malformed
// TROIKA_PLAINTEXT; the token file's error (ReadTokenFile).
struct ClientSecurity {
  ClientTls tls;
  std::string job_token{};
};
absl::StatusOr<ClientSecurity> SecurityFromEnvironment();

}  // namespace troika
