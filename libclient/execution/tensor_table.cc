#include "libclient/execution/tensor_table.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/messages.h"

namespace troika::internal {

std::string TensorTable::Key(int process_set, const std::string& name) {
  // '\0' cannot start a user's name, so set keys never collide with set-0 names.
  return process_set == 0 ? name : absl::StrCat(std::string(1, '\0'), process_set, "/", name);
}

absl::Status TensorTable::Insert(Entry&& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  // try_emplace leaves `entry` untouched when the key is there.
  if (entries_.try_emplace(Key(entry.request.process_set, entry.request.name), std::move(entry))
          .second) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError(
      absl::StrCat("'", ProcessSetTensorName(entry.request.process_set, entry.request.name),
                   "' is already in flight on this rank; wait for it first"));
}

std::optional<Entry> TensorTable::Take(int process_set, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  // Set 0's key is the name itself: looked up without making one.
  auto it = process_set == 0 ? entries_.find(name) : entries_.find(Key(process_set, name));
  if (it == entries_.end()) return std::nullopt;
  Entry entry = std::move(it->second);
  entries_.erase(it);
  return entry;
}

void TensorTable::Close(const absl::Status& status) {
  absl::flat_hash_map<std::string, Entry> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.ok()) return;
    closed_ = status;
    open_.store(closed_.ok(), std::memory_order_release);
    failed.swap(entries_);
  }
  for (auto& [name, entry] : failed) entry.state->Complete(status);
}

absl::Status TensorTable::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

}  // namespace troika::internal
