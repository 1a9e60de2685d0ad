#include "libclient/transport/hierarchical/node_map.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "libclient/transport/shm/shm_segment.h"

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

uint64_t FreeShmBytes() {
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return 0;  // no /dev/shm: no shared memory either
  return uint64_t{st.f_bavail} * st.f_frsize;
}

NodeMap MakeNodeMap(const std::vector<std::string>& node_by_rank,
                    const std::vector<uint64_t>& free_by_rank) {
  NodeMap map;
  std::map<std::string, int> index;
  for (size_t r = 0; r < node_by_rank.size(); ++r) {
    auto [it, added] = index.emplace(node_by_rank[r], map.nodes());
    if (added) {
      map.ranks.emplace_back();
      map.names.push_back(node_by_rank[r]);
      map.shm_free.push_back(std::numeric_limits<uint64_t>::max());
    }
    map.node_of.push_back(it->second);
    map.ranks[it->second].push_back(static_cast<int>(r));
    map.shm_free[it->second] = std::min(map.shm_free[it->second], free_by_rank[r]);
  }
  return map;
}

namespace {

// "<free bytes> <escaped node>" per rank, one line each, as rank 0 publishes them.
std::string Report(uint64_t free, const std::string& node) {
  return absl::StrCat(free, " ", absl::CEscape(node));
}

absl::Status ParseReport(int r, const std::string& line, std::vector<uint64_t>& free,
                         std::vector<std::string>& nodes) {
  std::pair<std::string, std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
  if (!absl::SimpleAtoi(parts.first, &free[r]) || !absl::CUnescape(parts.second, &nodes[r])) {
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
  std::vector<uint64_t> free(spec.size);
  const absl::Time deadline = absl::Now() + spec.timeout;
  auto left = [&] { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); };
  if (spec.rank != 0) {
    RETURN_IF_ERROR(
        store.Set(absl::StrCat(prefix, spec.rank), Report(FreeShmBytes(), NodeName(spec))));
    absl::StatusOr<std::string> all = store.Get(all_key, left());
    if (!all.ok()) return Named("waiting for rank 0 to publish every rank's node", all.status());
    std::vector<std::string> lines = absl::StrSplit(*all, '\n');
    if (lines.size() != static_cast<size_t>(spec.size)) {
      return absl::InternalError(
          absl::StrCat("rank 0 published ", lines.size(), " nodes for ", spec.size, " ranks"));
    }
    for (int r = 0; r < spec.size; ++r) RETURN_IF_ERROR(ParseReport(r, lines[r], free, nodes));
    return MakeNodeMap(nodes, free);
  }
  std::vector<std::string> lines = {Report(FreeShmBytes(), NodeName(spec))};
  for (int r = 1; r < spec.size; ++r) {
    absl::StatusOr<std::string> value = store.Get(absl::StrCat(prefix, r), left());
    if (!value.ok())
      return Named(absl::StrCat("waiting for rank ", r, " to say its node"), value.status());
    lines.push_back(*value);
  }
  for (int r = 0; r < spec.size; ++r) RETURN_IF_ERROR(ParseReport(r, lines[r], free, nodes));
  RETURN_IF_ERROR(store.Set(all_key, absl::StrJoin(lines, "\n")));
  return MakeNodeMap(nodes, free);
}

namespace {

// The first node of several ranks whose /dev/shm cannot hold their segment, or -1.
int NodeShortOfShm(const NodeMap& map) {
  for (int k = 0; k < map.nodes(); ++k) {
    const int n = static_cast<int>(map.ranks[k].size());
    if (n > 1 && map.shm_free[k] < shm_internal::SegmentBytes(n)) return k;
  }
  return -1;
}

std::string ShortOfShm(const NodeMap& map, int k) {
  const int n = static_cast<int>(map.ranks[k].size());
  return absl::StrCat("/dev/shm on node '", map.names[k], "' has ", map.shm_free[k],
                      " bytes free (0: it cannot be read), fewer than the ",
                      shm_internal::SegmentBytes(n), " that the shared memory of its ", n,
                      " ranks needs; using Gloo (TCP) instead (enlarge /dev/shm: docker run "
                      "--shm-size, a Kubernetes emptyDir with medium: Memory; docs/shm.md)");
}

}  // namespace

Choice ChooseDataPlane(const NodeMap& map, const TransportOptions& options) {
  Choice c;
  const int short_node = NodeShortOfShm(map);
  if (map.nodes() == 1) {
    c.kind = short_node < 0 ? Choice::kShm : Choice::kGloo;
    c.why = short_node < 0 ? "every rank on one node: shared memory" : ShortOfShm(map, short_node);
    c.warn = short_node >= 0;
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
  if (short_node >= 0) {
    c.why = ShortOfShm(map, short_node);
    c.warn = true;
    return c;
  }
  c.kind = Choice::kHierarchical;
  c.why = absl::StrCat(spans, ": shared memory within a node, Gloo between nodes (allreduce ",
                       c.hierarchical_allreduce ? "hierarchical" : "flat", ", allgather ",
                       c.hierarchical_allgather ? "hierarchical" : "flat", ")");
  return c;
}

}  // namespace troika::transport
