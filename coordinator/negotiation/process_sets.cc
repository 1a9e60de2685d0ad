#include "coordinator/negotiation/process_sets.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::coordinator {
namespace {

NegotiatorOptions WithoutCache(NegotiatorOptions options) {
  // Cache ids must be unique per job and the ranks' caches are keyed by name alone.
  options.cache_capacity = 0;
  return options;
}

bool IsAdd(const std::string& name) { return absl::StartsWith(name, kAddProcessSetPrefix); }

}  // namespace

ProcessSets::ProcessSets(int size, NegotiatorOptions options)
    : size_(size), options_(WithoutCache(options)) {
  Set& whole = sets_[0];
  for (int r = 0; r < size; ++r) whole.ranks.push_back(r);
  whole.negotiator = std::make_unique<Negotiator>(size, options);
}

bool ProcessSets::IsControl(const TensorRequest& request) {
  return request.process_set == 0 && request.type == CollectiveType::kBarrier &&
         (absl::StartsWith(request.name, kAddProcessSetPrefix) ||
          absl::StartsWith(request.name, kRemoveProcessSetPrefix));
}

void ProcessSets::Record(const TensorRequest& request) {
  control_[request.name][request.rank] = request.process_set_ranks;
}

const std::vector<int>* ProcessSets::ranks(int id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second.ranks;
}

std::optional<std::string> ProcessSets::CheckAdd(
    const std::map<int, std::vector<int>>& lists) const {
  std::map<std::vector<int>, std::vector<int>> by_list;  // list -> ranks that passed it
  for (const auto& [rank, list] : lists) by_list[list].push_back(rank);
  auto show = [](const std::vector<int>& list) {
    return absl::StrCat("[", absl::StrJoin(list, ", "), "]");
  };
  if (by_list.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [list, ranks] : by_list) {
      parts.push_back(absl::StrCat(FormatRanks(ranks), " passed ", show(list)));
    }
    return absl::StrCat("AddProcessSet: the ranks passed different rank lists: ",
                        absl::StrJoin(parts, "; "));
  }
  if (by_list.empty()) return "AddProcessSet: no rank list";
  // An empty set is valid, as in Horovod (its tests add the odd ranks of a 1-rank job): no
  // rank is a member, so no operation runs on it.
  const std::vector<int>& list = by_list.begin()->first;
  bool valid = true;
  for (size_t i = 0; valid && i < list.size(); ++i) {
    valid = list[i] >= 0 && list[i] < size_ && (i == 0 || list[i] > list[i - 1]);
  }
  if (!valid) {
    return absl::StrCat("AddProcessSet: ", show(list),
                        " is not an ascending list of distinct ranks in [0, ", size_, ")");
  }
  return std::nullopt;
}

void ProcessSets::Apply(Response* response, const std::set<int>& departed,
                        std::vector<Response>* out) {
  const std::string name = response->names.empty() ? "" : response->names.front();
  auto it = control_.find(name);
  if (it == control_.end()) return;
  std::map<int, std::vector<int>> lists = std::move(it->second);
  control_.erase(it);
  if (response->is_error()) return;  // a departed rank: the barrier failed already
  if (IsAdd(name)) {
    if (std::optional<std::string> error = CheckAdd(lists)) {
      response->error = *error;
      return;
    }
    Add(response, lists.begin()->second, departed);
    return;
  }
  std::set<std::vector<int>> distinct;
  for (const auto& [rank, list] : lists) distinct.insert(list);
  const std::vector<int>& first = *distinct.begin();
  if (distinct.size() != 1 || first.size() != 1) {
    response->error = "RemoveProcessSet: the ranks passed different process set ids";
    return;
  }
  Remove(response, first.front(), out);
}

std::map<int, std::vector<int>> ProcessSets::Definitions() const {
  std::map<int, std::vector<int>> out;
  for (const auto& [id, set] : sets_) {
    if (id != 0) out[id] = set.ranks;
  }
  return out;
}

void ProcessSets::Restore(const std::map<int, std::vector<int>>& sets, int next_id) {
  for (const auto& [id, ranks] : sets) {
    if (id == 0) continue;  // the whole job: always there
    Set& set = sets_[id];
    set.ranks = ranks;
    set.negotiator = std::make_unique<Negotiator>(static_cast<int>(ranks.size()), options_);
    next_id_ = std::max(next_id_, id + 1);
  }
  next_id_ = std::max(next_id_, next_id);
}

void ProcessSets::Add(Response* response, std::vector<int> ranks, const std::set<int>& departed) {
  const int id = next_id_++;
  Set& set = sets_[id];
  set.ranks = std::move(ranks);
  set.negotiator = std::make_unique<Negotiator>(static_cast<int>(set.ranks.size()), options_);
  for (size_t i = 0; i < set.ranks.size(); ++i) {
    if (departed.count(set.ranks[i])) {
      set.negotiator->RemoveRank(static_cast<int>(i),
                                 absl::StrCat("(global rank ", set.ranks[i], ") has shut down"));
    }
  }
  response->root = id;
}

