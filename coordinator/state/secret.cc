#include "coordinator/state/secret.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace troika::coordinator {

Secret Secret::Of(const std::string& token) {
  Secret s;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), s.digest_.data());
  s.set_ = true;
  return s;
}

Secret Secret::FromDigest(const std::string& sha256) {
  Secret s;
  if (sha256.size() != s.digest_.size()) return s;
  std::copy(sha256.begin(), sha256.end(), s.digest_.begin());
  s.set_ = true;
  return s;
}

std::string Secret::digest() const {
  if (!set_) return "";
  return std::string(digest_.begin(), digest_.end());
}

std::string Secret::Generate() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();  // no entropy: nothing is safe
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

bool Secret::Matches(const std::string& token) const {
  if (!set_) return false;
  const Secret other = Of(token);
  return CRYPTO_memcmp(digest_.data(), other.digest_.data(), digest_.size()) == 0;
}

}  // namespace troika::coordinator
