// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/advisor.h"

#include <algorithm>

#include "base/string_format.h"

namespace trainprof::analysis {
namespace {

using base::format;

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

double percent(double part, double whole) {
  return whole > 0 ? 100.0 * part / whole : 0;
}

// The run's time per counted step, ms.
double per_step(const AdviceFacts& f, double total_ms) {
  return f.steps > 0 ? total_ms / static_cast<double>(f.steps) : 0;
}

Finding finding(const AdviceFacts& f, const char* rule, std::string title) {
  Finding out;
  out.rule = rule;
  out.title = std::move(title);
  out.step_ms = f.median_step_ms;
  return out;
}

// The saving bounded by the time the problem takes over the run
// (`bound_ms`), per step.
void set_bound(const AdviceFacts& f, double bound_ms, const char* bound, Finding* x) {
  x->saving_ms = per_step(f, bound_ms);
  x->saving_basis = std::string("at most: ") + bound;
}

// The saving re-timed when the what-if estimated the median step without
// the problem (`estimated_step_ms` >= 0), else bounded.
void set_saving(const AdviceFacts& f, double estimated_step_ms, const char* retimed, double bound_ms,
                const char* bound, Finding* x) {
  if (estimated_step_ms < 0) return set_bound(f, bound_ms, bound, x);
  x->saving_ms = std::max(0.0, f.median_step_ms - estimated_step_ms);
  x->saving_basis = std::string("re-timed: ") + retimed;
}

void data_wait(const AdviceFacts& f, std::vector<Finding>* out) {
  if (f.total_step_ms <= 0 || f.data_wait_ms < kDataWaitShare * f.total_step_ms) return;
  Finding x = finding(f, "data_wait", "the training loop waits for data");
  x.evidence = format("%.3f ms of data wait per step (%.1f %% of the step time) in %lld of %lld steps",
                      per_step(f, f.data_wait_ms), percent(f.data_wait_ms, f.total_step_ms),
                      static_cast<long long>(f.data_wait_steps), static_cast<long long>(f.steps));
  if (!f.slowest_data_stage.empty()) x.evidence += "; the longest stage: " + f.slowest_data_stage;
  x.change =
      "feed the loop faster: more DataLoader workers (num_workers), pin_memory=True, a larger "
      "prefetch_factor, persistent_workers=True; or make the longest stage cheaper";
  set_saving(f, f.hide_data_wait_step_ms, "the steps with their data wait hidden", f.data_wait_ms,
             "the data wait per step", &x);
  out->push_back(x);
}

void device_idle(const AdviceFacts& f, std::vector<Finding>* out) {
  double idle = f.device_idle_ms + f.preparing_ms;
  if (!f.device_time || f.total_step_ms <= 0 || idle < kDeviceIdleShare * f.total_step_ms) return;
  Finding x = finding(f, "device_idle", "the GPU idles while the host prepares its work");
  x.evidence = format(
      "the GPU is idle %.3f ms per step outside data waits (%.1f %% of the step time), %.3f ms of "
      "it before the step's first kernel",
      per_step(f, idle), percent(idle, f.total_step_ms), per_step(f, f.preparing_ms));
  x.change =
      "launch the work faster than the GPU runs it: CUDA graphs or torch.compile "
      "(mode=\"reduce-overhead\"), larger batches, less Python between launches";
  set_bound(f, idle, "the GPU's idle time per step", &x);
  out->push_back(x);
}

bool is_sync_call(const std::string& name) {
  for (const char* s : {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"}) {
    if (starts_with(name, s)) return true;
  }
  return false;
}

// Host operators that wait for the device to hand a value to Python.
bool is_syncing_op(const std::string& name) {
  return name == "aten::item" || name == "aten::_local_scalar_dense" || name == "aten::nonzero" ||
         name == "aten::cpu";
}

void syncs(const AdviceFacts& f, std::vector<Finding>* out) {
  if (!f.device_time || f.total_step_ms <= 0) return;
  uint64_t calls = 0, ns = 0;
  std::string names;
  for (const NameFacts& g : f.gpu) {
    if (!is_sync_call(g.name)) continue;
    calls += g.calls;
    ns += g.total_ns;
    names += format("%s%s: %llu calls, %.3f ms", names.empty() ? "" : "; ", g.name.c_str(),
                    static_cast<unsigned long long>(g.calls), g.total_ns / 1e6);
  }
  double ms = ns / 1e6;
  if (calls == 0 || ms < kSyncShare * f.total_step_ms) return;
  std::string ops;
  for (const NameFacts& h : f.host) {
    if (!h.is_op || !is_syncing_op(h.name)) continue;
    ops += format("%s%s %.1f per step", ops.empty() ? "" : ", ", h.name.c_str(),
                  static_cast<double>(h.calls) / static_cast<double>(std::max<int64_t>(f.steps, 1)));
  }
  Finding x = finding(f, "sync_in_step", "the host waits for the GPU inside the step");
  x.evidence = format("%.1f synchronizations per step block the host %.3f ms (%.1f %% of the step time): ",
                      static_cast<double>(calls) / static_cast<double>(std::max<int64_t>(f.steps, 1)),
                      per_step(f, ms), percent(ms, f.total_step_ms)) +
               names;
  if (!ops.empty()) x.evidence += "; from operators that hand a value to the host: " + ops;
  x.change =
      "keep values on the device inside the step: no .item(), .cpu(), .tolist() or printing of "
      "tensors per step (accumulate on the GPU, read every N steps), no explicit "
      "torch.cuda.synchronize()";
  set_bound(f, ms, "the time the host was blocked per step", &x);
  out->push_back(x);
}

bool is_fused_op(const std::string& name) {
  return name.find("_foreach_") != std::string::npos || name.find("_fused_") != std::string::npos;
}

// torch.optim's optimizers with a fused kernel (fused=True): on CUDA, and
// on the CPU since torch 2.4 for these.
bool has_fused(const std::string& optimizer) {
  return optimizer == "Adam" || optimizer == "AdamW" || optimizer == "SGD" || optimizer == "Adagrad";
}

std::string optimizer_change(const AdviceFacts& f, const std::string& optimizer) {
  std::string change = "torch.optim." + optimizer + "(..., foreach=True)";
  if (has_fused(optimizer))
    change += f.device_time ? ", or fused=True (one kernel for all parameters on the GPU)"
                            : ", or fused=True (torch 2.4 or later has CPU kernels for it)";
  return change + ": a few multi-tensor operators per update instead of several per parameter" +
         (f.device_time ? "" : " (on the CPU torch's default is the per-parameter loop)");
}

uint64_t fused_calls(const AdviceFacts& f) {
  uint64_t calls = 0;
  for (const NameFacts& h : f.host)
    if (h.is_op && is_fused_op(h.name)) calls += h.calls;
  return calls;
}

// An optimizer's range ("Optimizer.step#Adam.step", as torch.optim records
// every step) that updates parameter by parameter: many child operators per
// call and no multi-tensor operator in the run.
bool is_per_parameter_optimizer(const NameFacts& h, uint64_t fused) {
  if (!starts_with(h.name, "Optimizer.step#") || h.calls == 0) return false;
  return static_cast<double>(h.child_calls) / static_cast<double>(h.calls) >= kOptimizerOpsPerStep &&
         fused < h.calls;
}

void unfused_optimizer(const AdviceFacts& f, std::vector<Finding>* out) {
  if (f.steps <= 0 || f.median_step_ms <= 0) return;
  uint64_t fused = fused_calls(f);
  for (const NameFacts& h : f.host) {
    if (!is_per_parameter_optimizer(h, fused)) continue;  // children: 40 or more a call
    double calls = static_cast<double>(h.calls);
    double children = static_cast<double>(h.child_calls) / calls;
    // Short child operators: the update's cost is per tensor (dispatch, the
    // Python loop), which a multi-tensor step saves. Long ones: the
    // arithmetic dominates, and whether a multi-tensor step is faster
    // depends on the optimizer's temporaries (measured from 2 % faster to
    // 2.6 times slower on large tensors): nothing to promise.
    double child_us = static_cast<double>(h.total_ns - std::min(h.self_ns, h.total_ns)) / 1e3 /
                      static_cast<double>(h.child_calls);
    if (child_us >= kTinyOpUs) continue;
    double per_call_ms = h.total_ns / 1e6 / calls;
    double saving = per_step(f, h.total_ns / 1e6) * kMultiTensorSaving;
    if (saving < kOptimizerSavingShare * f.median_step_ms) continue;
    std::string optimizer = h.name.substr(h.name.find('#') + 1);
    optimizer = optimizer.substr(0, optimizer.find('.'));
    Finding x = finding(f, "unfused_optimizer", "the optimizer runs per parameter (" + optimizer + ")");
    x.evidence = format(
        "%s: %.0f operators per call averaging %.1f us each (a cost per tensor, not arithmetic), "
        "%.3f ms per call, no _foreach_ or _fused_ operator",
        h.name.c_str(), children, child_us, per_call_ms);
    x.change = optimizer_change(f, optimizer);
    x.saving_ms = saving;
    x.saving_basis =
        "at most: a third of the optimizer's time per step (what a multi-tensor step saved on "
        "per-parameter updates of small tensors, docs/ADVICE.md)";
    out->push_back(x);
  }
}

void tiny_operators(const AdviceFacts& f, std::vector<Finding>* out) {
  if (f.steps <= 0 || f.total_step_ms <= 0) return;
  uint64_t calls = 0, ns = 0;
  for (const NameFacts& h : f.host) {
    // Short on average: each call pays the framework's dispatch. Their self
    // time, so that nested ones are not counted twice.
    if (!h.is_op || h.calls == 0) continue;
    if (h.total_ns / 1e3 / static_cast<double>(h.calls) >= kTinyOpUs) continue;
    // An optimizer's operators are its step's, which unfused_optimizer
    // names when it runs per parameter: the same time is not named twice.
    calls += h.calls - std::min(h.calls, h.optimizer_calls);
    ns += h.self_ns - std::min(h.self_ns, h.optimizer_self_ns);
  }
  double per = static_cast<double>(calls) / static_cast<double>(f.steps), ms = ns / 1e6;
  if (per < kTinyOpsPerStep || ms < kTinyOpsShare * f.total_step_ms) return;
  Finding x = finding(f, "tiny_operators", "thousands of tiny operators per step");
  x.evidence = format(
      "%.0f operator calls per step average under %.0f us each, %.3f ms per step (%.1f %% of the "
      "step time)",
      per, kTinyOpUs, per_step(f, ms), percent(ms, f.total_step_ms));
  x.change =
      "fuse them: torch.compile the model (or the loop's hot function), CUDA graphs on a GPU, or "
      "batch the work into fewer, larger tensor operations";
  set_bound(f, ms, "those operators' time per step", &x);
  out->push_back(x);
}

void exposed_communication(const AdviceFacts& f, std::vector<Finding>* out) {
  if (f.total_step_ms <= 0 || f.exposed_comm_ms < kExposedCommShare * f.total_step_ms) return;
  Finding x = finding(f, "exposed_communication", "communication is not overlapped with computation");
  x.evidence = format("%.3f ms per step of communication that nothing overlaps (%.1f %% of the step time)",
                      per_step(f, f.exposed_comm_ms), percent(f.exposed_comm_ms, f.total_step_ms));
  x.change =
      "overlap it: DDP's gradient buckets (bucket_cap_mb smaller so the first starts earlier), "
      "nonblocking collectives started before the work that does not need them, fewer and larger "
      "messages";
  set_saving(f, f.overlap_comm_step_ms, "the steps with their communication overlapped", f.exposed_comm_ms,
             "the exposed communication per step", &x);
  out->push_back(x);
}

// A peak at kMemoryLimitShare of its limit or more; `limit_name` says what the limit is.
void memory_near_limit(const AdviceFacts& f, uint64_t peak, uint64_t limit, const std::string& what,
                       const std::string& limit_name, std::vector<Finding>* out) {
  if (limit == 0 || static_cast<double>(peak) < kMemoryLimitShare * static_cast<double>(limit)) return;
  Finding x = finding(f, "memory_near_limit", what + " memory is near its limit");
  x.evidence = format("peak %.1f MB, %.1f %% of the %.1f MB of the ", peak / 1048576.0,
                      percent(static_cast<double>(peak), static_cast<double>(limit)), limit / 1048576.0) +
               limit_name;
  x.change =
      "make room before it runs out: a smaller batch with gradient accumulation, activation "
      "checkpointing, mixed precision, or freeing what outlives the step";
  out->push_back(x);  // memory is not step time: no saving
}

void gc_pauses(const AdviceFacts& f, std::vector<Finding>* out) {
  uint64_t calls = 0, ns = 0;
  for (const NameFacts& h : f.host) {
    if (h.is_op || !is_gc_range(h.name)) continue;
    calls += h.calls;
    ns += h.total_ns;
  }
  double ms = ns / 1e6;
  // One or two collections are an event (the first full one after set-up),
  // not collections pausing the steps.
  if (calls < kGcMinCollections || f.total_step_ms <= 0 || ms < kGcShare * f.total_step_ms) return;
  Finding x = finding(f, "gc_pauses", "Python's garbage collector pauses the steps");
  x.evidence = format("%llu collections, %.3f ms per step (%.1f %% of the step time)",
                      static_cast<unsigned long long>(calls), per_step(f, ms), percent(ms, f.total_step_ms));
  x.change =
      "collect less often: gc.freeze() after the model and data are set up, a higher "
      "gc.set_threshold, or gc.disable() in the loop with gc.collect() every N steps; avoid "
      "reference cycles made per step";
  set_bound(f, ms, "the collections' time per step", &x);
  out->push_back(x);
}

// "a (1.2 ms), b (0.4 ms)": up to three of `names`, per step.
std::string name_list(const AdviceFacts& f, const std::vector<const OutsideFacts*>& names, double scale) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 3; ++i)
    text +=
        format("%s%s %.3f ms", i == 0 ? "" : ", ", names[i]->name.c_str(), per_step(f, names[i]->ms * scale));
  return text;
}

// Host time outside operators and ranges, by the functions the stack
// samples found there: a loop pulling batches from a Python iterator (the
// input, as a DataLoader's wait would be), or a function of the program's
// own (logging, metrics, checkpoints, pure-Python work) that holds a
// share of the step.
void outside_operators(const AdviceFacts& f, std::vector<Finding>* out) {
  if (f.outside.empty() || f.total_step_ms <= 0 || f.outside_sampled_ms <= 0) return;
  // Of what the samples found, what was on the steps' critical path (on a
  // GPU-bound step host work hides behind the device).
  double on_path =
      f.host_untracked_path_ms < 0 ? 1.0 : std::min(1.0, f.host_untracked_path_ms / f.outside_sampled_ms);
  std::string sampled =
      format("; Python stacks sampled every %u ms (python_outside_operators.csv)", f.sampling_ms);
  std::vector<const OutsideFacts*> input, work;
  double input_ms = 0;
  for (const OutsideFacts& o : f.outside) {
    (o.input ? input : work).push_back(&o);
    if (o.input) input_ms += o.ms * on_path;
  }
  if (input_ms >= kDataWaitShare * f.total_step_ms) {
    Finding x = finding(f, "data_wait", "the training loop waits for its input (a Python iterator)");
    x.evidence =
        format("%.3f ms per step (%.1f %% of the step time) pulling the next batch outside any DataLoader: ",
               per_step(f, input_ms), percent(input_ms, f.total_step_ms)) +
        name_list(f, input, on_path) + sampled;
    x.change =
        "prefetch the batches: read them through a DataLoader with num_workers > 0 (an IterableDataset "
        "over the iterator), or fill a queue from a background thread; or make " +
        input[0]->name + " cheaper";
    set_bound(f, input_ms, "the time pulling the input per step", &x);
    out->push_back(x);
  }
  if (work.empty() || work[0]->ms * on_path < kOutsideShare * f.total_step_ms) return;
  double ms = work[0]->ms * on_path;
  Finding x = finding(f, "host_outside_operators", "host work outside operators: " + work[0]->name);
  x.evidence = format("%.1f %% of the step time outside every operator and range, per step: ",
                      percent(ms, f.total_step_ms)) +
               name_list(f, work, on_path) + sampled;
  x.change =
      "take it off the step's path: do it every N steps instead of every step, in a background thread or "
      "process, or make it cheaper (logging, metrics, checkpoints and pure-Python work per batch are the "
      "usual ones)";
  set_bound(f, ms, "the function's time outside operators per step", &x);
  out->push_back(x);
}

void cpu_saturated(const AdviceFacts& f, std::vector<Finding>* out) {
  if (f.steps <= 0 || f.cpu_saturated_steps.empty()) return;
  double share = static_cast<double>(f.cpu_saturated_steps.size()) / static_cast<double>(f.steps);
  if (share < kCpuSaturatedSteps) return;
  Finding x = finding(f, "host_cpu_saturated", "the host's CPUs are saturated");
  x.evidence =
      format("CPU at 90 %% or more in %zu of %lld steps (%.1f %% busy on average in them)",
             f.cpu_saturated_steps.size(), static_cast<long long>(f.steps), f.cpu_saturated_mean_percent);
  x.change =
      "leave the training room: fewer DataLoader workers or intra-op threads "
      "(torch.set_num_threads) than cores, other processes moved off its cores";
  out->push_back(x);  // what the CPU would give back is not re-timed
}

}  // namespace

