#pragma once
// SimulatedNodesTransport: a Transport that connects through another one after giving every
// rank a node of its own choosing (CommunicatorSpec::node), so that threads of one process
// act as the ranks of several hosts: rank r is on node "node<r % nodes>" (the nodes' ranks
// interleave, so no node's ranks are consecutive), or with `blocks` on node
// "node<r * nodes / size>" (each node's ranks consecutive, as agents number them).
// Header-only.

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libclient/transport/transport.h"

namespace troika::transport::conformance {

class SimulatedNodesTransport : public Transport {
 public:
  SimulatedNodesTransport(std::unique_ptr<Transport> inner, int nodes, bool blocks = false)
      : inner_(std::move(inner)), nodes_(nodes), blocks_(blocks) {}

  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override {
    CommunicatorSpec on_node = spec;
    const int node = blocks_ && spec.size > 0 ? spec.rank * nodes_ / spec.size : spec.rank % nodes_;
    on_node.node = absl::StrCat("node", node);
    return inner_->Connect(on_node, store);
  }

 private:
  const std::unique_ptr<Transport> inner_;
  const int nodes_;
  const bool blocks_;
};

// "hierarchical2" and "auto2": the transport named before the digit, its ranks interleaved
// on that many simulated nodes; "hierarchical2b": in blocks; any other name:
// CreateTransport(name).
inline absl::StatusOr<std::unique_ptr<Transport>> CreateTestTransport(const std::string& name) {
  for (const char* base : {"hierarchical", "auto"}) {
    const std::string prefix = base;
    const bool blocks = !name.empty() && name.back() == 'b';
    const size_t digit = prefix.size();
    if (name.size() == digit + 1 + (blocks ? 1 : 0) && name.compare(0, digit, prefix) == 0) {
      auto inner = CreateTransport(prefix);
      if (!inner.ok()) return inner.status();
      return std::make_unique<SimulatedNodesTransport>(*std::move(inner), name[digit] - '0',
                                                       blocks);
    }
  }
  return CreateTransport(name);
}

}  // namespace troika::transport::conformance
