#pragma once
// KvStore: one job's key-value store for data-plane bootstrap. Never blocks: a get or wait
// for a key not yet set registers a callback that runs when the keys arrive or the timeout
// passes, so a gRPC reactor can wait on it without holding a thread.
//
// Thread-safe. Callbacks run without the store's lock held, on the thread that set the last
// missing key, on the scheduler's thread (timeout), or inside the call itself.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/scheduler.h"

namespace troika::coordinator {

class KvStore {
 public:
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;
  using WaitCallback = std::function<void(absl::Status)>;

  explicit KvStore(Scheduler& scheduler) : scheduler_(scheduler) {}
  ~KvStore();  // Close(CANCELLED)
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  void Set(const std::string& key, std::string value);
  // Calls `done` with the value once `key` is set, or NOT_FOUND (timeout 0) or
  // DEADLINE_EXCEEDED naming the key.
  void Get(const std::string& key, absl::Duration timeout, GetCallback done);
  void Wait(const std::vector<std::string>& keys, absl::Duration timeout, WaitCallback done);
  // Fails every waiter with `status`, and from now on every get or wait for a key that is not
  // set, at once (the job was aborted, or a rank left that the others may be waiting for).
  // The first status stays.
  void Close(const absl::Status& status);
  // Bytes of every key and value held.
  int64_t bytes();

 private:
  struct Waiter {
    std::vector<std::string> keys;
    std::function<void(absl::Status)> done;
    Scheduler::TaskId timer = 0;
  };
  using Waiters = std::map<uint64_t, Waiter>;

  bool AllSetLocked(const std::vector<std::string>& keys) const;
  void Expire(uint64_t id, absl::Duration timeout);

  Scheduler& scheduler_;
  std::mutex mu_;
  std::map<std::string, std::string> values_;  // guarded by mu_
  int64_t bytes_ = 0;                          // guarded by mu_; of values_
  Waiters waiters_;                            // guarded by mu_
  absl::Status closed_;                        // guarded by mu_; set by Close()
  uint64_t next_waiter_ = 1;                   // guarded by mu_
};

}  // namespace troika::coordinator
