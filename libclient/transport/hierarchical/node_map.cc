#include "libclient/transport/hierarchical/node_map.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace troika::transport {

int NodeMap::LocalIndex(int rank) const {
  const std::vector<int>& mine = ranks[node_of[rank]];
  return static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
}

bool NodeMap::AnyNodeShared() const {
  return std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.size() > 1; });
}

std::string NodeName(const CommunicatorSpec& spec) {
  if (!spec.node.empty()) return spec.node;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

NodeMap MakeNodeMap(const std::vector<std::string>& node_by_rank) {
  NodeMap map;
  std::map<std::string, int> index;
  for (size_t r = 0; r < node_by_rank.size(); ++r) {
    auto [it, added] = index.emplace(node_by_rank[r], map.nodes());
    if (added) {
      map.ranks.emplace_back();
      map.names.push_back(node_by_rank[r]);
    }
    map.node_of.push_back(it->second);
    map.ranks[it->second].push_back(static_cast<int>(r));
  }
  return map;
}

namespace {

// Rank r's node as rank 0 publishes it: escaped, one line per rank.
absl::Status ParseNode(int r, const std::string& line, std::vector<std::string>& nodes) {
  if (!absl::CUnescape(line, &nodes[r])) {
    return absl::InternalError(absl::StrCat("rank ", r, " said its node as '", line, "'"));
  }
  return absl::OkStatus();
}

absl::Status Named(const std::string& what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

absl::StatusOr<NodeMap> ExchangeNodes(const CommunicatorSpec& spec, Store& store) {
  // Every rank sets its report; rank 0 reads them all and publishes them in one key, which the
  // others read: 2n store calls, not n^2.
  const std::string prefix = absl::StrCat(spec.store_prefix, "node/");
  const std::string all_key = absl::StrCat(prefix, "all");
  std::vector<std::string> nodes(spec.size);
  const absl::Time deadline = absl::Now() + spec.timeout;
  auto left = [&] { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); };
  if (spec.rank != 0) {
    RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, spec.rank), absl::CEscape(NodeName(spec))));
    absl::StatusOr<std::string> all = store.Get(all_key, left());
    if (!all.ok()) return Named("waiting for rank 0 to publish every rank's node", all.status());
    std::vector<std::string> lines = absl::StrSplit(*all, '\n');
    if (lines.size() != static_cast<size_t>(spec.size)) {
      return absl::InternalError(
          absl::StrCat("rank 0 published ", lines.size(), " nodes for ", spec.size, " ranks"));
    }
    for (int r = 0; r < spec.size; ++r) RETURN_IF_ERROR(ParseNode(r, lines[r], nodes));
    return MakeNodeMap(nodes);
  }
  std::vector<std::string> lines = {absl::CEscape(NodeName(spec))};
  for (int r = 1; r < spec.size; ++r) {
    absl::StatusOr<std::string> value = store.Get(absl::StrCat(prefix, r), left());
    if (!value.ok())
      return Named(absl::StrCat("waiting for rank ", r, " to say its node"), value.status());
    lines.push_back(*value);
  }
  for (int r = 0; r < spec.size; ++r) RETURN_IF_ERROR(ParseNode(r, lines[r], nodes));
  RETURN_IF_ERROR(store.Set(all_key, absl::StrJoin(lines, "\n")));
  return MakeNodeMap(nodes);
}

Choice ChooseDataPlane(const NodeMap& map, const TransportOptions& options) {
  Choice c;
  if (map.nodes() == 1) {
    c.kind = Choice::kShm;
    c.why = "every rank on one node: shared memory";
    return c;
  }
  const bool shared = map.AnyNodeShared();
  c.hierarchical_allreduce = options.hierarchical_allreduce.value_or(shared);
  c.hierarchical_allgather = options.hierarchical_allgather.value_or(shared);
  const std::string spans = absl::StrCat(map.nodes(), " nodes");
  if (!c.hierarchical_allreduce && !c.hierarchical_allgather) {
    c.why = absl::StrCat(
        spans, shared ? ", hierarchical collectives turned off" : ", one rank each", ": Gloo");
    return c;
  }
  c.kind = Choice::kHierarchical;
  c.why = absl::StrCat(spans, ": shared memory within a node, Gloo between nodes (allreduce ",
                       c.hierarchical_allreduce ? "hierarchical" : "flat", ", allgather ",
                       c.hierarchical_allgather ? "hierarchical" : "flat", ")");
  return c;
}

}  // namespace troika::transport
