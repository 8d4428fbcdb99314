// Copyright trainprof authors. The LibTorch collector: every ATen operator and
// autograd node, through LibTorch's global RecordFunction callbacks.
//
// Linking (or preloading) libtrainprof_torch is enough: its load-time
// constructor registers the collector with the core, and a session that
// records Activity::CPU adds the callbacks; they are removed again when the
// session closes, so an idle profiler costs LibTorch nothing.
//
// Hot path (per operator): the start callback pushes (RecordFunction address,
// start ticks, inputs string) on a per-thread stack; the end callback pops it
// and appends one OPERATOR event (and one OPERATOR_INPUTS event when shapes
// are recorded). No ObserverContext is allocated. An operator schema's name
// is recorded by pointer (it lives as long as the operator); names built per
// call (autograd nodes, user scopes) are interned through a per-thread cache
// that checks contents, not only the pointer.
//
// Memory (profile_memory): LibTorch's allocators report every allocation and
// free to the PROFILER_STATE entry of the calling thread's debug info
// (c10::reportMemoryUsageToProfiler). MemoryReporter is installed there on
// the thread that starts the session and on every thread that runs an
// operator; a report becomes two Event slots (MemoryReport, MemoryTotals),
// and the analysis finds the operator that was running. After the session
// each thread takes it out at its next allocation, or when it exits.
#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <execinfo.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"
#include "collectors/torch/native_stack.h"
#include "collectors/torch/torch_comm.h"
#include "core/collector.h"
#include "core/event.h"
#include "core/gpu_sync.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof::torch_collector {
namespace {

using detail::Event;

constexpr size_t kMaxDepth = 128;  // deeper operators are not recorded (counted)
constexpr size_t kNameCacheSize = 1024;

struct OpenOp {
  const at::RecordFunction* fn;
  uint64_t start_ticks;
  const char* inputs;  // interned "dims\x1ftypes", or nullptr
};

struct NameSlot {
  const char* seen = nullptr;       // the pointer LibTorch passed
  const char* interned = nullptr;   // our process-lifetime copy
  bool schema = false;              // `seen` is an operator schema's name (see operator_name)
  CommRole comm = CommRole::kNone;  // torch.distributed's part in it (torch_comm.h)
};

// Interned strings by a 64-bit hash of what they describe (an input
// signature, a call stack): open addressing, grown at half full, so distinct
// keys never evict each other (a direct-mapped cache thrashed on two stacks
// of one training step that shared a slot, re-formatting both every step).
class InternedByHash {
 public:
  const char* find(uint64_t hash) const {
    for (size_t i = home(hash);; i = (i + 1) & mask_) {
      if (slots_[i].text == nullptr) return nullptr;
      if (slots_[i].hash == hash) return slots_[i].text;
    }
  }
  void insert(uint64_t hash, const char* text) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = home(hash);
    while (slots_[i].text != nullptr && slots_[i].hash != hash) i = (i + 1) & mask_;
    if (slots_[i].text == nullptr) ++size_;
    slots_[i] = Slot{hash, text};
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* text = nullptr;
  };
  // The hashes end in a multiplication, whose low bits depend on the low
  // bits of its operand only: the high half is folded in, or keys that
  // differ in their high bits share a home slot and probe long chains.
  size_t home(uint64_t hash) const { return static_cast<size_t>(hash ^ (hash >> 32)) & mask_; }
  void grow() {
    std::vector<Slot> old(std::max<size_t>(64, 2 * slots_.size()));
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.text != nullptr) insert(s.hash, s.text);
  }
  std::vector<Slot> slots_ = std::vector<Slot>(64);
  size_t mask_ = 63;
  size_t size_ = 0;
};

// A native call stack, formatted and interned once per distinct stack.
struct Stack {
  uint64_t hash = 0;
  const char* text = nullptr;
};
constexpr int kMaxFrames = 48;

// Per-thread state, allocated on the thread's first operator (a pointer in
// TLS keeps the static TLS footprint small for programs that dlopen us).
struct ThreadOps {
  std::array<OpenOp, kMaxDepth> open;
  size_t depth = 0;
  std::array<NameSlot, kNameCacheSize> names;
  InternedByHash inputs;  // input signatures
  // with_stack: the stack of the outermost open operator (its nested
  // operators share its call site in the user's code).
  InternedByHash stacks;
  Stack top_stack;
  // with_modules: the front end's module hierarchy at the outermost open
  // operator (interned), or nullptr.
  const char* top_module = nullptr;
};

// initial-exec: read %fs-relative on every operator, not through
// __tls_get_addr. Eight bytes of static TLS, which glibc's surplus covers
// even when this library is dlopened.
[[gnu::tls_model("initial-exec")]] thread_local ThreadOps* t_ops = nullptr;

