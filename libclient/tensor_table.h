#pragma once
// TensorTable: this rank's operations between submission and execution, by name. A name can
// be in flight once. Once closed (abort, failure, shutdown) every entry fails and so does
// every later insert.
//
// Thread-safe: user threads insert, the executor takes, anyone closes.

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "libclient/op_state.h"

namespace troika::internal {

class TensorTable {
 public:
  // ALREADY_EXISTS if the name is in flight; the close status if closed.
  absl::Status Insert(Entry entry);
  std::optional<Entry> Take(const std::string& name);
  // Fails every entry, and every later Insert, with `status`. First call wins.
  void Close(const absl::Status& status);
  // OK while open.
  absl::Status status() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // guarded by mu_
  absl::Status closed_;                   // guarded by mu_
};

}  // namespace troika::internal
