#include "agent/relay/relay_ledger.h"

#include <algorithm>

#include "common/logging.h"
#include "common/wire.h"

namespace troika::agent {

void RelayLedger::Sent(const v1::Request& request, Key key) {
  sent_.push_back({request, key});
  sent_by_key_[std::move(key)].push_back(std::prev(sent_.end()));
}

void RelayLedger::Received(const DownMessage& message,
                           const std::map<int32_t, std::string>& cache_names) {
  if (message.seq > 0 && !message.responses.empty()) {
    if (message.seq != received_ + 1) {
      TROIKA_LOG(WARNING) << "responses numbered from " << message.seq << " after " << received_;
    }
    for (const Response& response : message.responses) log_.push_back(response);
    received_ = message.seq + static_cast<int64_t>(message.responses.size()) - 1;
    while (static_cast<int>(log_.size()) > log_responses_) log_.pop_front();
  }
  for (const Response& response : message.responses) {
    for (int32_t id : response.cache_ids) max_cache_id_ = std::max(max_cache_id_, id);
    if (!response.ids_known) {
      for (const std::string& name : response.names) Forget({response.process_set, name});
      continue;
    }
    for (int32_t id : response.cache_ids) {
      if (auto name = cache_names.find(id); name != cache_names.end()) {
        Forget({response.process_set, name->second});
      }
    }
  }
  for (const CacheMiss& miss : message.misses) ForgetMiss(miss);
}

void RelayLedger::ForgetMiss(const CacheMiss& miss) {
  for (auto it = sent_.begin(); it != sent_.end(); ++it) {
    v1::Request& request = it->request;
    if (request.cache_id() != miss.cache_id) continue;
    auto* ranks = request.mutable_ranks();
    auto rank = std::find(ranks->begin(), ranks->end(), miss.rank);
    if (rank != ranks->end()) {
      ranks->erase(rank);
      if (!ranks->empty()) return;  // the request still stands for its other ranks
    } else if (!ranks->empty() || request.rank() != miss.rank) {
      continue;
    }
    auto& index = sent_by_key_[it->key];
    index.erase(std::find(index.begin(), index.end(), it));
    if (index.empty()) sent_by_key_.erase(it->key);
    sent_.erase(it);
    return;
  }
}

void RelayLedger::Scheduled(int64_t id, const std::set<std::string>& names) {
  max_schedule_id_ = std::max(max_schedule_id_, id);
  for (const std::string& name : names) Forget({0, name});
}

void RelayLedger::Forget(const Key& key) {
  auto it = sent_by_key_.find(key);
  if (it == sent_by_key_.end()) return;
  for (auto sent : it->second) sent_.erase(sent);
  sent_by_key_.erase(it);
}

v1::ResponseBatch RelayLedger::Replay(int64_t from, int64_t to) const {
  v1::ResponseBatch batch;
  const int64_t first = received_ - static_cast<int64_t>(log_.size()) + 1;
  if (from >= first && to <= received_) {
    batch.set_seq(from);
    for (int64_t seq = from; seq <= to; ++seq) {
      ToWire(log_[static_cast<size_t>(seq - first)], batch.add_responses());
    }
  } else {
    TROIKA_LOG(WARNING) << "the coordinator asked for responses " << from << " to " << to
                        << "; this agent holds " << first << " to " << received_;
  }
  return batch;
}

v1::RequestBatch RelayLedger::Unanswered() const {
  v1::RequestBatch batch;
  for (const Forwarded& sent : sent_) *batch.add_requests() = sent.request;
  return batch;
}

}  // namespace troika::agent
