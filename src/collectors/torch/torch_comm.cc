// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// torch.distributed communication (torch_comm.h).
//
// Compiled against LibTorch 2.x only: 1.x has no dispatcher-level c10d
// operators (its ProcessGroup is another class), and this file then builds
// the stubs at the end. ProcessGroup.hpp pulls in most of ATen, so it is
// included here alone, not in the collector's translation unit.
#include "collectors/torch/torch_comm.h"

#include <torch/csrc/api/include/torch/version.h>  // TORCH_VERSION_MAJOR, in every LibTorch

#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/intern.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <array>
#include <deque>
#include <set>

#include "base/log.h"
#include "base/run_directory.h"
#include "core/clock.h"
#include "core/comm_progress.h"
#include "core/event.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"
#endif

namespace trainprof::torch {
namespace {

constexpr std::string_view kCallPrefix = "c10d::";
constexpr std::string_view kWorkPrefix = "gloo:";

std::mutex g_members_mutex;
std::unordered_map<std::string, std::vector<int32_t>> g_members;  // group name -> world ranks

}  // namespace

CommRole comm_role(const char* name) {
  if (name == nullptr) return CommRole::kNone;
  if (std::strncmp(name, kCallPrefix.data(), kCallPrefix.size()) == 0) return CommRole::kCall;
  if (std::strncmp(name, kWorkPrefix.data(), kWorkPrefix.size()) == 0) return CommRole::kWork;
  return CommRole::kNone;
}

#if TORCH_VERSION_MAJOR >= 2
namespace {

// Where a c10d operator keeps what a COMM event says, found by argument
// name in its schema (the names are stable across torch 2.x releases; an
// operator without a process group, such as c10d::check_for_nan, is not
// communication).
struct Layout {
  bool communication = false;
  int group = -1;  // the ProcessGroup argument
  int data = -1;   // the tensors whose bytes count for this rank, -1: none (barriers)
  int async = -1;  // async_op
  int peer = -1;   // root_rank, dst or src (a group rank)
  int tag = -1;
  uint8_t flags = 0;
  const char* label = nullptr;  // "allreduce" for c10d::allreduce_ (interned)
  std::string match;            // the label without '_', to pair with a "gloo:" name
};

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += c;
  return out;
}

Layout make_layout(const char* name, const c10::FunctionSchema& schema) {
  Layout l;
  std::string_view op = std::string_view(name).substr(kCallPrefix.size());
  while (!op.empty() && op.front() == '_') op.remove_prefix(1);
  while (!op.empty() && op.back() == '_') op.remove_suffix(1);
  l.label = detail::intern(op);
  l.match = without_underscores(op);
  const auto& args = schema.arguments();
  auto find = [&](std::string_view arg) {
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].name() == arg) return static_cast<int>(i);
    return -1;
  };
  l.group = find("process_group");
  l.communication = l.group >= 0;
  l.async = find("async_op");
  l.tag = find("tag");
  for (const char* p : {"root_rank", "dst", "src"})
    if (l.peer < 0) l.peer = find(p);
  bool barrier = op.find("barrier") != std::string_view::npos;
  if (!barrier) {
    // What this rank moves: what it receives for a scatter, else what it
    // contributes (the whole reduced vector for a reduce-scatter).
    const char* candidates[] = {"input_tensors", "input_tensor", "inputs", "input_list", "input", "tensors"};
    if (op == "scatter") l.data = find("output_tensors");
    for (const char* c : candidates)
      if (l.data < 0) l.data = find(c);
  }
  if (op == "send") {
    l.flags = raw::kCommSend;
  } else if (op.starts_with("recv")) {
    l.flags = raw::kCommRecv;
  } else {
    l.flags = raw::kCommCollective;
  }
  return l;
}

// The tensors of an argument: a Tensor, a Tensor[] or a Tensor[][].
template <typename Visit>
void for_each_tensor(const c10::IValue& v, Visit&& visit) {
  if (v.isTensor()) {
    visit(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) for_each_tensor(e, visit);
  }
}

constexpr size_t kMaxKeys = 8;

// A call waiting for its worker record, or one written at its own end.
struct Pending {
  const char* label = nullptr;
  std::string_view match;
  uint8_t flags = 0;
  uint32_t sequence = core::kNoSequenceNumber;
  uint64_t bytes = 0;
  const char* group = nullptr;
  int32_t peer = -1;
  int32_t tag = -1;
  uint64_t call_ticks = 0;
  std::array<const void*, kMaxKeys> keys{};  // its tensors' addresses
  size_t key_count = 0;
  bool keyless = false;  // a barrier: its worker record has no tensors
};

constexpr size_t kMaxPending = 256;