[[gnu::noinline, gnu::cold]] ThreadOps& new_thread_ops() {
  t_ops = new ThreadOps();  // lives until the process ends: threads are reused
  return *t_ops;
}

inline ThreadOps& thread_ops() {
  ThreadOps* t = t_ops;
  return t != nullptr ? *t : new_thread_ops();
}

std::atomic<bool> g_record_inputs{false};  // an OPERATOR_INPUTS event per operator
std::atomic<bool> g_has_inputs{false};     // the callback asked LibTorch for the inputs
std::atomic<bool> g_with_modules{false};
std::atomic<bool> g_with_context{false};  // with_stack || with_modules
std::atomic<bool> g_with_flops{false};
std::atomic<bool> g_with_stack{false};
std::atomic<bool> g_comm{false};  // torch.distributed calls become COMM events (torch_comm.h)
std::atomic<uint64_t> g_too_deep{0};
std::atomic<bool> g_profile_memory{false};
std::atomic<bool> g_memory_shadowed{false};  // LibTorch's profiler held a thread's PROFILER_STATE

// Takes the reporter out of the calling thread's debug info (after a
// session: from the allocator's calls, see MemoryReporter).
void remove_memory_reporter() noexcept;

// The type of the allocation totals c10 reports: int64_t in LibTorch 1.x,
// size_t in 2.x; taken from the public virtual, so both compile.
template <typename Method>
struct MemoryTotalArg;
template <typename Class, typename Ptr, typename Size, typename Total, typename Device>
struct MemoryTotalArg<void (Class::*)(Ptr, Size, Total, Total, Device)> {
  using type = Total;
};
using MemoryTotal = MemoryTotalArg<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

// LibTorch's profiler code static_casts whatever PROFILER_STATE holds to
// ProfilerStateBase, so the reporter is one, in the Disabled state: there
// LibTorch's profilerEnabled() stays false and its profiler can still push
// its own state on top (it then gets that thread's reports until it pops).
class MemoryReporter final : public torch::profiler::impl::ProfilerStateBase {
 public:
  MemoryReporter()
      : ProfilerStateBase(
            torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)) {}

  // Called by the allocator for every allocation (> 0) and free (< 0): no
  // lock, no allocation.
  void reportMemoryUsage(void* ptr, int64_t bytes, MemoryTotal total_allocated, MemoryTotal total_reserved,
                         c10::Device device) override {
    if (!detail::host_recording()) {
      if (!g_profile_memory.load(std::memory_order_relaxed)) remove_memory_reporter();
      return;
    }
    detail::record_memory(detail::now_ticks(), reinterpret_cast<uintptr_t>(ptr), bytes,
                          static_cast<uint64_t>(total_allocated), static_cast<uint64_t>(total_reserved),
                          raw::memory_device(static_cast<int>(device.type()), device.index()));
  }

  // Also what makes c10's CPU allocator track sizes and report at all. c10
  // asks it on every CPU allocation and free of a thread that holds the
  // reporter: after the session, that thread's next allocation takes the
  // reporter out (c10 holds its own reference meanwhile), so no callback
  // has to stay on for it.
  bool memoryProfilingEnabled() const override {
    if (g_profile_memory.load(std::memory_order_relaxed)) return true;
    remove_memory_reporter();
    return false;
  }

  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }
};

// One reporter for the process.
const std::shared_ptr<MemoryReporter>& memory_reporter() {
  static auto* reporter = new std::shared_ptr<MemoryReporter>(std::make_shared<MemoryReporter>());
  return *reporter;
}

// Set by this library's exit handler. It runs before LibTorch's static
// destructors (a library is finalized before the libraries it uses) but
// after every thread-local destructor of the exiting thread: from then on
// nothing here calls into LibTorch.
std::atomic<bool> g_exiting{false};
// Set when this thread's ReporterInstalled is destroyed: c10's thread-locals
// may be gone next, so this thread no longer touches its debug info.
[[gnu::tls_model("initial-exec")]] thread_local bool t_thread_exiting = false;

// Pops the reporter when it is the newest PROFILER_STATE entry of this
// thread's debug info (a guard may have pushed another on top: then later).
bool pop_memory_reporter() noexcept {
  try {
    if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE) != memory_reporter())
      return false;
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    return true;
  } catch (...) {
    return false;  // another kind on top
  }
}

struct ReporterInstalled {
  bool installed = false;
  ~ReporterInstalled() {
    t_thread_exiting = true;
    if (!installed) return;
    // c10's debug info of this thread was created before this object
    // (install_memory_reporter reads it first), so it is destroyed after
    // it: the reporter can still be taken out here, and must be, or exit
    // would find it in torn-down thread-local storage.
    pop_memory_reporter();
    installed = false;
  }
};
thread_local ReporterInstalled t_reporter;

