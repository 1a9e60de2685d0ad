#pragma once
// Secret: a credential the coordinator checks — a job's token, the admin token — kept only as
// its SHA-256 digest and compared in constant time. The token itself is never stored, logged
// or echoed (docs/security.md).
//
// Immutable after construction; thread-safe.

#include <array>
#include <cstdint>
#include <string>

#include "common/tls.h"  // kJobTokenHeader, kAdminTokenHeader

namespace troika::coordinator {

class Secret {
 public:
  Secret() = default;  // none: matches nothing
  static Secret Of(const std::string& token);
  // A new random token: 32 bytes from the system's CSPRNG, hex-encoded.
  static std::string Generate();

  // The secret known by its digest alone (a coordinator's state directory); nothing unless
  // `sha256` has 32 bytes.
  static Secret FromDigest(const std::string& sha256);
  // The digest, for FromDigest; empty if no secret is set.
  std::string digest() const;

  bool set() const { return set_; }
  // True iff a secret is set and `token` is it.
  bool Matches(const std::string& token) const;

 private:
  std::array<uint8_t, 32> digest_{};
  bool set_ = false;
};

}  // namespace troika::coordinator