std::mutex g_mutex;  // guards the state below (communication calls are rare)
std::unordered_map<const char*, Layout> g_layouts;
std::unordered_map<std::string, uint32_t> g_sequences;  // collectives called per group
std::set<std::string> g_groups_recorded;                // in this session's run
std::deque<Pending> g_pending;                          // oldest first
uint64_t g_unclaimed = 0;

const Layout& layout_of(const char* name, const at::RecordFunction& fn) {
  auto it = g_layouts.find(name);
  if (it != g_layouts.end()) return it->second;
  Layout l;
  if (std::optional<c10::FunctionSchema> schema = fn.operator_schema()) l = make_layout(name, *schema);
  return g_layouts.emplace(name, std::move(l)).first->second;
}

std::vector<int32_t> members_of(const std::string& group, int size) {
  {
    std::lock_guard lock(g_members_mutex);
    auto it = g_members.find(group);
    if (it != g_members.end()) return it->second;
  }
  // Unregistered: a group as large as the world has every rank in order.
  std::vector<int32_t> ranks;
  if (size > 0 && (group == "0" || size == base::detect_rank().world_size)) {
    for (int32_t r = 0; r < size; ++r) ranks.push_back(r);
  }
  return ranks;
}

// Under g_mutex: the group's COMM_GROUP record, once per run; its members.
std::vector<int32_t> note_group(const std::string& group, const c10d::ProcessGroup& pg) {
  std::vector<int32_t> members = members_of(group, pg.getSize());
  if (g_groups_recorded.insert(group).second) {
    std::string list;
    for (int32_t r : members) list += (list.empty() ? "" : ",") + std::to_string(r);
    std::string text = group + raw::kCommGroupSeparator + list + raw::kCommGroupSeparator +
                       "torch.distributed " + pg.getBackendName();
    core::record_event_fields(detail::now_ticks(), 0, detail::intern(text),
                              static_cast<uint8_t>(raw::EventKind::kCommGroup), 0, 0, 0);
  }
  return members;
}

// The calling thread's c10d call, when it is written at its own end.
struct OpenCall {
  const at::RecordFunction* fn = nullptr;
  Pending call;
};
thread_local OpenCall t_call;

// Claimed calls by their "gloo:" record, written at its end, which may come
// on another thread (a send or receive starts on the calling thread and
// ends on a worker). Under g_mutex; the oldest goes when a record never ended.
constexpr size_t kMaxClaimed = 64;
std::deque<std::pair<const at::RecordFunction*, Pending>> g_claimed;

void call_started(const char* name, const at::RecordFunction& fn, uint64_t ticks) {
  c10::ArrayRef<const c10::IValue> inputs = fn.inputs();
  std::lock_guard lock(g_mutex);
  const Layout& l = layout_of(name, fn);
  if (!l.communication || static_cast<size_t>(l.group) >= inputs.size()) return;
  auto pg = inputs[static_cast<size_t>(l.group)].toCustomClass<c10d::ProcessGroup>();
  const std::string& group = pg->getGroupName();
  std::vector<int32_t> members = note_group(group, *pg);
  Pending p;
  p.label = l.label;
  p.match = l.match;
  p.flags = l.flags;
  p.call_ticks = ticks;
  p.group = detail::intern(group);
  p.keyless = l.data < 0;
  bool all_cpu = true;
  if (l.data >= 0 && static_cast<size_t>(l.data) < inputs.size()) {
    for_each_tensor(inputs[static_cast<size_t>(l.data)], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      p.bytes += static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_size());
    });
  }
  for (const c10::IValue& v : inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      all_cpu = all_cpu && t.is_cpu();
      const void* key = t.has_storage() ? t.data_ptr() : nullptr;
      if (key != nullptr && p.key_count < kMaxKeys) p.keys[p.key_count++] = key;
    });
  }
  auto int_at = [&](int i) {
    return i >= 0 && static_cast<size_t>(i) < inputs.size() && inputs[static_cast<size_t>(i)].isInt()
               ? inputs[static_cast<size_t>(i)].toInt()
               : int64_t{-1};
  };
  if (int64_t peer = int_at(l.peer); peer >= 0) {
    p.peer = static_cast<size_t>(peer) < members.size() ? members[static_cast<size_t>(peer)]
                                                        : static_cast<int32_t>(peer);
  }
  p.tag = static_cast<int32_t>(int_at(l.tag));
  if (p.flags & raw::kCommCollective) {
    p.sequence = g_sequences[group]++;
    core::collective_entered(p.group, p.sequence, p.label);
    // An asynchronous collective is in flight while the caller goes on (a
    // DDP bucket during the backward pass); a synchronous one blocks it.
    bool async = l.async >= 0 && static_cast<size_t>(l.async) < inputs.size() &&
                 inputs[static_cast<size_t>(l.async)].isBool() &&
                 inputs[static_cast<size_t>(l.async)].toBool();
    if (async) p.flags |= raw::kCommCompletion;
  }
  std::string backend = pg->getBackendName();
  bool worker_follows = backend == "gloo" || (backend == "undefined" && all_cpu);
  if (worker_follows) {
    if (g_pending.size() == kMaxPending) {
      g_pending.pop_front();
      ++g_unclaimed;
    }
    g_pending.push_back(p);
  } else {
    t_call = OpenCall{&fn, p};
  }
}

