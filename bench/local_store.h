#pragma once
// LocalStore: a transport::Store held in this process's memory, for ranks that are threads of
// one process (the benchmark bootstraps its raw Gloo communicators through it). Header-only.
//
// Thread contract: thread-safe; Get() and Wait() block until the keys exist or time runs out.

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
#include "absl/time/time.h"
#include "libclient/transport/store.h"

namespace troika::bench {

class LocalStore : public transport::Store {
 public:
  LocalStore() = default;
  LocalStore(const LocalStore&) = delete;
  LocalStore& operator=(const LocalStore&) = delete;

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
    return absl::DeadlineExceededError(absl::StrCat(keys.size(), " store keys were not set within ",
                                                    absl::FormatDuration(timeout)));
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

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;  // guarded by mu_
};

}  // namespace troika::bench