void ProcessSets::Remove(Response* response, int id, std::vector<Response>* out) {
  auto it = sets_.find(id);
  if (id == 0 || it == sets_.end()) {
    response->error = absl::StrCat("RemoveProcessSet: there is no process set ", id,
                                   id == 0 ? " to remove (set 0 is the whole job)" : "");
    return;
  }
  Set& set = it->second;
  // What is ready still runs; what is pending can never complete.
  for (size_t i = 0; i < set.ranks.size(); ++i) {
    set.negotiator->RemoveRank(
        static_cast<int>(i),
        absl::StrCat("(global rank ", set.ranks[i], "): process set ", id, " was removed"));
  }
  absl::Time next;
  for (Response& r : set.negotiator->Poll(absl::InfiniteFuture(), &next)) {
    r.process_set = id;
    out->push_back(std::move(r));
  }
  sets_.erase(it);
  response->root = id;
}

absl::Status ProcessSets::Submit(TensorRequest request, absl::Time now,
                                 std::optional<Response>* rejected) {
  const int id = request.process_set;
  if (id == 0) {
    if (IsControl(request)) Record(request);
    return whole_job().Submit(std::move(request), now);
  }
  if (request.cache_id != 0 || !request.process_set_ranks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request for process set ", request.process_set,
                     " carries a cache id or process set ranks; only set 0 has either"));
  }
  auto reject = [&](std::string why) {
    Response r;
    r.type = request.type;
    r.names = {request.name};
    r.process_set = id;
    r.error = std::move(why);
    *rejected = std::move(r);
    return absl::OkStatus();
  };
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    return reject(absl::StrCat("'", request.name, "': there is no process set ", id));
  }
  const std::vector<int>& ranks = it->second.ranks;
  auto pos = std::lower_bound(ranks.begin(), ranks.end(), request.rank);
  if (pos == ranks.end() || *pos != request.rank) {
    return reject(absl::StrCat("'", request.name, "': rank ", request.rank,
                               " is not in process set ", id, " (", FormatRanks(ranks), ")"));
  }
  if (request.type == CollectiveType::kJoin) {
    return reject("Join is supported in process set 0 (the whole job) only");
  }
  request.rank = static_cast<int>(pos - ranks.begin());
  return it->second.negotiator->Submit(std::move(request), now);
}

void ProcessSets::RemoveRank(int rank, const std::string& why) {
  for (auto& [id, set] : sets_) {
    auto pos = std::lower_bound(set.ranks.begin(), set.ranks.end(), rank);
    if (pos == set.ranks.end() || *pos != rank) continue;
    // Set 0's positions are the global ranks.
    set.negotiator->RemoveRank(static_cast<int>(pos - set.ranks.begin()),
                               id == 0 ? why : absl::StrCat("(global rank ", rank, ") ", why));
  }
}

std::vector<Response> ProcessSets::Poll(absl::Time now, const std::set<int>& departed,
                                        absl::Time* next_poll,
                                        std::vector<int64_t>* allreduce_bytes) {
  std::vector<Response> out;
  *next_poll = absl::InfiniteFuture();
  // Other sets first: a set removed by a set-0 response below has had its last responses.
  for (auto& [id, set] : sets_) {
    if (id == 0) continue;
    absl::Time next;
    for (Response& r : set.negotiator->Poll(now, &next)) {
      r.process_set = id;
      out.push_back(std::move(r));
    }
    *next_poll = std::min(*next_poll, next);
    for (int64_t bytes : set.negotiator->TakeAllreduceResponseBytes()) {
      allreduce_bytes->push_back(bytes);
    }
  }
  Negotiator& whole = whole_job();
  absl::Time next;
  for (Response& response : whole.Poll(now, &next)) {
    if (response.names.size() == 1) Apply(&response, departed, &out);
    out.push_back(std::move(response));
  }
  *next_poll = std::min(*next_poll, next);
  for (int64_t bytes : whole.TakeAllreduceResponseBytes()) allreduce_bytes->push_back(bytes);
  return out;
}

std::map<int, std::vector<ReadyRecord>> ProcessSets::TakeReadyRecords() {
  std::map<int, std::vector<ReadyRecord>> out;
  for (auto& [id, set] : sets_) {
    std::vector<ReadyRecord> records = set.negotiator->TakeReadyRecords();
    if (!records.empty()) out[id] = std::move(records);
  }
  return out;
}

std::vector<PendingTensor> ProcessSets::Pending() const {
  std::vector<PendingTensor> out;
  for (const auto& [id, set] : sets_) {
    for (PendingTensor tensor : set.negotiator->Pending()) {
      if (id != 0) {
        tensor.name = ProcessSetTensorName(id, tensor.name);
        for (int& r : tensor.missing_ranks) r = set.ranks[r];
      }
      out.push_back(std::move(tensor));
    }
  }
  return out;
}

bool ProcessSets::has_pending() const {
  return std::any_of(sets_.begin(), sets_.end(),
                     [](const auto& entry) { return entry.second.negotiator->has_pending(); });
}

}  // namespace troika::coordinator
