#pragma once
// GlooStore: presents a troika::transport::Store to Gloo's rendezvous code as a
// gloo::rendezvous::Store. Only the Gloo data plane uses it, while connecting.
//
// Gloo reports errors with exceptions, so every failure of the underlying Store is thrown as
// a GlooStoreError (a gloo::IoException) that keeps the original absl::Status; the caller
// catches it before returning to Troika code.
//
// Thread contract: as thread-safe as the wrapped Store (which is thread-safe). The wrapped
// Store must outlive this object.

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/store.h"
#include "libclient/transport/store.h"

namespace troika::transport {

class GlooStoreError : public ::gloo::IoException {
 public:
  explicit GlooStoreError(absl::Status status)
      : ::gloo::IoException(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

class GlooStore : public ::gloo::rendezvous::Store {
 public:
  // `timeout` bounds get() and wait() calls that carry no timeout of their own.
  GlooStore(troika::transport::Store& store, absl::Duration timeout);
  GlooStore(const GlooStore&) = delete;
  GlooStore& operator=(const GlooStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until `key` exists (Gloo's stores block in get()), or throws after the timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // A timeout of gloo::kNoTimeout (zero) means this store's own timeout.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  troika::transport::Store& store_;
  const absl::Duration timeout_;
};

}  // namespace troika::transport
