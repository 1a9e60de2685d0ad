#include "coordinator/negotiation/group_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::coordinator {
namespace {

std::string Quoted(const std::vector<std::string>& names) {
  return absl::StrJoin(names, ", ", [](std::string* out, const std::string& name) {
    absl::StrAppend(out, "'", name, "'");
  });
}

// Keeps the response's names; replaces what it would do with `error`.
void Fail(ReadyTensor& ready, std::string error) {
  Response failed;
  failed.names = std::move(ready.response.names);
  failed.error = std::move(error);
  ready.response = std::move(failed);
}

}  // namespace

void GroupTable::Register(const std::string& group, int size, const std::string& name) {
  auto [it, inserted] = groups_.try_emplace(group);
  Group& g = it->second;
  if (inserted) g.size = size;
  if (static_cast<int>(g.members.size()) < g.size) {
    g.members.push_back(name);
  } else {
    extra_.insert(name);
  }
}

std::vector<ReadyTensor> GroupTable::Add(const std::string& group, int size, ReadyTensor ready) {
  const std::string name = ready.response.names.front();
  auto it = groups_.find(group);
  if (extra_.erase(name) || it == groups_.end()) {
    const int size = it == groups_.end() ? 0 : it->second.size;
    Fail(ready, absl::StrCat("Group '", group, "' has more than ", size, " tensors: '", name,
                             "' is one too many (its tensors: ",
                             it == groups_.end() ? "" : Quoted(it->second.members), ")"));
    std::vector<ReadyTensor> out;
    out.push_back(std::move(ready));
    return out;
  }
  Group& g = it->second;
  // The ranks agreed on this tensor's group (Agree); its tensors must agree with each other.
  if (!ready.response.is_error() && size != g.size) {
    Fail(ready, absl::StrCat("Mismatched group sizes in group '", group, "': '", name,
                             "' was submitted with group size ", size, ", but '", g.members.front(),
                             "' with ", g.size));
  }
  g.held.push_back(std::move(ready));
  if (static_cast<int>(g.held.size()) < g.size) return {};
  std::vector<ReadyTensor> out = std::move(g.held);
  groups_.erase(it);
  return out;
}

std::vector<ReadyTensor> GroupTable::TakeAll() {
  std::vector<ReadyTensor> out;
  for (auto& [group, g] : groups_) {
    for (ReadyTensor& r : g.held) out.push_back(std::move(r));
  }
  groups_.clear();
  extra_.clear();
  return out;
}

std::vector<HeldTensor> GroupTable::Held() const {
  std::vector<HeldTensor> out;
  for (const auto& [group, g] : groups_) {
    for (const ReadyTensor& r : g.held)
      out.push_back({group, r.response.names.front(), r.ready_at});
  }
  return out;
}

}  // namespace troika::coordinator