// The oldest pending call that `fn` (a "gloo:" record) runs: the same
// operation, sharing a tensor (none for a barrier).
void work_started(const char* name, const at::RecordFunction& fn) {
  std::string match = without_underscores(std::string_view(name).substr(kWorkPrefix.size()));
  std::array<const void*, kMaxKeys> keys{};
  size_t key_count = 0;
  for (const c10::IValue& v : fn.inputs()) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (t.defined() && t.has_storage() && key_count < kMaxKeys) keys[key_count++] = t.data_ptr();
    });
  }
  std::lock_guard lock(g_mutex);
  for (auto it = g_pending.begin(); it != g_pending.end(); ++it) {
    std::string_view m = it->match;
    if (!(m.starts_with(match) || std::string_view(match).starts_with(m))) continue;
    bool claimed = it->keyless && key_count == 0;
    for (size_t i = 0; i < key_count && !claimed; ++i) {
      for (size_t j = 0; j < it->key_count && !claimed; ++j) claimed = keys[i] == it->keys[j];
    }
    if (claimed) {
      if (g_claimed.size() == kMaxClaimed) g_claimed.pop_front();
      g_claimed.emplace_back(&fn, *it);
      g_pending.erase(it);
      return;
    }
  }
}

void write(const Pending& p, uint64_t end_ticks) {
  if (p.flags & raw::kCommCollective) core::collective_returned(p.group, p.sequence);
  if (!detail::host_recording()) return;
  core::record_comm(p.call_ticks, end_ticks, p.label, p.flags, p.sequence, p.bytes, p.group, p.peer, p.tag);
}

}  // namespace

bool comm_supported() {
  return true;
}

void comm_session_started() noexcept {
  std::lock_guard lock(g_mutex);
  g_groups_recorded.clear();
  g_pending.clear();
  g_claimed.clear();
  g_unclaimed = 0;
}

uint64_t comm_session_stopped() noexcept {
  std::lock_guard lock(g_mutex);
  uint64_t unclaimed = g_unclaimed + g_pending.size();
  g_pending.clear();
  g_claimed.clear();
  g_unclaimed = 0;
  return unclaimed;
}

void comm_started(CommRole role, const char* name, const at::RecordFunction& fn, uint64_t ticks) noexcept {
  try {
    if (role == CommRole::kCall) {
      call_started(name, fn, ticks);
    } else if (role == CommRole::kWork) {
      work_started(name, fn);
    }
  } catch (const std::exception& e) {
    // A call LibTorch cannot describe: it stays a plain operator.
    static std::once_flag once;
    std::call_once(once, [&] {
      base::log_warning(std::string("LibTorch collector: a torch.distributed call could not be read (") +
                        e.what() + "); such calls are recorded as operators only");
    });
  } catch (...) {
  }
}

bool comm_ended(CommRole role, const at::RecordFunction& fn, uint64_t ticks) noexcept {
  if (role == CommRole::kCall) {
    if (t_call.fn != &fn) return false;
    t_call.fn = nullptr;
    write(t_call.call, ticks);
    return false;  // the call is an operator as well
  }
  if (role != CommRole::kWork) return false;
  Pending call;
  {
    std::lock_guard lock(g_mutex);
    auto it = std::find_if(g_claimed.begin(), g_claimed.end(), [&](const auto& c) { return c.first == &fn; });
    if (it == g_claimed.end()) return false;
    call = it->second;
    g_claimed.erase(it);
  }
  write(call, ticks);
  return true;
}

#else  // LibTorch 1.x

bool comm_supported() {
  return false;
}
void comm_session_started() noexcept {}
uint64_t comm_session_stopped() noexcept {
  return 0;
}
void comm_started(CommRole, const char*, const at::RecordFunction&, uint64_t) noexcept {}
bool comm_ended(CommRole, const at::RecordFunction&, uint64_t) noexcept {
  return false;
}

#endif

}  // namespace trainprof::torch

extern "C" int trainprof_torch_comm_group(const char* name, const int32_t* world_ranks, int64_t count) {
  if (name == nullptr || count < 0 || (count > 0 && world_ranks == nullptr)) return -1;
  try {
    std::vector<int32_t> ranks(world_ranks, world_ranks + count);
    std::lock_guard lock(trainprof::torch::g_members_mutex);
    trainprof::torch::g_members[name] = std::move(ranks);
    return 0;
  } catch (...) {
    return -1;
  }
}
