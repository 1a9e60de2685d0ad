#include "libclient/execution/process_set_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/messages.h"

namespace troika::internal {

void ProcessSetTable::Add(int id, std::vector<int> ranks,
                          std::unique_ptr<transport::Communicator> comm) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_ && comm) comm->Abort();
  sets_[id] = {std::move(ranks), std::move(comm)};
}

void ProcessSetTable::Remove(int id) {
  std::unique_ptr<transport::Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    if (it == sets_.end()) return;
    comm = std::move(it->second.comm);
    sets_.erase(it);
  }
  // Destroyed outside the lock: closing connections may take a moment.
}

transport::Communicator* ProcessSetTable::communicator(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.comm.get();
}

absl::StatusOr<std::pair<int, int>> ProcessSetTable::Member(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("there is no process set ", id, " (never added, or removed)"));
  }
  const std::vector<int>& ranks = it->second.ranks;
  auto pos = std::lower_bound(ranks.begin(), ranks.end(), rank_);
  if (pos == ranks.end() || *pos != rank_) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank_, " is not in process set ", id, " (", FormatRanks(ranks), ")"));
  }
  return std::make_pair(static_cast<int>(pos - ranks.begin()), static_cast<int>(ranks.size()));
}

std::optional<int> ProcessSetTable::SizeOf(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return std::nullopt;
  return static_cast<int>(it->second.ranks.size());
}

void ProcessSetTable::AbortAll() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  for (auto& [id, set] : sets_) {
    if (set.comm) set.comm->Abort();
  }
}

}  // namespace troika::internal
