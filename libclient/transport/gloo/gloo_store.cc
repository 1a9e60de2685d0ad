#include "libclient/transport/gloo/gloo_store.h"

#include <utility>

#include "absl/status/statusor.h"

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

}  // namespace troika::transport