bool is_gc_range(const std::string& name) {
  return starts_with(name, "gc.collect");
}

std::vector<Finding> advise(const AdviceFacts& facts) {
  std::vector<Finding> out;
  data_wait(facts, &out);
  device_idle(facts, &out);
  syncs(facts, &out);
  unfused_optimizer(facts, &out);
  tiny_operators(facts, &out);
  exposed_communication(facts, &out);
  memory_near_limit(facts, facts.host_peak_bytes, facts.host_limit_bytes, "host",
                    facts.host_limit_source + " (" + facts.host_peak_source + ")", &out);
  memory_near_limit(facts, facts.device_peak_bytes, facts.device_limit_bytes, "GPU",
                    "GPU's memory (allocated)", &out);
  gc_pauses(facts, &out);
  outside_operators(facts, &out);
  cpu_saturated(facts, &out);
  // A change cannot save more than the step it is made in: a bound that
  // exceeds it (a problem summed over threads, say) is the step.
  for (Finding& x : out) {
    if (x.saving_ms > facts.median_step_ms && facts.median_step_ms > 0) {
      x.saving_ms = facts.median_step_ms;
      x.saving_basis += " (capped at the median step)";
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding& a, const Finding& b) { return a.saving_ms > b.saving_ms; });
  return out;
}