// Puts the reporter in the calling thread's debug info unless it is there,
// or another profiler state is (LibTorch's profiler is recording here).
// Guards (autograd engine, at::launch) copy the debug info into the threads
// they run tasks on, so most threads inherit it.
//
// A thread must not keep it after the session: LibTorch's own profiler
// refuses to start on a thread whose PROFILER_STATE is taken. So each thread
// that installed it removes it at stop (the stopping thread), at its next
// allocation or free after the session (the others: the allocator asks the
// reporter, see MemoryReporter) or when it exits. No operator callback stays
// on for it.
[[gnu::noinline]] void install_memory_reporter() {
  if (t_thread_exiting || g_exiting.load(std::memory_order_relaxed)) return;
  c10::DebugInfoBase* current = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  if (current == memory_reporter().get()) return;
  if (current != nullptr) {
    g_memory_shadowed.store(true, std::memory_order_relaxed);
    return;
  }
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, memory_reporter());
  t_reporter.installed = true;
}

void remove_memory_reporter() noexcept {
  if (t_thread_exiting || !t_reporter.installed) return;
  if (!pop_memory_reporter()) return;
  t_reporter.installed = false;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t hash_name(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s != '\0'; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

// ---- Operator names ----
//
// RecordFunction::name() is public in every LibTorch: for an operator that
// comes through the dispatcher it is its FunctionSchema's name, which lives
// as long as the operator is registered; for the others (autograd nodes,
// user scopes) a string built per call. Which of the two a RecordFunction
// holds is private to LibTorch (and its type changed between releases); the
// public operator_name() tells it too, but copies the schema's strings, so it
// is asked once per pointer, on a cache miss. Names are cached per thread by
// pointer: a schema's name is then taken by pointer alone (no other string
// can live at its address while the operator exists), a per-call name only
// when its contents still match, so that a freed name whose address is
// reused is never mistaken for the one before.
[[gnu::noinline]] const NameSlot& operator_name_missed(ThreadOps& t, const at::RecordFunction& fn,
                                                       const char* name) {
  bool schema = fn.operator_name().has_value();
  NameSlot& by_text = t.names[hash_name(name) % kNameCacheSize];
  const char* interned = by_text.interned != nullptr && std::strcmp(by_text.interned, name) == 0
                             ? by_text.interned
                             : detail::intern(name);
  NameSlot slot{name, interned, schema, comm_role(name)};
  by_text = slot;
  NameSlot& by_pointer = t.names[(reinterpret_cast<uintptr_t>(name) >> 3) % kNameCacheSize];
  by_pointer = slot;
  return by_pointer;
}

const NameSlot kUnnamed{"", "", true, CommRole::kNone};

inline const NameSlot& operator_slot(ThreadOps& t, const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (name == nullptr) return kUnnamed;
  const NameSlot& slot = t.names[(reinterpret_cast<uintptr_t>(name) >> 3) % kNameCacheSize];
  if (slot.seen == name && (slot.schema || std::strcmp(slot.interned, name) == 0)) return slot;
  return operator_name_missed(t, fn, name);
}

// What an input is, for the types list. The tag tests that inline come
// first, and only a list reaches the element-type tests, which are calls
// into LibTorch (devices, dtypes and sizes lists are in most factory and
// conversion operators: two calls each cost 20 ns per operator).
const char* input_kind(const c10::IValue& v) {
  if (v.isNone()) return "";
  if (v.isScalar()) return "Scalar";
  if (v.isString()) return "String";
  if (!v.isList()) return "";
  if (v.isIntList()) return "ScalarList";  // sizes, strides: more common than tensor lists
  if (v.isTensorList()) return "TensorList";
  return "";
}

bool has_shape(const c10::IValue& v) {
  if (!v.isTensor()) return false;
  const at::Tensor& t = v.toTensor();
  return t.defined() && !t.is_nested();
}

// One word of a signature at position i: a bijection of the word for each
// position, so that signatures differing in one word never collide. The
// words' terms are independent of each other and summed: a serial chain of
// mix() over 10-20 words per operator (a multiplication each) was a third
// of the collector's cost with record_shapes.
inline uint64_t signature_term(uint64_t i, uint64_t word) {
  uint64_t x = (word ^ (i * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  x ^= x >> 32;
  return x * 0xc4ceb9fe1a85ec53ull;
}

// The words: the number of inputs; per tensor its dtype and rank, then its
// sizes; per other input its kind.
uint64_t hash_inputs(c10::ArrayRef<const c10::IValue> inputs) {
  uint64_t i = 0;
  uint64_t h = signature_term(i++, inputs.size());
  for (const c10::IValue& v : inputs) {
    if (has_shape(v)) {
      const at::Tensor& t = v.toTensor();
      c10::IntArrayRef sizes = t.sizes();
      h += signature_term(i++, 1000 + static_cast<uint64_t>(t.scalar_type()) + (sizes.size() << 16));
      for (int64_t d : sizes) h += signature_term(i++, static_cast<uint64_t>(d));
    } else {
      h += signature_term(i++, reinterpret_cast<uintptr_t>(input_kind(v)));
    }
  }
  return h;
}

std::string format_inputs(c10::ArrayRef<const c10::IValue> inputs) {
  std::string dims = "[", types = "[";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const c10::IValue& v = inputs[i];
    if (i > 0) {
      dims += ',';
      types += ',';
    }
    dims += '[';
    types += '"';
    if (has_shape(v)) {
      const at::Tensor& t = v.toTensor();
      for (int64_t k = 0; k < t.dim(); ++k) {
        if (k > 0) dims += ',';
        dims += std::to_string(t.sizes()[k]);
      }
      types += std::string_view(t.dtype().name().data(), t.dtype().name().size());
    } else {
      types += input_kind(v);
    }
    dims += ']';
    types += '"';
  }
  dims += ']';
  types += ']';
  return dims + raw::kInputsSeparator + types;
}

// ---- FLOPs (with_flops), by torch's formulas ----

enum class FlopsOp { kNone, kConv2d, kMm, kAddmm, kBmm, kBaddbmm, kElementwise };

// By name: a few string compares per operator, only while with_flops is on.
FlopsOp flops_op(const char* c_name) {
  if (c_name == nullptr) return FlopsOp::kNone;
  std::string_view name(c_name);
  if (name == "aten::conv2d") return FlopsOp::kConv2d;
  if (name == "aten::mm") return FlopsOp::kMm;
  if (name == "aten::addmm") return FlopsOp::kAddmm;
  if (name == "aten::bmm") return FlopsOp::kBmm;
  if (name == "aten::baddbmm") return FlopsOp::kBaddbmm;
  if (name == "aten::add" || name == "aten::mul") return FlopsOp::kElementwise;
  return FlopsOp::kNone;
}

c10::IntArrayRef sizes_of(c10::ArrayRef<const c10::IValue> inputs, size_t i) {
  return i < inputs.size() && has_shape(inputs[i]) ? inputs[i].toTensor().sizes() : c10::IntArrayRef();
}

// Element i of an int-list argument (a single int stands for all), or `fallback`.
int64_t list_arg(c10::ArrayRef<const c10::IValue> inputs, size_t arg, size_t i, int64_t fallback) {
  if (arg >= inputs.size()) return fallback;
  const c10::IValue& v = inputs[arg];
  if (v.isInt()) return v.toInt();
  if (!v.isIntList()) return fallback;
  c10::List<int64_t> list = v.toIntList();
  if (list.empty()) return fallback;
  return list.size() > i ? list.get(i) : list.get(0);
}

// aten::conv2d(input, weight, bias, stride, padding, dilation, groups):
// 2 x N x Hout x Wout x Kh x Kw x Cin x Cout / groups.
uint64_t conv2d_flops(c10::ArrayRef<const c10::IValue> inputs) {
  c10::IntArrayRef in = sizes_of(inputs, 0), w = sizes_of(inputs, 1);
  if (in.size() != 4 || w.size() != 4) return 0;
  int64_t groups = inputs.size() > 6 && inputs[6].isInt() ? inputs[6].toInt() : 1;
  bool same_padding = inputs.size() > 4 && inputs[4].isString() && inputs[4].toStringRef() == "same";
  int64_t out[2];
  for (size_t d = 0; d < 2; ++d) {
    int64_t stride = list_arg(inputs, 3, d, 1), pad = list_arg(inputs, 4, d, 0);
    int64_t dilation = list_arg(inputs, 5, d, 1), k = w[2 + d];
    if (stride <= 0) return 0;
    out[d] = same_padding ? in[2 + d] : (in[2 + d] + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
    if (out[d] <= 0) return 0;
  }
  if (groups <= 0) return 0;
  return static_cast<uint64_t>(2 * in[0] * out[0] * out[1] * w[2] * w[3] * in[1] * w[0] / groups);
}

// Matrix products: 2 x M x K x N, times the batch for bmm / baddbmm.
uint64_t matmul_flops(c10::IntArrayRef a, c10::IntArrayRef b, size_t rank) {
  if (a.size() != rank || b.size() != rank) return 0;
  uint64_t batch = rank == 3 ? static_cast<uint64_t>(a[0]) : 1;
  return 2 * batch * static_cast<uint64_t>(a[rank - 2] * a[rank - 1] * b[rank - 1]);
}

uint64_t operator_flops(FlopsOp op, c10::ArrayRef<const c10::IValue> inputs) {
  switch (op) {
    case FlopsOp::kNone: return 0;
    case FlopsOp::kConv2d: return conv2d_flops(inputs);
    case FlopsOp::kMm: return matmul_flops(sizes_of(inputs, 0), sizes_of(inputs, 1), 2);
    case FlopsOp::kAddmm: return matmul_flops(sizes_of(inputs, 1), sizes_of(inputs, 2), 2);
    case FlopsOp::kBmm: return matmul_flops(sizes_of(inputs, 0), sizes_of(inputs, 1), 3);
    case FlopsOp::kBaddbmm: return matmul_flops(sizes_of(inputs, 1), sizes_of(inputs, 2), 3);
    case FlopsOp::kElementwise: {
      // One operation per element of the first input (what torch counts).
      if (inputs.empty() || !has_shape(inputs[0])) return 0;
      return static_cast<uint64_t>(inputs[0].toTensor().numel());
    }
  }
  return 0;
}

// ---- Native call stacks (with_stack) ----

// The calling thread's frames, innermost first, as "module+0xoffset;..."
// (offsets from the module's load address: the analysis symbolizes them from
// the module file, wherever the process had mapped it).
[[gnu::noinline]] void capture_stack(ThreadOps& t) {
  void* frames[kMaxFrames];
  int n = backtrace(frames, kMaxFrames);
  uint64_t h = mix(0, static_cast<uint64_t>(n));
  for (int i = 0; i < n; ++i) h = mix(h, reinterpret_cast<uintptr_t>(frames[i]));
  const char* text = t.stacks.find(h);
  if (text == nullptr) {
    text = detail::intern(format_native_frames(frames, n));
    t.stacks.insert(h, text);
  }
  t.top_stack = Stack{h, text};
}

// The host context of an outermost operator: the front end's call stack
// (Python frames) when it provides one, else the native stack; and the
// front end's module hierarchy.
[[gnu::noinline]] void capture_context(ThreadOps& t) {
  if (g_with_stack.load(std::memory_order_relaxed)) {
    if (detail::ContextProvider stack = detail::stack_provider()) {
      const char* text = stack();  // interned: the pointer identifies the stack
      t.top_stack = Stack{text == nullptr ? 0 : mix(1, reinterpret_cast<uintptr_t>(text)), text};
    } else {
      capture_stack(t);
    }
  }
  if (g_with_modules.load(std::memory_order_relaxed)) {
    detail::ContextProvider module = detail::module_provider();
    t.top_module = module != nullptr ? module() : nullptr;
  }
}

// Identical input signatures (same dtypes, sizes, FLOPs, call stack and
// module hierarchy) share one interned string; the 64-bit hash stands for
// the signature in the per-thread cache. Fields (raw/format.h): dims, types
// (both empty when LibTorch gave no inputs: only a stack or module asked for
// the event), FLOPs, call stack, module hierarchy; trailing empty ones left out.
[[gnu::noinline]] const char* interned_inputs(ThreadOps& t, const at::RecordFunction& fn) {
  bool has_inputs = g_has_inputs.load(std::memory_order_relaxed);
  c10::ArrayRef<const c10::IValue> inputs = has_inputs ? fn.inputs() : c10::ArrayRef<const c10::IValue>();
  uint64_t flops =
      g_with_flops.load(std::memory_order_relaxed) ? operator_flops(flops_op(fn.name()), inputs) : 0;
  bool stack = g_with_stack.load(std::memory_order_relaxed) && t.top_stack.text != nullptr;
  const char* module = g_with_modules.load(std::memory_order_relaxed) ? t.top_module : nullptr;
  if (!has_inputs && !stack && module == nullptr) return nullptr;  // nothing to say
  // The optional parts are mixed in only when present (each mix is a
  // multiplication on the critical path of every operator).
  uint64_t h = has_inputs ? hash_inputs(inputs) : 0;
  if (flops > 0) h = mix(h, flops);
  if (stack) h = mix(h ^ 1, t.top_stack.hash);
  if (module != nullptr) h = mix(h ^ 2, reinterpret_cast<uintptr_t>(module));
  if (const char* known = t.inputs.find(h)) return known;
  std::string text = has_inputs ? format_inputs(inputs) : std::string(1, raw::kInputsSeparator);
  if (flops > 0 || stack || module != nullptr) {
    text += raw::kInputsSeparator + (flops > 0 ? std::to_string(flops) : std::string());
  }
  if (stack || module != nullptr) text += raw::kInputsSeparator + std::string(stack ? t.top_stack.text : "");
  if (module != nullptr) text += raw::kInputsSeparator + std::string(module);
  const char* interned = detail::intern(text);
  t.inputs.insert(h, interned);
  return interned;
}

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction& fn) {
  if (!detail::host_recording()) return nullptr;
  try {
    ThreadOps& t = thread_ops();
    if (t.depth == kMaxDepth) {
      g_too_deep.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    if (t.depth == 0) {
      // Outermost operators only: the guards that swap a thread's debug
      // info (autograd engine tasks, at::launch, parallel regions) do so
      // between operators, so a nested operator sees its parent's.
      if (g_profile_memory.load(std::memory_order_relaxed)) install_memory_reporter();
      if (g_with_context.load(std::memory_order_relaxed)) capture_context(t);
    }
    const char* inputs = g_record_inputs.load(std::memory_order_relaxed) &&
                                 (fn.needsInputs() || !g_has_inputs.load(std::memory_order_relaxed))
                             ? interned_inputs(t, fn)
                             : nullptr;
    // Last, so that formatting the inputs is not charged to the operator.
    uint64_t start_ticks = detail::now_ticks();
    if (g_comm.load(std::memory_order_relaxed)) [[unlikely]] {
      const NameSlot& slot = operator_slot(t, fn);
      if (slot.comm != CommRole::kNone) comm_started(slot.comm, slot.interned, fn, start_ticks);
    }
    t.open[t.depth++] = OpenOp{&fn, start_ticks, inputs};
  } catch (...) {
    // An input LibTorch cannot describe: the operator is not recorded.
  }
  return nullptr;
}

// torch.distributed (torch_comm.h): true when `fn` was written as a COMM
// event. Before the open stack: a worker record may end on another thread.
[[gnu::noinline]] bool comm_operator_ended(const at::RecordFunction& fn, uint64_t end_ticks) noexcept {
  try {
    const NameSlot& slot = operator_slot(thread_ops(), fn);
    return slot.comm != CommRole::kNone && comm_ended(slot.comm, fn, end_ticks);
  } catch (...) {
    return false;
  }
}

void on_operator_end(const at::RecordFunction& fn, at::ObserverContext*) {
  uint64_t end_ticks = detail::now_ticks();
  if (g_comm.load(std::memory_order_relaxed) && comm_operator_ended(fn, end_ticks)) [[unlikely]] {
    return;  // a worker's "gloo:" record, written as the communication it is
  }
  ThreadOps* t = t_ops;
  if (t == nullptr || t->depth == 0) return;
  // Normally the top entry; one whose end never came (an async op ended on
  // another thread) is dropped with it.
  size_t i = t->depth;
  while (i > 0 && t->open[i - 1].fn != &fn) --i;
  if (i == 0) return;  // started before recording, or not recorded
  OpenOp op = t->open[i - 1];
  t->depth = i - 1;
  if (!detail::host_recording()) return;
  uint8_t flags = 0;
  bool backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
  if (backward) flags |= raw::kOperatorBackward;
  if (fn.scope() == at::RecordScope::USER_SCOPE) flags |= raw::kOperatorUser;
  int64_t seq = fn.seqNr();
  const char* name = operator_slot(*t, fn).interned;
  // LibTorch's thread id: of the forward op for an autograd node, else the
  // op's own; (thread, sequence number) links the two.
  detail::record_event_fields(op.start_ticks, end_ticks, name,
                              static_cast<uint8_t>(raw::EventKind::kOperator), flags,
                              static_cast<uint16_t>(backward ? fn.forwardThreadId() : fn.threadId()),
                              seq < 0 ? detail::kNoSequenceNumber : static_cast<uint32_t>(seq));
  if (op.inputs != nullptr) {
    detail::record_event_fields(op.start_ticks, 0, op.inputs,
                                static_cast<uint8_t>(raw::EventKind::kOperatorInputs), 0, 0, 0);
  }
}

// sync_enable: an outermost operator ends when the GPU has finished what was
// queued so far, so its duration covers its device work (MindSpore's
// synchronous way). One cuCtxSynchronize per outermost operator, taken
// before the end timestamp; a separate callback, so that operators pay
// nothing for the option when it is off.
void on_operator_end_synchronized(const at::RecordFunction& fn, at::ObserverContext* context) {
  ThreadOps* t = t_ops;
  if (t != nullptr && t->depth == 1 && t->open[0].fn == &fn) detail::synchronize_gpu();
  on_operator_end(fn, context);
}

// One registered callback per (inputs, scopes) variant, enabled while a
// session records. LibTorch fixes both at registration.
class TorchCollector final : public detail::Collector {
 public:
  std::string_view name() const override { return "torch"; }

  void start(const ProfilerOptions& options) noexcept override {
    if (options.activities.count(Activity::CPU) == 0) return;
    if (options.profile_memory) start_memory();
    if (options.profiler_level == ProfilerLevel::None) return;
    // FLOPs need the inputs; FLOPs, call stacks and module hierarchies
    // travel in the OPERATOR_INPUTS event (a stack or a module alone does not
    // ask LibTorch to box every operator's arguments).
    // torch.distributed calls are described by their inputs (tensors and
    // process group): communication is recorded wherever LibTorch hands
    // them over, from Level1 as in MindSpore, or when asked for at Level0.
    bool inputs = options.record_shapes || options.with_flops || options.profile_communication ||
                  options.profiler_level >= ProfilerLevel::Level1;
    bool context = options.with_stack || options.with_modules;
    bool all_scopes = options.profiler_level >= ProfilerLevel::Level2;
    bool synchronized = options.sync_enable && detail::gpu_sync_available();
    static std::atomic<bool> said{false};
    if (options.sync_enable && !synchronized && !said.exchange(true)) {
      detail::log_warning(
          "sync_enable: the CUDA driver is not in this process (no CUDA call yet, or no GPU): operators are "
          "timed without waiting for the GPU");
    }
    try {
      at::RecordFunctionCallback cb(&on_operator_start,
                                    synchronized ? &on_operator_end_synchronized : &on_operator_end);
      cb.needsInputs(inputs);
      if (!all_scopes) {
        cb.scopes(
            {at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
      }
      at::CallbackHandle h = at::addGlobalCallback(cb);
      g_record_inputs.store(inputs || context, std::memory_order_relaxed);
      g_has_inputs.store(inputs, std::memory_order_relaxed);
      g_with_modules.store(options.with_modules, std::memory_order_relaxed);
      g_with_context.store(context, std::memory_order_relaxed);
      g_with_flops.store(options.with_flops, std::memory_order_relaxed);
      g_with_stack.store(options.with_stack, std::memory_order_relaxed);
      comm_session_started();
      g_comm.store(inputs && comm_supported(), std::memory_order_relaxed);
      active_ = h;
    } catch (const std::exception& e) {
      detail::log_error(std::string("LibTorch collector: cannot register operator callbacks: ") + e.what());
    }
  }

  // At exit, while LibTorch is still whole: every callback off; the session
  // that closes later (its own exit handler) then finds nothing to stop here.
  void shut_down_at_exit() noexcept {
    g_profile_memory.store(false, std::memory_order_relaxed);
    remove_active_callback();
    g_exiting.store(true);
  }

  // Every callback is removed here: none runs between sessions.
  void stop() noexcept override {
    if (g_exiting.load()) return;  // shut_down_at_exit() did all that may be done
    stop_memory();
    remove_active_callback();
    g_comm.store(false, std::memory_order_relaxed);
    if (uint64_t unclaimed = comm_session_stopped(); unclaimed > 0) {
      detail::log_warning(
          "LibTorch collector: " + std::to_string(unclaimed) +
          " torch.distributed call(s) queued for the Gloo backend never started running while "
          "recording: not written as communication");
    }
    if (uint64_t deep = g_too_deep.exchange(0); deep > 0) {
      detail::log_warning("LibTorch collector: " + std::to_string(deep) + " operator(s) nested deeper than " +
                          std::to_string(kMaxDepth) + " were not recorded");
    }
  }

 private:
  static void start_memory() noexcept {
    g_memory_shadowed.store(false, std::memory_order_relaxed);
    g_profile_memory.store(true, std::memory_order_relaxed);
    try {
      install_memory_reporter();  // this thread; others as they run operators
    } catch (const std::exception& e) {
      detail::log_error(std::string("LibTorch collector: cannot install the memory reporter: ") + e.what());
    }
  }

  static void stop_memory() noexcept {
    if (!g_profile_memory.exchange(false, std::memory_order_relaxed)) return;
    remove_memory_reporter();  // this thread's; the others' at their next allocation
    if (g_memory_shadowed.load(std::memory_order_relaxed)) {
      detail::log_warning(
          "LibTorch collector: LibTorch's own profiler was recording on some threads; their memory reports "
          "went "
          "to it, not to trainprof");
    }
  }

  void remove_active_callback() noexcept {
    if (active_ == at::INVALID_CALLBACK_HANDLE) return;
    try {
      at::removeCallback(active_);
    } catch (...) {
    }
    active_ = at::INVALID_CALLBACK_HANDLE;
  }

  at::CallbackHandle active_ = at::INVALID_CALLBACK_HANDLE;
};

TorchCollector* g_collector = nullptr;  // lives as long as the process

void shut_down_at_exit() {
  g_collector->shut_down_at_exit();
}

__attribute__((constructor)) void register_torch_collector() {
  g_collector = new TorchCollector();
  detail::register_collector(g_collector);
  // Registered here, so it runs when this library is finalized: before
  // LibTorch's (which this library uses) and before libtrainprof's, whose
  // exit handler closes a session still open.
  std::atexit(shut_down_at_exit);
}

// See trainprof_torch_yield_profiler_state.
int yield_profiler_state() noexcept {
  if (t_thread_exiting || !t_reporter.installed) return 0;
  if (!pop_memory_reporter()) return 0;
  t_reporter.installed = false;
  // Until LibTorch's profiler stops, its state sits where the reporter was:
  // install_memory_reporter() sees it and this thread's reports go to it
  // (said once at stop); after it, the next outermost operator puts the
  // reporter back.
  if (g_profile_memory.load(std::memory_order_relaxed))
    g_memory_shadowed.store(true, std::memory_order_relaxed);
  return 1;
}

}  // namespace
}  // namespace trainprof::torch_collector

// For the Python package, right before torch's own profiler starts on the
// calling thread: LibTorch refuses to start its profiler ("Profiler is
// already enabled on this thread") where PROFILER_STATE holds anything, our
// memory reporter included. Takes this thread's reporter out; returns 1 when
// it was there. Never throws.
extern "C" __attribute__((visibility("default"))) int trainprof_torch_yield_profiler_state() noexcept {
  return trainprof::torch_collector::yield_profiler_state();
}

// For bench/python_overhead.py (through ctypes): LibTorch's floor measured in
// the same process as the profilers it is compared with. mode 0 removes the
// callback; 1 adds a global RecordFunction callback that does nothing, with
// the scopes the collector uses; 2 the same asking for the inputs (the floor
// of record_shapes); 3 as 2 plus a memory reporter that drops every report in
// the calling thread's debug info (the floor of record_shapes +
// profile_memory: c10's allocator then tracks and reports every block); 4 as
// 3 reading the clock at each operator's start and end and at each memory
// report (what any profiler that timestamps them pays on top of 3).
// Returns 1 on success, 0 otherwise. Not for production use.
namespace {
at::CallbackHandle g_bench_callback = at::INVALID_CALLBACK_HANDLE;

std::unique_ptr<at::ObserverContext> bench_noop_start(const at::RecordFunction&) {
  return nullptr;
}
void bench_noop_end(const at::RecordFunction&, at::ObserverContext*) {}

// Mode 4's sink: the clock reads must happen, and their values go nowhere.
[[gnu::tls_model("initial-exec")]] thread_local uint64_t t_bench_ticks = 0;
std::unique_ptr<at::ObserverContext> bench_clock_start(const at::RecordFunction&) {
  t_bench_ticks += trainprof::detail::now_ticks();
  return nullptr;
}
void bench_clock_end(const at::RecordFunction&, at::ObserverContext*) {
  t_bench_ticks += trainprof::detail::now_ticks();
}

class BenchNoopMemoryReporter final : public torch::profiler::impl::ProfilerStateBase {
 public:
  explicit BenchNoopMemoryReporter(bool read_clock)
      : ProfilerStateBase(
            torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)),
        read_clock_(read_clock) {}
  void reportMemoryUsage(void*, int64_t, trainprof::torch_collector::MemoryTotal,
                         trainprof::torch_collector::MemoryTotal, c10::Device) override {
    if (read_clock_) t_bench_ticks += trainprof::detail::now_ticks();
  }
  bool memoryProfilingEnabled() const override { return true; }
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }

 private:
  bool read_clock_;
};

// The reporter mode 3 pushed, popped by the next call (from the same thread).
std::shared_ptr<BenchNoopMemoryReporter> g_bench_reporter;

void pop_bench_reporter() {
  if (g_bench_reporter == nullptr) return;
  if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get() == g_bench_reporter.get())
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  g_bench_reporter.reset();
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int trainprof_torch_bench_bare_callback(int mode) noexcept {
  try {
    if (g_bench_callback != at::INVALID_CALLBACK_HANDLE) {
      at::removeCallback(g_bench_callback);
      g_bench_callback = at::INVALID_CALLBACK_HANDLE;
    }
    pop_bench_reporter();
    if (mode == 0) return 1;
    if (mode >= 3) {
      g_bench_reporter = std::make_shared<BenchNoopMemoryReporter>(mode == 4);
      c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, g_bench_reporter);
    }
    at::RecordFunctionCallback cb(mode == 4 ? &bench_clock_start : &bench_noop_start,
                                  mode == 4 ? &bench_clock_end : &bench_noop_end);
    cb.needsInputs(mode >= 2);
    cb.scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
    g_bench_callback = at::addGlobalCallback(cb);
    return 1;
  } catch (...) {
    return 0;
  }
}
