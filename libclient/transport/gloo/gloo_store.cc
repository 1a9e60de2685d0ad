#include "libclient/transport/gloo/gloo_store.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troika::transport {

GlooStore::GlooStore(troika::transport::Store& store, absl::Duration timeout)
    : store_(store), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_.Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) throw GlooStoreError(std::move(status));
}

std::vector<char> GlooStore::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.Get(key, timeout_);
  if (!value.ok()) throw GlooStoreError(std::move(value).status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, ::gloo::kNoTimeout); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const absl::Duration bound = timeout == ::gloo::kNoTimeout ? timeout_ : absl::FromChrono(timeout);
  absl::Status status = store_.Wait(keys, bound);
  if (!status.ok()) throw GlooStoreError(std::move(status));
}

GlooMeshStore::GlooMeshStore(GlooStore& store, int rank, int size)
    : store_(store), rank_(rank), size_(size) {}

void GlooMeshStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(key, data);
  const std::string mine = absl::StrCat("rank_", rank_);
  if (size_ < 2 || !absl::EndsWith(key, mine)) return;
  const std::string prefix = key.substr(0, key.size() - mine.size());
  std::vector<std::string> everyone;
  for (int r = 0; r < size_; ++r) everyone.push_back(absl::StrCat(prefix, "rank_", r));
  store_.wait(everyone);  // the store's own timeout; throws as it does
}

}  // namespace troika::transport
