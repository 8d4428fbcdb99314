// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The LibTorch collector: every ATen operator and autograd node, through
// LibTorch's global RecordFunction callbacks.
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
// Split by concern: memory_reporter (profile_memory), flops (with_flops),
// native_stack (with_stack), torch_comm (torch.distributed).
#include <ATen/record_function.h>

#include <execinfo.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/run_directory.h"
#include "collectors/torch/flops.h"
#include "collectors/torch/memory_reporter.h"
#include "collectors/torch/native_stack.h"
#include "collectors/torch/torch_comm.h"
#include "core/collector.h"
#include "core/event.h"
#include "core/gpu_sync.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof::torch {
namespace {

using core::Event;

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
// Set by the exit handler (shut_down_at_exit): the session that closes later
// finds nothing to stop here.
std::atomic<bool> g_exiting{false};

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

}  // namespace

const char* innermost_operator() noexcept {
  ThreadOps* t = t_ops;
  if (t == nullptr || t->depth == 0) return nullptr;
  try {
    return operator_slot(*t, *t->open[t->depth - 1].fn).interned;
  } catch (...) {
    return nullptr;
  }
}

namespace {

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

// ---- FLOPs (with_flops): the formulas are in flops.h ----

c10::IntArrayRef sizes_of(c10::ArrayRef<const c10::IValue> inputs, size_t i) {
  return i < inputs.size() && has_shape(inputs[i]) ? inputs[i].toTensor().sizes() : c10::IntArrayRef();
}

std::span<const int64_t> span_of(c10::IntArrayRef sizes) {
  return {sizes.data(), sizes.size()};
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

// aten::conv2d(input, weight, bias, stride, padding, dilation, groups).
uint64_t conv2d_flops(c10::ArrayRef<const c10::IValue> inputs) {
  Conv2dShape conv;
  conv.input = span_of(sizes_of(inputs, 0));
  conv.weight = span_of(sizes_of(inputs, 1));
  for (size_t d = 0; d < 2; ++d) {
    conv.stride[d] = list_arg(inputs, 3, d, 1);
    conv.padding[d] = list_arg(inputs, 4, d, 0);
    conv.dilation[d] = list_arg(inputs, 5, d, 1);
  }
  conv.groups = inputs.size() > 6 && inputs[6].isInt() ? inputs[6].toInt() : 1;
  conv.same_padding = inputs.size() > 4 && inputs[4].isString() && inputs[4].toStringRef() == "same";
  return conv2d_flops(conv);
}

uint64_t operator_flops(FlopsOp op, c10::ArrayRef<const c10::IValue> inputs) {
  auto sizes = [&](size_t i) { return span_of(sizes_of(inputs, i)); };
  switch (op) {
    case FlopsOp::kNone: return 0;
    case FlopsOp::kConv2d: return conv2d_flops(inputs);
    case FlopsOp::kMm: return matmul_flops(sizes(0), sizes(1), 2);
    case FlopsOp::kAddmm: return matmul_flops(sizes(1), sizes(2), 2);
    case FlopsOp::kBmm: return matmul_flops(sizes(0), sizes(1), 3);
    case FlopsOp::kBaddbmm: return matmul_flops(sizes(1), sizes(2), 3);
    case FlopsOp::kElementwise:
      // Of the first input only (what torch counts).
      return inputs.empty() || !has_shape(inputs[0]) ? 0 : elementwise_flops(sizes(0));
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
    if (detail::ContextProvider stack = core::stack_provider()) {
      const char* text = stack();  // interned: the pointer identifies the stack
      t.top_stack = Stack{text == nullptr ? 0 : mix(1, reinterpret_cast<uintptr_t>(text)), text};
    } else {
      capture_stack(t);
    }
  }
  if (g_with_modules.load(std::memory_order_relaxed)) {
    detail::ContextProvider module = core::module_provider();
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
  uint64_t flops = g_with_flops.load(std::memory_order_relaxed)
                       ? operator_flops(fn.name() == nullptr ? FlopsOp::kNone : flops_op(fn.name()), inputs)
                       : 0;
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
      if (g_reporter_wanted.load(std::memory_order_relaxed)) install_memory_reporter();
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
  core::record_event_fields(op.start_ticks, end_ticks, name, static_cast<uint8_t>(raw::EventKind::kOperator),
                            flags, static_cast<uint16_t>(backward ? fn.forwardThreadId() : fn.threadId()),
                            seq < 0 ? core::kNoSequenceNumber : static_cast<uint32_t>(seq));
  if (op.inputs != nullptr) {
    core::record_event_fields(op.start_ticks, 0, op.inputs,
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
  if (t != nullptr && t->depth == 1 && t->open[0].fn == &fn) core::synchronize_gpu();
  on_operator_end(fn, context);
}

// One registered callback per (inputs, scopes) variant, enabled while a
// session records. LibTorch fixes both at registration.
class TorchCollector final : public core::Collector {
 public:
  std::string_view name() const override { return "torch"; }

  void start(const ProfilerOptions& options) noexcept override {
    if (options.activities.count(Activity::CPU) == 0) return;
    // The reporter also stands for "a profiler is on" where LibTorch asks
    // (memory_reporter.h): with operators recorded, even without memory.
    if (options.profile_memory || options.profiler_level != ProfilerLevel::None)
      start_memory_reports(options.profile_memory);
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
    bool synchronized = options.sync_enable && core::gpu_sync_available();
    static std::atomic<bool> said{false};
    if (options.sync_enable && !synchronized && !said.exchange(true)) {
      base::log_warning(
          "sync_enable: the CUDA driver is not in this process (no CUDA call yet, or no GPU): operators are "
          "timed without waiting for the GPU");
    }
    try {
      at::RecordFunctionCallback cb(&on_operator_start,
                                    synchronized ? &on_operator_end_synchronized : &on_operator_end);
      cb.needsInputs(inputs);
      // LibTorch draws which calls run the callbacks (a per-thread countdown
      // for low probabilities): a call not drawn costs nearly nothing.
      if (options.sample_operators > 1) {
        cb.samplingProb(1.0 / options.sample_operators);
        if (inputs && comm_supported() &&
            (options.profile_communication || base::detect_rank().world_size > 1)) {
          base::log_warning("sample_operators " + std::to_string(options.sample_operators) +
                            ": torch.distributed's calls come through the operator callbacks and are sampled "
                            "with them (collectives matched across ranks, stuck collectives); leave "
                            "sample_operators at 1 to record every one");
        }
      }
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
      base::log_error(std::string("LibTorch collector: cannot register operator callbacks: ") + e.what());
    }
  }

  // At exit, while LibTorch is still whole: every callback off; the session
  // that closes later (its own exit handler) then finds nothing to stop here.
  void shut_down_at_exit() noexcept {
    stop_memory_reports_at_exit();
    remove_active_callback();
    g_exiting.store(true);
  }

  // Every callback is removed here: none runs between sessions.
  void stop() noexcept override {
    if (g_exiting.load()) return;  // shut_down_at_exit() did all that may be done
    stop_memory_reports();
    remove_active_callback();
    g_comm.store(false, std::memory_order_relaxed);
    if (uint64_t unclaimed = comm_session_stopped(); unclaimed > 0) {
      base::log_warning("LibTorch collector: " + std::to_string(unclaimed) +
                        " torch.distributed call(s) queued for the Gloo backend never started running while "
                        "recording: not written as communication");
    }
    if (uint64_t deep = g_too_deep.exchange(0); deep > 0) {
      base::log_warning("LibTorch collector: " + std::to_string(deep) + " operator(s) nested deeper than " +
                        std::to_string(kMaxDepth) + " were not recorded");
    }
  }

 private:
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
  core::register_collector(g_collector);
  core::register_open_operator(innermost_operator);
  // Registered here, so it runs when this library is finalized: before
  // LibTorch's (which this library uses) and before libtrainprof's, whose
  // exit handler closes a session still open.
  std::atexit(shut_down_at_exit);
}

}  // namespace
}  // namespace trainprof::torch
