#pragma once
// TensorTable: this rank's operations between submission and execution, by process set and
// name (Key()). A name can be in flight once per process set. Once closed (abort, failure,
// shutdown) every entry fails and so does every later insert.
//
// Thread-safe: user threads insert, the executor takes, anyone closes.

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "libclient/handles/op_state.h"

namespace troika::internal {

class TensorTable {
 public:
  // The key of tensor `name` of `process_set`: the name itself in set 0.
  static std::string Key(int process_set, const std::string& name);

  // ALREADY_EXISTS if the name is in flight in its set; the close status if closed.
  absl::Status Insert(Entry&& entry);
  // The entry of tensor `name` of `process_set`, removed from the table; none if absent.
  std::optional<Entry> Take(int process_set, const std::string& name);
  // Fails every entry, and every later Insert, with `status`. First call wins.
  void Close(const absl::Status& status);
  // OK while open.
  absl::Status status() const;
  // status().ok() without the lock (the scheduled fast path asks on every call).
  bool open() const { return open_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_;  // by Key(); guarded by mu_
  absl::Status closed_;                              // guarded by mu_
  std::atomic<bool> open_{true};                     // closed_.ok(); written under mu_
};

}  // namespace troika::internal
