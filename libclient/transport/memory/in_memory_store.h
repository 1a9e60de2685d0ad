#pragma once
// InMemoryStore: a Store held in the memory of one process, for ranks that are threads of
// it (tests, troika-bench's raw Gloo baseline). Header-only.
//
// Thread contract: thread-safe. Get() and Wait() block (std::condition_variable, which
// ThreadSanitizer understands) until the keys exist or the timeout passes.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "libclient/transport/store.h"

namespace troika::transport {

class InMemoryStore : public Store {
 public:
  InMemoryStore() = default;
  InMemoryStore(const InMemoryStore&) = delete;
  InMemoryStore& operator=(const InMemoryStore&) = delete;

  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!WaitLocked(lock, {key}, timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("store key '", key, "' was not set within ", absl::FormatDuration(timeout)));
    }
    return values_.at(key);
  }

  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (WaitLocked(lock, keys, timeout)) return absl::OkStatus();
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) missing.push_back(key);
    }
    return absl::DeadlineExceededError(absl::StrCat("store keys [", absl::StrJoin(missing, ", "),
                                                    "] were not set within ",
                                                    absl::FormatDuration(timeout)));
  }

  // Test helpers.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.size();
  }
  std::vector<std::string> Keys() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> keys;
    for (const auto& [key, value] : values_) keys.push_back(key);
    return keys;
  }

 private:
  bool WaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  absl::Duration timeout) {
    // wait_for overflows on huge durations such as absl::InfiniteDuration().
    const auto bound = absl::ToChronoMilliseconds(std::min(timeout, absl::Hours(24 * 365)));
    return cv_.wait_for(lock, bound, [&] {
      return std::all_of(keys.begin(), keys.end(),
                         [&](const std::string& key) { return values_.count(key) > 0; });
    });
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;  // Guarded by mu_.
};

}  // namespace troika::transport
