// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Which operator made each CUDA graph node.
//
// A CUDA graph's kernels, copies and sets carry the graph's id and their
// node's (CUPTI's activity records), and a graph launch (cudaGraphLaunch)
// starts them all: by correlation alone, every one of them belongs to the
// launch. What made them is the operator that ran while the graph was
// captured. CUPTI's resource callbacks say when a node is made (on the
// thread that makes it: during a stream capture, the thread launching the
// kernel) and when an executable graph's node is cloned from it
// (cudaGraphInstantiate); the table keeps, per node id, the operator open
// then and when. A clone inherits its original's entry. A node that was
// cloned outlives its destruction here: PyTorch destroys a captured graph
// once it is instantiated, and a record may name either node.
#ifndef TRAINPROF_COLLECTORS_CUPTI_GRAPH_NODES_H_
#define TRAINPROF_COLLECTORS_CUPTI_GRAPH_NODES_H_

#include <cupti_callbacks.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace trainprof::cupti {

class GraphNodeTable {
 public:
  struct Made {
    const char* operator_name;  // interned; nullptr: none open
    uint64_t ticks;             // when the node was made
  };
  // At most this many nodes are kept (a program that captures new graphs
  // for ever and never destroys them): later ones are not named. A quarter
  // of a million: thousands of graphs of the size training captures.
  static constexpr size_t kMaxNodes = 1 << 18;

  void made(uint64_t node, Made how);
  void cloned(uint64_t node, uint64_t original);
  void destroyed(uint64_t node);
  std::optional<Made> find(uint64_t node) const;
  size_t size() const;

 private:
  struct Entry {
    Made how;
    bool cloned;  // kept when destroyed
  };
  mutable std::mutex mu_;  // callbacks come on whichever thread makes a graph
  std::unordered_map<uint64_t, Entry> nodes_;
};

// cuptiGetGraphNodeId's shape.
using GraphNodeIdFn = CUptiResult (*)(CUgraphNode node, uint64_t* id);
// The operator open on the calling thread (interned), or nullptr.
using OpenOperatorFn = const char* (*)() noexcept;

// One CUPTI resource callback (domain CUPTI_CB_DOMAIN_RESOURCE; `data` its
// CUpti_ResourceData) into `table`: node made, cloned, or about to be
// destroyed; other callbacks are ignored. `now_ticks`: the time of a made node.
void on_graph_resource(CUpti_CallbackId cbid, const CUpti_ResourceData* data, GraphNodeIdFn node_id,
                       OpenOperatorFn open_operator, uint64_t now_ticks, GraphNodeTable& table);

}  // namespace trainprof::cupti

#endif  // TRAINPROF_COLLECTORS_CUPTI_GRAPH_NODES_H_
