// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/cupti/graph_nodes.h"

namespace trainprof::cupti {

void GraphNodeTable::made(uint64_t node, Made how) {
  std::lock_guard<std::mutex> lock(mu_);
  if (nodes_.size() < kMaxNodes || nodes_.count(node) != 0) nodes_[node] = Entry{how, false};
}

void GraphNodeTable::cloned(uint64_t node, uint64_t original) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(original);
  if (it == nodes_.end() || (nodes_.size() >= kMaxNodes && nodes_.count(node) == 0)) return;
  it->second.cloned = true;
  Made how = it->second.how;  // before the insertion, which may rehash
  nodes_[node] = Entry{how, false};
}

void GraphNodeTable::destroyed(uint64_t node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node);
  if (it != nodes_.end() && !it->second.cloned) nodes_.erase(it);
}

std::optional<GraphNodeTable::Made> GraphNodeTable::find(uint64_t node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.how;
}

size_t GraphNodeTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.size();
}

void on_graph_resource(CUpti_CallbackId cbid, const CUpti_ResourceData* data, GraphNodeIdFn node_id,
                       OpenOperatorFn open_operator, uint64_t now_ticks, GraphNodeTable& table) {
  if (data == nullptr || data->resourceDescriptor == nullptr || node_id == nullptr) return;
  const auto* graph = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
  uint64_t node = 0;
  if (graph->node == nullptr || node_id(graph->node, &node) != CUPTI_SUCCESS || node == 0) return;
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
      table.made(node, {open_operator != nullptr ? open_operator() : nullptr, now_ticks});
      break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED: {
      uint64_t original = 0;
      if (graph->originalNode != nullptr && node_id(graph->originalNode, &original) == CUPTI_SUCCESS)
        table.cloned(node, original);
      break;
    }
    case CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING: table.destroyed(node); break;
    default: break;
  }
}

}  // namespace trainprof::cupti
