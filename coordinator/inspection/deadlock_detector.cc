#include "coordinator/inspection/deadlock_detector.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/messages.h"

namespace troika::coordinator {

void DeadlockDetector::Update(int rank, std::vector<std::string> waiting_for) {
  if (waiting_for.empty()) {
    waits_.erase(rank);
    return;
  }
  std::sort(waiting_for.begin(), waiting_for.end());
  waiting_for.erase(std::unique(waiting_for.begin(), waiting_for.end()), waiting_for.end());
  waits_[rank] = std::move(waiting_for);
}

bool DeadlockDetector::AllBlocked(const std::set<int>& departed, int size) const {
  bool any_live = false;
  for (int r = 0; r < size; ++r) {
    if (departed.count(r)) continue;
    any_live = true;
    if (!waits_.count(r)) return false;
  }
  return any_live;
}

std::optional<std::string> DeadlockDetector::Check(const std::vector<PendingTensor>& pending,
                                                   const std::set<int>& departed, int size) const {
  if (!AllBlocked(departed, size)) return std::nullopt;
  std::map<std::string, const PendingTensor*> pending_by_name;
  for (const PendingTensor& p : pending) pending_by_name[p.name] = &p;
  // Wait set -> the live ranks blocked on exactly it.
  std::map<std::vector<std::string>, std::vector<int>> groups;
  bool blocked_on_a_tensor = false;  // besides the join: else every wait is a join's, soon done
  for (const auto& [rank, names] : waits_) {
    if (rank < 0 || rank >= size || departed.count(rank)) continue;
    for (const std::string& name : names) {
      if (name == kJoinTensorName) continue;  // joined: it submits nothing more
      blocked_on_a_tensor = true;
      auto it = pending_by_name.find(name);
      // Not pending: negotiated, it will complete. Pending but not submitted by this rank:
      // the rank waits for an earlier tensor of that name, whose response is on its way (a
      // wait state can trail the response by a message), so it is not blocked on this one.
      if (it == pending_by_name.end()) return std::nullopt;
      const std::vector<int>& missing = it->second->missing_ranks;
      if (std::find(missing.begin(), missing.end(), rank) != missing.end()) return std::nullopt;
    }
    groups[names].push_back(rank);
  }
  if (!blocked_on_a_tensor) return std::nullopt;
  std::vector<std::pair<const std::vector<std::string>*, const std::vector<int>*>> order;
  for (const auto& [names, ranks] : groups) order.emplace_back(&names, &ranks);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second->size() != b.second->size()) return a.second->size() < b.second->size();
    return a.second->front() < b.second->front();
  });
  std::string message = "deadlock: ";
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [names, ranks] = order[i];
    absl::StrAppend(&message, i == 0 ? "" : "; ", FormatRanks(*ranks),
                    ranks->size() == 1 ? " waits for " : " wait for ");
    for (size_t j = 0; j < names->size(); ++j) {
      absl::StrAppend(&message, j == 0 ? "" : ", ", "'", (*names)[j], "'");
    }
  }
  return message;
}

}  // namespace troika::coordinator