namespace {

std::string straggler_change(const StragglerReport& r) {
  const std::string& cause = r.cause;
  if (cause == "host work outside operators")
    return "take that rank's extra host work off its steps" +
           (r.straggler_outside_functions.empty() ? std::string()
                                                  : " (" + r.straggler_outside_functions[0].first + ")") +
           ": do it every N steps, in a background thread or process, or as cheaply as the other ranks do";
  if (cause == "data loading")
    return "feed that rank faster: its data loading is slower than the others' (a slower disk or "
           "host, fewer workers, uneven shards)";
  if (cause == "communication")
    return "look at that rank's links and its other collectives: it spends longer in "
           "communication than the others";
  if (cause == "compute")
    return "give that rank the others' speed: a slower or throttled device or host, other work "
           "on its cores, or a larger share of the work (uneven batches or sequence lengths)";
  return "compare that rank's timeline with another's in its late steps";
}

}  // namespace

std::vector<Finding> advise_cluster(const StragglerReport& r, const std::vector<LinkBandwidth>& links,
                                    double median_step_ms, double estimated_step_ms) {
  std::vector<Finding> out;
  auto w = std::find_if(r.per_rank.begin(), r.per_rank.end(),
                        [&r](const RankWaits& x) { return x.rank == r.straggler; });
  // Re-timed, the straggler must be worth a twentieth of the job's step.
  bool worth =
      estimated_step_ms < 0 || median_step_ms - estimated_step_ms >= kStragglerSavingShare * median_step_ms;
  // Late at most of its collectives: two ranks late by turns, one by a
  // little more each time, can pile up most of the waiting on one of them.
  auto usually_late = [](const RankWaits& x) {
    return static_cast<double>(x.late_collectives) >=
           kStragglerLateShare * static_cast<double>(x.collectives);
  };
  if (r.straggler >= 0 && w != r.per_rank.end() && worth && usually_late(*w) &&
      static_cast<double>(w->waited_for_ns) >= kStragglerAdviceShare * static_cast<double>(r.total_wait_ns)) {
    Finding x;
    x.rule = "straggler";
    x.rank = r.straggler;
    x.title = "rank " + std::to_string(r.straggler) + " is a straggler the others wait for";
    x.cause = r.cause;
    size_t late = r.straggler_steps.size();
    size_t others = r.ranks.size() > 1 ? r.ranks.size() - 1 : 1;
    double waited_ms = w->waited_for_ns / 1e6;
    x.evidence = format(
        "it arrived last in step(s) %s; the other %zu ranks waited %.3f ms for it in all; "
        "cause: %s (per late step it computed %.3f ms, waited %.3f ms for data, spent %.3f ms in "
        "communication and %.3f ms outside operators more than the others' median)",
        step_ranges(r.straggler_steps).c_str(), others, waited_ms, r.cause.c_str(),
        r.excess_computing_ns / 1e6, r.excess_data_wait_ns / 1e6, r.excess_in_comm_ns / 1e6,
        r.excess_outside_ns / 1e6);
    if (r.cause == "host work outside operators" && !r.straggler_outside_functions.empty())
      x.evidence += "; outside operators, per step: " + outside_function_list(r.straggler_outside_functions);
    x.change = straggler_change(r);
    if (estimated_step_ms >= 0 && median_step_ms > 0) {
      x.step_ms = median_step_ms;
      x.saving_ms = std::max(0.0, median_step_ms - estimated_step_ms);
      x.saving_basis = "re-timed: the job's steps with its work at the others' median";
    } else if (late > 0) {
      x.saving_ms = waited_ms / static_cast<double>(others) / static_cast<double>(late);
      x.saving_basis = "at most: what each other rank waited for it, per step it was late in";
    }
    out.push_back(x);
  }
  for (const LinkBandwidth& l : links) {
    if (!l.slow) continue;
    Finding x;
    x.rule = "slow_link";
    x.rank = l.src;
    x.title = l.collective ? "rank " + std::to_string(l.src) + "'s collectives move data slowly"
                           : "the link from rank " + std::to_string(l.src) + " to rank " +
                                 std::to_string(l.dst) + " is slow";
    x.evidence =
        format("%.3f GB/s over %llu operations (%s), under %.0f %% of the median of its like", l.gb_per_s,
               static_cast<unsigned long long>(l.operations), l.transport.c_str(), 100 * kSlowLinkShare);
    x.change =
        "check that link: its network interface and route, other traffic on it, or place the "
        "ranks that talk most on the same host";
    out.push_back(x);
    if (out.size() >= 8) break;  // the slowest are first; the rest are in the cluster tables
  }
  return out;
}

}  // namespace trainprof::analysis
