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

// GlooMeshStore: a rank's store for Gloo's connectFullMesh, which publishes the rank's pair
// addresses under "<prefix>rank_<rank>" and then connects its pairs one peer at a time. Here
// that publication returns only once every rank of the mesh has published its own, so no
// rank connects a pair before every rank is in the rendezvous. A rank that gives the
// rendezvous up while it waits in the store (its generation ended: the store aborts the
// wait) then leaves no peer in a pair connect with it, which nothing would interrupt: Gloo
// waits for a pair's first connection up to five times its timeout (docs/testing.md, run
// 33). Every other call, and a set() of any other key, goes straight to `store`.
class GlooMeshStore : public ::gloo::rendezvous::Store {
 public:
  // `store` must outlive this object.
  GlooMeshStore(GlooStore& store, int rank, int size);
  GlooMeshStore(const GlooMeshStore&) = delete;
  GlooMeshStore& operator=(const GlooMeshStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  GlooStore& store_;
  const int rank_;
  const int size_;
};

}  // namespace troika::transport
