#include "coordinator/state/kv_store.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::coordinator {

KvStore::~KvStore() { Close(absl::CancelledError("the job's key-value store was closed")); }

bool KvStore::AllSetLocked(const std::vector<std::string>& keys) const {
  for (const std::string& k : keys) {
    if (!values_.count(k)) return false;
  }
  return true;
}

void KvStore::Set(const std::string& key, std::string value) {
  std::vector<Waiter> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = values_.try_emplace(key);
    bytes_ += static_cast<int64_t>(value.size()) - static_cast<int64_t>(it->second.size()) +
              (inserted ? static_cast<int64_t>(key.size()) : 0);
    it->second = std::move(value);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (AllSetLocked(it->second.keys)) {
        ready.push_back(std::move(it->second));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Waiter& w : ready) {
    scheduler_.Cancel(w.timer);
    w.done(absl::OkStatus());
  }
}

void KvStore::Get(const std::string& key, absl::Duration timeout, GetCallback done) {
  std::optional<std::string> value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it != values_.end()) value = it->second;
  }
  if (value) {
    done(std::move(*value));
    return;
  }
  if (timeout <= absl::ZeroDuration()) {
    done(absl::NotFoundError(absl::StrCat("key '", key, "' is not set")));
    return;
  }
  // Waits, then reads the value under the lock; Set() never removes a key.
  Wait({key}, timeout, [this, key, done = std::move(done)](absl::Status status) {
    if (!status.ok()) return done(status);
    std::string value;
    {
      std::lock_guard<std::mutex> lock(mu_);
      value = values_.at(key);
    }
    done(std::move(value));
  });
}

void KvStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout,
                   WaitCallback done) {
  absl::Status status;  // OK: every key is set; else the closed store's reason
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool all_set = AllSetLocked(keys);
    if (!all_set && closed_.ok()) {
      const uint64_t id = next_waiter_++;
      waiters_[id] = Waiter{keys, std::move(done), 0};
      // Armed under the lock so the waiter cannot be completed before its timer id is stored.
      waiters_[id].timer =
          scheduler_.RunAfter(timeout, [this, id, timeout] { Expire(id, timeout); });
      return;
    }
    if (!all_set) status = closed_;
  }
  done(status);
}

void KvStore::Expire(uint64_t id, absl::Duration timeout) {
  Waiter waiter;
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    waiter = std::move(it->second);
    waiters_.erase(it);
    for (const std::string& k : waiter.keys) {
      if (!values_.count(k)) missing.push_back(absl::StrCat("'", k, "'"));
    }
  }
  waiter.done(absl::DeadlineExceededError(
      absl::StrCat("key-value wait timed out after ", absl::FormatDuration(timeout),
                   "; not set: ", absl::StrJoin(missing, ", "))));
}

void KvStore::Close(const absl::Status& status) {
  Waiters waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.ok()) closed_ = status;
    waiters.swap(waiters_);
  }
  for (auto& [id, w] : waiters) {
    scheduler_.Cancel(w.timer);
    w.done(status);
  }
}

int64_t KvStore::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace troika::coordinator
