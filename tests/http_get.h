#pragma once
// Loopback helpers for tests of the metrics port: blocking HTTP/1.0 GETs against 127.0.0.1,
// and a free port to listen on.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace troika::testing {

inline sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// The whole response (status line, headers, body) of GET `path`.
inline absl::StatusOr<std::string> RawHttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket");
  sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to port ", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write");
  }
  std::string raw;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) raw.append(buf, n);
  close(fd);
  return raw;
}

struct HttpResponse {
  int status = 0;
  std::string body;
};

inline absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path) {
  absl::StatusOr<std::string> raw = RawHttpGet(port, path);
  if (!raw.ok()) return raw.status();
  const size_t space = raw->find(' ');
  const size_t header_end = raw->find("\r\n\r\n");
  if (space == std::string::npos || header_end == std::string::npos) {
    return absl::InternalError(absl::StrCat("malformed HTTP response: ", *raw));
  }
  return HttpResponse{std::atoi(raw->c_str() + space + 1), raw->substr(header_end + 4)};
}

// A loopback port nothing listens on now (bound, then released).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace troika::testing
