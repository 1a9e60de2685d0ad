#include "common/tls.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace troika {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    std::string message =
        absl::StrCat("cannot read the ", what, " '", path, "': ", strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::stringstream contents;
  contents << in.rdbuf();
  if (contents.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " '", path, "' is not PEM"));
  }
  return contents.str();
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    std::string message =
        absl::StrCat("cannot read the token file '", path, "': ", strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::stringstream contents;
  contents << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(contents.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the token file '", path, "' is empty"));
  }
  return token;
}

absl::StatusOr<ClientSecurity> SecurityFromEnvironment() {
  auto get = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::string(value) : std::string();
  };
  ClientSecurity s;
  s.tls.ca_file = get("TROIKA_TLS_CA");
  s.tls.cert_file = get("TROIKA_TLS_CERT");
  s.tls.key_file = get("TROIKA_TLS_KEY");
  if (const std::string p = get("TROIKA_PLAINTEXT"); !p.empty()) {
    if (p != "0" && p != "1" && p != "true" && p != "false") {
      return absl::InvalidArgumentError(
          absl::StrCat("TROIKA_PLAINTEXT='", p, "' is not one of 1, 0, true, false"));
    }
    s.tls.plaintext = p == "1" || p == "true";
  }
  s.job_token = get("TROIKA_JOB_TOKEN");
  if (const std::string path = get("TROIKA_JOB_TOKEN_FILE"); s.job_token.empty() && !path.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(path);
    if (!token.ok()) return token.status();
    s.job_token = *std::move(token);
  }
  return s;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls) {
  const bool any_file =
      !tls.cert_file.empty() || !tls.key_file.empty() || !tls.client_ca_file.empty();
  if (tls.plaintext) {
    if (any_file) {
      return absl::InvalidArgumentError("plaintext and TLS files are mutually exclusive");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs a certificate and a key (--tls_cert, --tls_key); plaintext must be asked "
        "for explicitly (--plaintext)");
  }
  auto cert = ReadPem(tls.cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(tls.key_file, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca_file.empty()) {
    auto ca = ReadPem(tls.client_ca_file, "client CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls, const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return grpc::InsecureChannelCredentials();
  if (tls.plaintext) return grpc::InsecureChannelCredentials();
  if (tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("connecting to ", address,
                     " needs TLS: give the CA that signed the coordinator's "
                     "certificate (TROIKA_TLS_CA / --tls_ca), or ask for plaintext explicitly "
                     "(TROIKA_PLAINTEXT=1 / --plaintext)"));
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and a key its certificate");
  }
  grpc::SslCredentialsOptions options;
  auto ca = ReadPem(tls.ca_file, "TLS CA");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!tls.cert_file.empty()) {
    auto cert = ReadPem(tls.cert_file, "client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.key_file, "client key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

}  // namespace troika
