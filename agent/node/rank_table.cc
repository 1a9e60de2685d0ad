#include "agent/node/rank_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troika::agent {

void RankTable::Start(std::vector<int> labels, int max_restarts, int64_t epoch) {
  labels_ = std::move(labels);
  current_ = labels_;
  restarts_left_ = max_restarts;
  epoch_ = epoch;
}

std::vector<int> RankTable::LiveRanks() const {
  std::vector<int> live;
  for (int rank : current_) {
    if (rank >= 0) live.push_back(rank);
  }
  return live;
}

std::vector<std::pair<int, ExitStatus>> RankTable::ExitsByLabel() const {
  std::vector<std::pair<int, ExitStatus>> exits;
  for (const auto& [local, exit] : exited_) exits.emplace_back(labels_[local], exit);
  return exits;
}

std::optional<RankTable::Restart> RankTable::TakeRestart(int local, const std::string& who) {
  if (restarts_left_ <= 0) return std::nullopt;
  Restart restart;
  restart.left = --restarts_left_;
  restart.join_id = absl::StrCat(who, "/", labels_[local], "/", restart.left);
  restarting_[local] = restart.join_id;
  unregistered_.insert(local);
  return restart;
}

bool RankTable::GoesOn(const MembershipChange& change) const {
  return std::any_of(current_.begin(), current_.end(),
                     [&](int rank) { return change.NextRank(rank) >= 0; });
}

bool RankTable::LiveAfter(const MembershipChange& change) const {
  if (GoesOn(change)) return true;
  return std::any_of(restarting_.begin(), restarting_.end(), [&](const auto& restarting) {
    return std::any_of(change.admitted.begin(), change.admitted.end(),
                       [&](const auto& a) { return a.join_id == restarting.second; });
  });
}

RankTable::Change RankTable::Apply(const MembershipChange& change) {
  Change next;
  for (size_t i = 0; i < current_.size(); ++i) {
    int& rank = current_[i];
    const int next_rank = change.NextRank(rank);
    if (rank >= 0 && next_rank < 0) left_.insert(labels_[i]);
    rank = next_rank;
  }
  // This node's failed ranks that the change admits again.
  for (auto it = restarting_.begin(); it != restarting_.end();) {
    auto admitted = std::find_if(change.admitted.begin(), change.admitted.end(),
                                 [&](const auto& a) { return a.join_id == it->second; });
    if (admitted == change.admitted.end()) {
      ++it;
      continue;
    }
    current_[it->first] = admitted->first_rank;
    left_.erase(labels_[it->first]);
    exited_.erase(it->first);  // it starts again
    next.restarted.emplace_back(it->first, admitted->first_rank);
    it = restarting_.erase(it);
  }
  // Failed ranks this change drops: the job has room for them again.
  for (auto it = unregistered_.begin(); it != unregistered_.end();) {
    if (current_[*it] >= 0) {
      ++it;
      continue;
    }
    next.to_register.emplace_back(*it, restarting_[*it]);
    it = unregistered_.erase(it);
  }
  next.live = LiveRanks();
  // Ranks that exited while the ended generation ran and that the change keeps (their exit
  // reached no coordinator): the next generation learns of them too.
  for (const auto& [local, exit] : exited_) {
    if (current_[local] >= 0) next.exited.emplace_back(current_[local], exit);
  }
  epoch_ = change.epoch;
  return next;
}

std::vector<std::pair<int, int>> RankTable::Rejoin(
    int local, int first_rank, const std::vector<MembershipChange::Admitted>& admitted,
    int64_t epoch) {
  std::vector<std::pair<int, int>> rejoined;
  if (!restarting_.count(local)) return rejoined;
  rejoined.emplace_back(local, first_rank);
  for (const auto& [other, join_id] : restarting_) {
    auto it = std::find_if(admitted.begin(), admitted.end(),
                           [&](const auto& a) { return a.join_id == join_id; });
    if (other != local && it != admitted.end()) rejoined.emplace_back(other, it->first_rank);
  }
  for (const auto& [index, rank] : rejoined) {
    restarting_.erase(index);
    current_[index] = rank;
    left_.erase(labels_[index]);
  }
  epoch_ = epoch;
  return rejoined;
}

}  // namespace troika::agent
