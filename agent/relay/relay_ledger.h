#pragma once
// RelayLedger: what a node relay keeps so that a restarted coordinator loses nothing
// (docs/protocol.md, "Coordinator restart"): the requests it forwarded and got no response
// for, in the order sent, and the latest responses it received, numbered as the coordinator
// numbered them. After the restart the relay answers the coordinator's replay request from the
// log, tells it how far it got (Resume), and, once the coordinator says `resumed`, sends the
// unanswered requests again.
//
// Not thread-safe: NodeRelay calls it under its lock.

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/messages.h"
#include "troika/v1/troika.pb.h"

namespace troika::agent {

class RelayLedger {
 public:
  // (process set, tensor name): the name a request stands for; for a request sent as a
  // response-cache id, the name the id stood for.
  using Key = std::pair<int, std::string>;

  // Keeps the latest `log_responses` responses for replay.
  explicit RelayLedger(int log_responses) : log_responses_(log_responses) {}

  // `request` went upstream for the tensor `key`.
  void Sent(const v1::Request& request, Key key);
  // What came down: its responses are numbered and logged, the requests they answer (by name,
  // or by id through `cache_names`) forgotten, and a cache miss's rank taken out of the
  // request it sent as that id (the rank sends it again in full, as a new request).
  void Received(const DownMessage& message, const std::map<int32_t, std::string>& cache_names);
  // A steady-state schedule came down: its tensors (of set 0) are the schedule's now, which
  // the coordinator drops from negotiation, so they are forgotten here too.
  void Scheduled(int64_t id, const std::set<std::string>& names);

  // A restarted coordinator asks for responses `from`..`to`: those of the log, or an empty
  // batch (seq 0) when the log does not hold them all (the coordinator then aborts the job).
  v1::ResponseBatch Replay(int64_t from, int64_t to) const;
  // The requests without a response, in the order they were sent.
  v1::RequestBatch Unanswered() const;
  // How far this node got, for a restarted coordinator (Hello.resume).
  SessionResume Resume() const { return {received_, max_cache_id_, max_schedule_id_}; }

 private:
  void Forget(const Key& key);
  void ForgetMiss(const CacheMiss& miss);

  const int log_responses_;
  struct Forwarded {
    v1::Request request;
    Key key;
  };
  std::list<Forwarded> sent_;  // in the order sent
  std::map<Key, std::vector<std::list<Forwarded>::iterator>> sent_by_key_;
  int64_t received_ = 0;         // responses 1 .. received_ came down
  std::deque<Response> log_;     // the latest of them, the last one numbered received_
  int32_t max_cache_id_ = 0;     // the highest id announced
  int64_t max_schedule_id_ = 0;  // the highest schedule id received
};

}  // namespace troika::agent
