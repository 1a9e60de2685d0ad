#pragma once
// SimulatedNodesTransport: a Transport that connects through another one after giving every
// rank a node of its own choosing (CommunicatorSpec::node), so that threads of one process
// act as the ranks of several hosts: rank r is on node "node<r % nodes>" (the nodes' ranks
// interleave, so no node's ranks are consecutive). Header-only.

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libclient/transport/transport.h"

namespace troika::transport::conformance {

class SimulatedNodesTransport : public Transport {
 public:
  SimulatedNodesTransport(std::unique_ptr<Transport> inner, int nodes)
      : inner_(std::move(inner)), nodes_(nodes) {}

  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorSpec& spec,
                                                        Store& store) override {
    CommunicatorSpec on_node = spec;
    on_node.node = absl::StrCat("node", spec.rank % nodes_);
    return inner_->Connect(on_node, store);
  }

 private:
  const std::unique_ptr<Transport> inner_;
  const int nodes_;
};

// "hierarchical2" and "auto2": the transport named before the digit, its ranks on that many
// simulated nodes; any other name: CreateTransport(name).
inline absl::StatusOr<std::unique_ptr<Transport>> CreateTestTransport(const std::string& name) {
  for (const char* base : {"hierarchical", "auto"}) {
    const std::string prefix = base;
    if (name.size() == prefix.size() + 1 && name.compare(0, prefix.size(), prefix) == 0) {
      auto inner = CreateTransport(prefix);
      if (!inner.ok()) return inner.status();
      return std::make_unique<SimulatedNodesTransport>(*std::move(inner), name.back() - '0');
    }
  }
  return CreateTransport(name);
}

}  // namespace troika::transport::conformance
