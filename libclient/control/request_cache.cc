#include "libclient/control/request_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troika::internal {

TensorRequest RequestCache::Compress(const TensorRequest& request) {
  // Only set 0 has a response cache, and this cache is keyed by name alone.
  if (request.process_set != 0) return request;
  std::lock_guard<std::mutex> lock(mu_);
  Sent& sent = in_flight_[request.name];
  sent = {request, 0};
  auto known = known_.find(request.name);
  if (known == known_.end() || !(known->second.request == request)) return request;
  sent.as_id = known->second.id;
  TensorRequest compressed;
  compressed.rank = request.rank;
  compressed.cache_id = sent.as_id;
  return compressed;
}

absl::Status RequestCache::Apply(int rank, DownMessage& message,
                                 std::vector<TensorRequest>* resend) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Response& response : message.responses) {
    if (response.process_set != 0) continue;  // never cached (Compress)
    if (response.ids_known) {
      for (int32_t id : response.cache_ids) {
        auto name = names_.find(id);
        if (name == names_.end()) {
          return absl::InternalError(absl::StrCat("the coordinator sent cache id ", id,
                                                  ", which this rank never learned"));
        }
        response.names.push_back(name->second);
      }
    }
    for (size_t i = 0; i < response.names.size(); ++i) {
      auto sent = in_flight_.find(response.names[i]);
      if (sent == in_flight_.end()) continue;  // not ours (another rank's miss, or joined)
      if (i < response.cache_ids.size()) {
        const int32_t id = response.cache_ids[i];
        auto [known, inserted] = known_.try_emplace(sent->first);
        if (!inserted && known->second.id != id) names_.erase(known->second.id);
        known->second = {std::move(sent->second.request), id};
        names_[id] = sent->first;
      }
      in_flight_.erase(sent);
    }
  }
  for (int32_t id : message.evicted_cache_ids) ForgetLocked(id);
  for (const CacheMiss& miss : message.misses) {
    if (miss.rank != rank) continue;
    ForgetLocked(miss.cache_id);
    for (auto& [name, sent] : in_flight_) {
      if (sent.as_id != miss.cache_id) continue;
      sent.as_id = 0;
      resend->push_back(sent.request);
    }
  }
  return absl::OkStatus();
}

void RequestCache::ForgetLocked(int32_t id) {
  auto name = names_.find(id);
  if (name == names_.end()) return;
  known_.erase(name->second);
  names_.erase(name);
}

std::map<std::string, TensorRequest> RequestCache::Expected(const Schedule& schedule) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, TensorRequest> expected;
  for (const Response& entry : schedule.entries) {
    for (size_t i = 0; i < entry.names.size() && i < entry.cache_ids.size(); ++i) {
      auto known = known_.find(entry.names[i]);
      if (known != known_.end() && known->second.id == entry.cache_ids[i]) {
        expected[entry.names[i]] = known->second.request;
      }
    }
  }
  return expected;
}

void RequestCache::Absorbed(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(name);
}

int RequestCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(names_.size());
}

}  // namespace troika::internal
