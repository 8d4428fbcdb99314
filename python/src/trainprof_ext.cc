// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// `trainprof._trainprof`: the Python extension.
//
// A thin binding of include/trainprof/: values cross over as they are, the
// C++ core does the work. Argument checking, defaults and the torch.profiler /
// MindSpore names live in python/trainprof/.
//
// GIL rule: every Profiler method that takes the profiler's mutex releases the
// GIL first. on_trace_ready runs with that mutex held and takes the GIL, so a
// thread never holds the GIL while it waits for the mutex (no deadlock).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <Python.h>
#include <frameobject.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "python_frames.h"
#include "stack_sampler.h"
#include "trainprof/advise.h"
#include "trainprof/analyse.h"
#include "trainprof/call_events.h"
#include "trainprof/dataset.h"
#include "trainprof/dynamic.h"
#include "trainprof/env.h"
#include "trainprof/flight_recorder.h"
#include "trainprof/frontend.h"
#include "trainprof/key_averages.h"
#include "trainprof/memory.h"
#include "trainprof/options.h"
#include "trainprof/profiler.h"
#include "trainprof/range.h"
#include "trainprof/schedule.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using ReleaseGil = nb::call_guard<nb::gil_scoped_release>;

// on_trace_ready for a Python callable (python/trainprof gives one that takes
// no argument and catches what the user's callback raises).
struct PythonTraceReady {
  nb::object callable;
  void operator()(trainprof::Profiler&) const {
    if (!nb::is_alive()) return;  // the interpreter is finalizing
    nb::gil_scoped_acquire gil;
    try {
      callable();
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("trainprof on_trace_ready");
    }
  }
};

// ---- Paths and texts as the OS has them ----
//
// A path is bytes to the OS, and Python gives it as a str in which bytes that
// are not UTF-8 are surrogate escapes (os.fsdecode): those cross as the bytes
// they stand for, and paths come back the same way, so that any path the OS
// accepts works both ways. nanobind's std::string conversion refuses such a
// str (it is not UTF-8), hence these.

// The bytes of `path`: a str (os.fsencode's bytes) or bytes. TypeError else.
std::string os_path(nb::handle path) {
  if (PyBytes_Check(path.ptr())) {
    return std::string(PyBytes_AS_STRING(path.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(path.ptr())));
  }
  if (!PyUnicode_Check(path.ptr())) {
    throw nb::type_error(
        ("a path must be a str or bytes, got " + std::string(nb::type_name(path.type()).c_str())).c_str());
  }
  nb::object bytes = nb::steal(PyUnicode_EncodeFSDefault(path.ptr()));
  if (!bytes.is_valid()) throw nb::python_error();
  return std::string(PyBytes_AS_STRING(bytes.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(bytes.ptr())));
}

// A path from the core as Python's os functions give one (os.fsdecode).
nb::object os_str(const std::string& path) {
  nb::object text =
      nb::steal(PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
  if (!text.is_valid()) throw nb::python_error();
  return text;
}

// A message or report from the core: UTF-8, except for the bytes of paths
// that are not, which show as \xNN (printable, never an exception).
nb::object report_text(const std::string& text) {
  nb::object out =
      nb::steal(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace"));
  if (!out.is_valid()) throw nb::python_error();
  return out;
}

nb::list report_texts(const std::vector<std::string>& texts) {
  nb::list out;
  for (const std::string& t : texts) out.append(report_text(t));
  return out;
}

// A record_function name, interned once so that entering and leaving the
// range cost a clock read each and one event store.
struct RangeName {
  const char* name;
};

// ---- with_stack: Python call stacks; with_modules: nn.Module hierarchy ----
//
// The torch collector asks for them at the start of each outermost operator
// (core/collector.h's providers), on the operator's thread.

constexpr int kMaxPythonFrames = 64;

using trainprof::python::mix;
using trainprof::python::python_finalizing;

// torch's own profiler leaves these frames out of its stacks (its
// _filter_stack_entry); so do we, with trainprof's wrappers.
bool filtered_frame(std::string_view file, std::string_view function) {
  struct Filtered {
    std::string_view file, function;
  };
  static constexpr Filtered kFiltered[] = {
      {"autograd/__init__", "_make_grads"}, {"autograd/__init__", "backward"},
      {"torch/_tensor.py", "backward"},     {"trainprof/_ranges.py", ""},
      {"trainprof/_modules.py", ""},
  };
  for (const Filtered& f : kFiltered) {
    if (file.find(f.file) != std::string_view::npos &&
        (f.function.empty() || function.find(f.function) != std::string_view::npos)) {
      return true;
    }
  }
  return false;
}

// "file(line): function;..." innermost first, as torch's profiler writes
// its stack entries. Called with the GIL, on a cache miss only.
std::string format_python_stack(PyFrameObject* frame) {
  std::string text;
  Py_XINCREF(frame);
  for (int depth = 0; frame != nullptr && depth < kMaxPythonFrames; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* function = PyUnicode_AsUTF8(code->co_name);
    if (file == nullptr || function == nullptr) {
      PyErr_Clear();
    } else if (!filtered_frame(file, function)) {
      if (!text.empty()) text += ';';
      text.append(file).append("(").append(std::to_string(PyFrame_GetLineNumber(frame))).append("): ");
      text.append(function);
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return text;
}

// Stacks by a hash of their frames' (code object, last instruction): the
// hit path walks the frames and formats nothing. The code objects of cached
// stacks are kept alive, so that their addresses are not reused.
struct PythonStacks {
  std::unordered_map<uint64_t, const char*> by_hash;
};

// The calling thread's Python stack (interned), computed with the GIL.
const char* python_stack_locked(PyFrameObject* innermost) {
  static thread_local PythonStacks* stacks = new PythonStacks();  // threads are reused: kept
  uint64_t h = 0;
  PyFrameObject* frame = innermost;
  Py_INCREF(frame);
  for (int depth = 0; frame != nullptr && depth < kMaxPythonFrames; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);
#if PY_VERSION_HEX >= 0x030B0000
    int position = PyFrame_GetLasti(frame);
#else
    int position = PyFrame_GetLineNumber(frame);
#endif
    h = mix(mix(h, reinterpret_cast<uintptr_t>(code)), static_cast<uint64_t>(position));
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (auto it = stacks->by_hash.find(h); it != stacks->by_hash.end()) return it->second;
  std::string text = format_python_stack(innermost);
  static std::vector<PyObject*>* kept_codes = new std::vector<PyObject*>();  // under the GIL
  frame = innermost;
  Py_INCREF(frame);
  for (int depth = 0; frame != nullptr && depth < kMaxPythonFrames; ++depth) {
    kept_codes->push_back(reinterpret_cast<PyObject*>(PyFrame_GetCode(frame)));  // the reference is kept
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  const char* interned = text.empty() ? nullptr : trainprof::detail::intern(text);
  stacks->by_hash.emplace(h, interned);
  return interned;
}

// The stack provider. torch's bindings release the GIL before they dispatch
// an operator, so the operator's thread takes it back for the walk (a thread
// without a Python thread state, such as autograd's device threads, has no
// stack). Uncontended that is two atomic operations and a mutex; while
// another Python thread runs, the operator waits for the interpreter's
// switch (with_stack is a diagnostic setting: docs/PERFORMANCE.md).
const char* python_stack() noexcept {
  if (!Py_IsInitialized() || python_finalizing()) return nullptr;
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == nullptr) return nullptr;
  bool held = PyGILState_Check() != 0;
  PyGILState_STATE state = held ? PyGILState_LOCKED : PyGILState_Ensure();
  const char* stack = nullptr;
  try {
    if (PyFrameObject* innermost = PyThreadState_GetFrame(ts)) {  // a new reference
      stack = python_stack_locked(innermost);
      Py_DECREF(innermost);
    }
  } catch (...) {
    stack = nullptr;
  }
  if (!held) PyGILState_Release(state);
  return stack;
}

// The calling thread's nn.Module hierarchy, set by python/trainprof/_modules.py's hooks.
thread_local const char* t_module = nullptr;

const char* current_module() noexcept {
  return t_module;
}

void bind_enums(nb::module_& m) {
  nb::enum_<trainprof::Activity>(m, "Activity")
      .value("CPU", trainprof::Activity::CPU)
      .value("GPU", trainprof::Activity::GPU);
  nb::enum_<trainprof::ProfilerLevel>(m, "ProfilerLevel")
      .value("None_", trainprof::ProfilerLevel::None)
      .value("Level0", trainprof::ProfilerLevel::Level0)
      .value("Level1", trainprof::ProfilerLevel::Level1)
      .value("Level2", trainprof::ProfilerLevel::Level2);
  nb::enum_<trainprof::ProfilerAction>(m, "ProfilerAction")
      .value("NONE", trainprof::ProfilerAction::None)
      .value("WARMUP", trainprof::ProfilerAction::Warmup)
      .value("RECORD", trainprof::ProfilerAction::Record)
      .value("RECORD_AND_SAVE", trainprof::ProfilerAction::RecordAndSave);
  nb::enum_<trainprof::HostSystem>(m, "HostSystem")
      .value("CPU", trainprof::HostSystem::Cpu)
      .value("MEM", trainprof::HostSystem::Mem)
      .value("DISK", trainprof::HostSystem::Disk)
      .value("NETWORK", trainprof::HostSystem::Network);
  nb::enum_<trainprof::AnalyseMode>(m, "AnalyseMode")
      .value("Sync", trainprof::AnalyseMode::Sync)
      .value("Async", trainprof::AnalyseMode::Async);
}

void bind_options(nb::module_& m) {
  nb::class_<trainprof::Schedule>(m, "Schedule")
      .def(
          "__init__",
          [](trainprof::Schedule* s, int wait, int warmup, int active, int repeat, int skip_first) {
            new (s) trainprof::Schedule{wait, warmup, active, repeat, skip_first};
          },
          "wait"_a, "warmup"_a, "active"_a, "repeat"_a, "skip_first"_a)
      .def_ro("wait", &trainprof::Schedule::wait)
      .def_ro("warmup", &trainprof::Schedule::warmup)
      .def_ro("active", &trainprof::Schedule::active)
      .def_ro("repeat", &trainprof::Schedule::repeat)
      .def_ro("skip_first", &trainprof::Schedule::skip_first)
      .def("validate", &trainprof::Schedule::validate)
      .def("action", &trainprof::Schedule::action, "step"_a);

  using trainprof::ProfilerOptions;
  nb::class_<ProfilerOptions>(m, "ProfilerOptions")
      .def(nb::init<>())
      .def_prop_rw(
          "output_path", [](const ProfilerOptions& o) { return os_str(o.output_path); },
          [](ProfilerOptions& o, nb::handle path) { o.output_path = os_path(path); })
      .def_rw("start_profile", &ProfilerOptions::start_profile)
      .def_rw("activities", &ProfilerOptions::activities)
      .def_rw("schedule", &ProfilerOptions::schedule)
      .def_rw("profile_memory", &ProfilerOptions::profile_memory)
      .def_rw("record_shapes", &ProfilerOptions::record_shapes)
      .def_rw("with_stack", &ProfilerOptions::with_stack)
      .def_rw("with_modules", &ProfilerOptions::with_modules)
      .def_rw("sync_enable", &ProfilerOptions::sync_enable)
      .def_rw("with_flops", &ProfilerOptions::with_flops)
      .def_rw("data_process", &ProfilerOptions::data_process)
      .def_rw("profile_communication", &ProfilerOptions::profile_communication)
      .def_rw("profiler_level", &ProfilerOptions::profiler_level)
      .def_rw("mstx_domain_include", &ProfilerOptions::mstx_domain_include)
      .def_rw("mstx_domain_exclude", &ProfilerOptions::mstx_domain_exclude)
      .def_rw("data_simplification", &ProfilerOptions::data_simplification)
      .def_rw("export_text", &ProfilerOptions::export_text)
      .def_rw("export_db", &ProfilerOptions::export_db)
      .def_rw("host_sys", &ProfilerOptions::host_sys)
      .def_rw("host_sys_interval_ms", &ProfilerOptions::host_sys_interval_ms)
      .def_rw("sample_operators", &ProfilerOptions::sample_operators)
      .def_rw("python_stack_sampling_ms", &ProfilerOptions::python_stack_sampling_ms)
      .def(
          "set_on_trace_ready",
          [](ProfilerOptions& o, nb::object callable) {
            o.on_trace_ready = PythonTraceReady{std::move(callable)};
          },
          "callable"_a)
      .def(
          "set_trace_handler",
          [](ProfilerOptions& o, nb::handle dir, nb::handle worker_name, bool analyse, bool async) {
            o.on_trace_ready = trainprof::trace_handler(os_path(dir), os_path(worker_name), analyse, async);
          },
          "dir"_a, "worker_name"_a, "analyse"_a, "async_mode"_a);
  // TRAINPROF_OPTIONS' JSON: (start, analyse, options, flight); ValueError
  // naming the key. flight: None, or "flight_recorder"'s settings as the
  // keyword arguments of trainprof.flight_recorder.
  m.def(
      "parse_options_json",
      [](std::string_view text) {
        trainprof::EnvOptions env = trainprof::parse_options_json(text);
        nb::object flight = nb::none();
        if (env.flight_recorder) {
          const trainprof::FlightRecorderOptions& f = env.flight;
          nb::dict d;
          d["ring_mb"] = f.ring_mb;
          d["slow_step_factor"] = f.slow_step_factor;
          d["slow_step_window"] = f.slow_step_window;
          d["slow_step_min_steps"] = f.slow_step_min_steps;
          d["cooldown_s"] = f.cooldown_s;
          d["analyse"] = f.analyse;
          d["dump_signal"] =
              f.dump_signal == 0 ? nb::object(nb::none()) : nb::object(nb::int_(f.dump_signal));
          d["dump_file"] = f.dump_file.empty() ? nb::object(nb::none()) : os_str(f.dump_file);
          d["health_steps"] = f.health_steps;
          d["metrics_file"] = f.metrics_file.empty() ? nb::object(nb::none()) : os_str(f.metrics_file);
          d["metrics_interval_s"] = f.metrics_interval_s;
          d["metrics_port"] =
              f.metrics_port < 0 ? nb::object(nb::none()) : nb::object(nb::int_(f.metrics_port));
          d["metrics_address"] = f.metrics_address;
          d["hang_native_stacks"] = f.hang_native_stacks;
          d["all_ranks"] = f.all_ranks;
          d["incident_wait_s"] = f.incident_wait_s;
          d["check_loss"] = f.check_loss;
          d["check_gradients"] = f.check_gradients;
          d["loss_spike_factor"] = f.loss_spike_factor;
          d["hang_timeout_s"] =
              f.hang_timeout_s == 0 ? nb::object(nb::none()) : nb::object(nb::float_(f.hang_timeout_s));
          flight = std::move(d);
        }
        return std::make_tuple(env.start, env.analyse, std::move(env.options), flight);
      },
      "text"_a);
  // The option table (trainprof::option_list): what the Python API is checked against.
  nb::class_<trainprof::OptionInfo>(m, "OptionInfo")
      .def_ro("name", &trainprof::OptionInfo::name)
      .def_ro("type", &trainprof::OptionInfo::type)
      .def_ro("default_json", &trainprof::OptionInfo::default_json)
      .def_ro("range", &trainprof::OptionInfo::range)
      .def_ro("fields", &trainprof::OptionInfo::fields)
      .def_ro("dynamic", &trainprof::OptionInfo::dynamic)
      .def_ro("python", &trainprof::OptionInfo::python)
      .def_ro("doc", &trainprof::OptionInfo::doc);
  m.def("option_list", &trainprof::option_list);
}

void bind_profiler(nb::module_& m) {
  using trainprof::Profiler;
  nb::class_<trainprof::RunSummary>(m, "RunSummary")
      .def_prop_ro("run_dir", [](const trainprof::RunSummary& r) { return os_str(r.run_dir); })
      .def_ro("events_recorded", &trainprof::RunSummary::events_recorded)
      .def_ro("events_dropped", &trainprof::RunSummary::events_dropped)
      .def_ro("events_lost", &trainprof::RunSummary::events_lost)
      .def_prop_ro("io_error", [](const trainprof::RunSummary& r) { return report_text(r.io_error); })
      .def_ro("ok", &trainprof::RunSummary::ok);
  // The constructor keeps the GIL: it copies the options' Python callback.
  nb::class_<Profiler>(m, "Profiler")
      .def(nb::init<trainprof::ProfilerOptions>(), "options"_a)
      .def("start", &Profiler::start, ReleaseGil())
      .def("stop", &Profiler::stop, ReleaseGil())
      .def("start_at_step_boundary", &Profiler::start_at_step_boundary, ReleaseGil())
      .def("stop_at_step_boundary", &Profiler::stop_at_step_boundary, ReleaseGil())
      .def("step", &Profiler::step, ReleaseGil())
      .def("step_num", &Profiler::step_num, ReleaseGil())
      .def("set_step_num", &Profiler::set_step_num, "step"_a, ReleaseGil())
      .def("current_action", &Profiler::current_action, ReleaseGil())
      .def("started", &Profiler::started, ReleaseGil())
      .def("add_metadata", &Profiler::add_metadata, "key"_a, "value"_a, ReleaseGil())
      .def("add_metadata_json", &Profiler::add_metadata_json, "key"_a, "json"_a, ReleaseGil())
      .def("current_run_dir",
           [](Profiler& p) {
             std::string dir;
             {
               nb::gil_scoped_release release;
               dir = p.current_run_dir();
             }
             return os_str(dir);
           })
      .def("last_run", &Profiler::last_run, ReleaseGil())
      .def(
          "analyse",
          [](Profiler& p, trainprof::AnalyseMode mode, bool pretty, bool link_trace_for_peers,
             std::vector<int64_t> step_list) {
            trainprof::AnalyseOptions options;
            options.pretty = pretty;
            options.link_trace_for_peers = link_trace_for_peers;
            options.step_list = std::move(step_list);
            return p.analyse(mode, options);
          },
          "mode"_a, "pretty"_a, "link_trace_for_peers"_a = false, "step_list"_a = std::vector<int64_t>(),
          ReleaseGil())
      .def("wait_for_analysis", &Profiler::wait_for_analysis, ReleaseGil());
}

// The flight recorder (include/trainprof/flight_recorder.h); the Python
// surface is python/trainprof/_flight.py.
void bind_flight_recorder(nb::module_& m) {
  using trainprof::FlightDump;
  using trainprof::FlightRecorder;
  nb::class_<FlightDump>(m, "FlightDump")
      .def_prop_ro("run_dir", [](const FlightDump& d) { return os_str(d.run_dir); })
      .def_prop_ro("trigger", [](const FlightDump& d) { return report_text(d.trigger); })
      .def_prop_ro("reason", [](const FlightDump& d) { return report_text(d.reason); })
      .def_prop_ro("error", [](const FlightDump& d) { return report_text(d.error); });
  nb::class_<FlightRecorder>(m, "FlightRecorder")
      .def(
          "__init__",
          [](FlightRecorder* r, trainprof::ProfilerOptions options, uint32_t ring_mb, double slow_step_factor,
             uint32_t slow_step_window, uint32_t slow_step_min_steps, double cooldown_s, bool analyse,
             int dump_signal, nb::handle dump_file, double hang_timeout_s, nb::handle hang_stacks_file,
             uint32_t health_steps, nb::handle metrics_file, double metrics_interval_s, int metrics_port,
             const std::string& metrics_address, bool hang_native_stacks, bool all_ranks,
             double incident_wait_s, bool check_loss, bool check_gradients, double loss_spike_factor) {
            trainprof::FlightRecorderOptions o;
            o.profiler = std::move(options);
            o.ring_mb = ring_mb;
            o.slow_step_factor = slow_step_factor;
            o.slow_step_window = slow_step_window;
            o.slow_step_min_steps = slow_step_min_steps;
            o.cooldown_s = cooldown_s;
            o.analyse = analyse;
            o.dump_signal = dump_signal;
            o.hang_timeout_s = hang_timeout_s;
            if (!hang_stacks_file.is_none()) o.hang_stacks_file = os_path(hang_stacks_file);
            if (!dump_file.is_none()) o.dump_file = os_path(dump_file);
            o.health_steps = health_steps;
            if (!metrics_file.is_none()) o.metrics_file = os_path(metrics_file);
            o.metrics_interval_s = metrics_interval_s;
            o.metrics_port = metrics_port;
            o.metrics_address = metrics_address;
            o.hang_native_stacks = hang_native_stacks;
            o.all_ranks = all_ranks;
            o.incident_wait_s = incident_wait_s;
            o.check_loss = check_loss;
            o.check_gradients = check_gradients;
            o.loss_spike_factor = loss_spike_factor;
            nb::gil_scoped_release release;
            new (r) FlightRecorder(std::move(o));
          },
          "options"_a, "ring_mb"_a, "slow_step_factor"_a, "slow_step_window"_a, "slow_step_min_steps"_a,
          "cooldown_s"_a, "analyse"_a, "dump_signal"_a, "dump_file"_a.none(), "hang_timeout_s"_a,
          "hang_stacks_file"_a.none(), "health_steps"_a, "metrics_file"_a.none(), "metrics_interval_s"_a,
          "metrics_port"_a, "metrics_address"_a, "hang_native_stacks"_a, "all_ranks"_a, "incident_wait_s"_a,
          "check_loss"_a, "check_gradients"_a, "loss_spike_factor"_a)
      .def("metrics_url", &FlightRecorder::metrics_url, ReleaseGil())
      .def("metrics_text", &FlightRecorder::metrics_text, ReleaseGil())
      .def("recording", &FlightRecorder::recording, ReleaseGil())
      .def("step", &FlightRecorder::step, ReleaseGil())
      .def("step_num", &FlightRecorder::step_num, ReleaseGil())
      .def("loss", &FlightRecorder::loss, "value"_a, "step"_a = -1, ReleaseGil())
      .def("gradient_norm", &FlightRecorder::gradient_norm, "value"_a, "step"_a = -1, ReleaseGil())
      .def(
          "dump",
          [](FlightRecorder& r, const std::string& reason, const std::string& trigger) {
            return r.dump(reason, trigger);
          },
          "reason"_a, "trigger"_a = "request", ReleaseGil())
      .def("dumps", &FlightRecorder::dumps, ReleaseGil())
      .def("wait_for_dumps", &FlightRecorder::wait_for_dumps, ReleaseGil())
      .def("stop", &FlightRecorder::stop, ReleaseGil());
}

// The decisions of a DynamicProfilerMonitor; python/trainprof/_dynamic.py
// runs the profile. step() keeps the GIL: it reads an atomic and, after an
// edit, takes a mutex that the watcher thread (which never takes the GIL)
// holds for a copy.
void bind_dynamic(nb::module_& m) {
  using trainprof::DynamicSchedule;
  nb::class_<DynamicSchedule>(m, "DynamicSchedule")
      .def(
          "__init__",
          [](DynamicSchedule* s, nb::handle cfg_path, nb::handle output_path, double poll_interval) {
            new (s) DynamicSchedule(os_path(cfg_path), os_path(output_path), poll_interval);
          },
          "cfg_path"_a, "output_path"_a, "poll_interval"_a)
      .def("step",
           [](DynamicSchedule& s) {
             DynamicSchedule::Action a = s.step();
             return std::make_tuple(a.stop, a.start);
           })
      .def("step_num", &DynamicSchedule::step_num)
      .def("collecting", &DynamicSchedule::collecting)
      .def("configs_read", &DynamicSchedule::configs_read)
      // (start_step, stop_step, analyse_mode, options) of the collection being recorded, or None.
      .def("collection",
           [](const DynamicSchedule& s)
               -> std::optional<std::tuple<int64_t, int64_t, int, trainprof::ProfilerOptions>> {
             if (!s.collection()) return std::nullopt;
             const trainprof::DynamicCollection& c = *s.collection();
             return std::make_tuple(c.start_step, c.stop_step, c.analyse_mode, c.options);
           });
  m.def("default_dynamic_config", &trainprof::default_dynamic_config);
}

void bind_analysis(nb::module_& m) {
  nb::class_<trainprof::RunAnalysis>(m, "RunAnalysis")
      .def_prop_ro("run_dir", [](const trainprof::RunAnalysis& r) { return os_str(r.run_dir); })
      .def_ro("ok", &trainprof::RunAnalysis::ok)
      .def_prop_ro("error", [](const trainprof::RunAnalysis& r) { return report_text(r.error); })
      .def_prop_ro("warnings", [](const trainprof::RunAnalysis& r) { return report_texts(r.warnings); })
      .def_ro("events", &trainprof::RunAnalysis::events)
      .def_ro("seconds", &trainprof::RunAnalysis::seconds);
  nb::class_<trainprof::AnalyseReport>(m, "AnalyseReport")
      .def_ro("runs", &trainprof::AnalyseReport::runs)
      .def_prop_ro("error", [](const trainprof::AnalyseReport& r) { return report_text(r.error); })
      .def_prop_ro("ok", &trainprof::AnalyseReport::ok);
  m.def(
      "analyse",
      [](nb::handle path_object, int max_workers, bool pretty, std::vector<int64_t> step_list,
         bool data_simplification, bool export_text, bool export_db) {
        std::string path = os_path(path_object);
        nb::gil_scoped_release release;
        trainprof::AnalyseOptions options;
        options.max_workers = max_workers;
        options.pretty = pretty;
        options.step_list = std::move(step_list);
        options.data_simplification = data_simplification;
        options.export_text = export_text;
        options.export_db = export_db;
        return trainprof::analyse(path, options);
      },
      "path"_a, "max_workers"_a, "pretty"_a, "step_list"_a, "data_simplification"_a, "export_text"_a = true,
      "export_db"_a = false);
  m.def(
      "find_run_directories",
      [](nb::handle path) {
        std::string bytes = os_path(path);
        std::vector<std::string> runs;
        {
          nb::gil_scoped_release release;
          runs = trainprof::find_run_directories(bytes);
        }
        nb::list out;
        for (const std::string& run : runs) out.append(os_str(run));
        return out;
      },
      "path"_a);
  m.def(
      "no_run_directory_error",
      [](nb::handle path) { return report_text(trainprof::no_run_directory_error(os_path(path))); },
      "path"_a);
  nb::class_<trainprof::KeyAverage>(m, "KeyAverage")
      .def_prop_ro("name", [](const trainprof::KeyAverage& r) { return report_text(r.name); })
      .def_prop_ro("input_shapes", [](const trainprof::KeyAverage& r) { return report_text(r.input_shapes); })
      .def_prop_ro("stack", [](const trainprof::KeyAverage& r) { return report_text(r.stack); })
      .def_ro("is_operator", &trainprof::KeyAverage::is_operator)
      .def_ro("count", &trainprof::KeyAverage::count)
      .def_ro("total_ns", &trainprof::KeyAverage::total_ns)
      .def_ro("self_ns", &trainprof::KeyAverage::self_ns)
      .def_ro("device_total_ns", &trainprof::KeyAverage::device_total_ns)
      .def_ro("device_self_ns", &trainprof::KeyAverage::device_self_ns)
      .def_ro("flops", &trainprof::KeyAverage::flops)
      .def_ro("cpu_memory", &trainprof::KeyAverage::cpu_memory)
      .def_ro("self_cpu_memory", &trainprof::KeyAverage::self_cpu_memory)
      .def_ro("device_memory", &trainprof::KeyAverage::device_memory)
      .def_ro("self_device_memory", &trainprof::KeyAverage::self_device_memory)
      .def_prop_ro("first_parent",
                   [](const trainprof::KeyAverage& r) { return report_text(r.first_parent); });
  nb::class_<trainprof::KeyAverages>(m, "KeyAverages")
      .def_ro("rows", &trainprof::KeyAverages::rows)
      .def_prop_ro("error", [](const trainprof::KeyAverages& r) { return report_text(r.error); })
      .def_prop_ro("warnings", [](const trainprof::KeyAverages& r) { return report_texts(r.warnings); });
  m.def(
      "key_averages",
      [](nb::handle run_dir, bool group_by_input_shape, int group_by_stack_n, bool include_steps) {
        std::string path = os_path(run_dir);
        nb::gil_scoped_release release;
        trainprof::KeyAveragesOptions options;
        options.group_by_input_shape = group_by_input_shape;
        options.group_by_stack_n = group_by_stack_n;
        options.include_steps = include_steps;
        return trainprof::key_averages(path, options);
      },
      "run_dir"_a, "group_by_input_shape"_a = false, "group_by_stack_n"_a = 0, "include_steps"_a = true);
  // events(): the calls stay in C++ (sizeof(CallEvent) bytes each); Python
  // reads one at a time as a tuple.
  nb::class_<trainprof::CallEvents>(m, "CallEvents")
      .def("__len__", [](const trainprof::CallEvents& e) { return e.calls.size(); })
      .def(
          "call",
          [](const trainprof::CallEvents& e, size_t i) {
            if (i >= e.calls.size()) throw nb::index_error("no such call");
            const trainprof::CallEvent& c = e.calls[i];
            return nb::make_tuple(c.start_ns, c.end_ns, c.self_ns, c.key, c.parent, c.first_child,
                                  c.next_sibling, c.first_kernel, c.kernel_count, c.cpu_memory,
                                  c.self_cpu_memory, c.device_memory, c.self_device_memory, c.device_ns,
                                  c.self_device_ns);
          },
          "index"_a)
      .def("key_count", [](const trainprof::CallEvents& e) { return e.keys.size(); })
      .def(
          "key",
          [](const trainprof::CallEvents& e, size_t k) {
            if (k >= e.keys.size()) throw nb::index_error("no such key");
            const trainprof::CallKey& key = e.keys[k];
            return nb::make_tuple(report_text(key.name), key.tid, report_text(key.input_shapes),
                                  report_text(key.stack), key.is_operator, key.is_step, key.flops);
          },
          "index"_a)
      .def(
          "kernel",
          [](const trainprof::CallEvents& e, size_t j) {
            if (j >= e.kernels.size()) throw nb::index_error("no such kernel");
            const trainprof::CallKernel& k = e.kernels[j];
            return nb::make_tuple(report_text(e.kernel_names[k.name]), k.device, k.start_ns, k.end_ns);
          },
          "index"_a)
      .def_ro("origin_ns", &trainprof::CallEvents::origin_ns)
      .def_prop_ro("error", [](const trainprof::CallEvents& e) { return report_text(e.error); })
      .def_prop_ro("warnings", [](const trainprof::CallEvents& e) { return report_texts(e.warnings); });
  m.def(
      "call_events",
      [](nb::handle run_dir, bool include_steps) {
        std::string path = os_path(run_dir);
        nb::gil_scoped_release release;
        return trainprof::call_events(path, {.include_steps = include_steps});
      },
      "run_dir"_a, "include_steps"_a = true);
  // The findings as JSON text (parsed in Python), the error, the warnings.
  m.def(
      "advise",
      [](nb::handle path) {
        std::string bytes = os_path(path);
        trainprof::AdviceReport a;
        {
          nb::gil_scoped_release release;
          a = trainprof::advise(bytes);
        }
        return nb::make_tuple(report_text(a.json), report_text(a.error), report_texts(a.warnings),
                              report_text(a.text));
      },
      "path"_a);
  m.def(
      "summarize_run",
      [](nb::handle run_dir) {
        std::string bytes = os_path(run_dir);
        std::string text;
        {
          nb::gil_scoped_release release;
          text = trainprof::summarize_run(bytes);
        }
        return report_text(text);
      },
      "run_dir"_a);
}

// Data stages timed in Python (torch DataLoader, its worker processes too).
void bind_data_stages(nb::module_& m) {
  m.def("stage_clock_ticks", &trainprof::detail::stage_clock_ticks);
  m.def("data_stages_recording", &trainprof::detail::data_stages_recording);
  m.def("record_data_stage", &trainprof::detail::record_data_stage, "operation"_a, "stage"_a, "start_ticks"_a,
        "end_ticks"_a, "custom_info"_a);
  m.def("set_thread_name", &trainprof::set_thread_name, "name"_a);
  // torch.distributed's rank and world size (runs opened later are named by them).
  m.def(
      "set_distributed_rank",
      [](int rank, int world_size) {
        trainprof::detail::set_runtime_rank(rank, world_size, "torch.distributed");
      },
      "rank"_a, "world_size"_a);
  // The job rank 0 named through torch.distributed's store (where no launcher names one).
  m.def(
      "set_runtime_job",
      [](const std::string& id) { trainprof::detail::set_runtime_job(id, "torch.distributed store"); },
      "id"_a, ReleaseGil());
  // Clock alignment measured by the front end (python/trainprof/_distributed.py).
  m.def("realtime_ns", &trainprof::detail::realtime_now_ns);
  m.def(
      "add_clock_sync_point",
      [](int reference_rank, uint64_t realtime_ns, int64_t offset_ns, uint64_t error_ns) {
        trainprof::detail::add_clock_sync_point(
            reference_rank, trainprof::detail::ClockSyncPoint{realtime_ns, offset_ns, error_ns});
      },
      "reference_rank"_a, "realtime_ns"_a, "offset_ns"_a, "error_ns"_a, ReleaseGil());
  m.def("note_clock_exchange_started", &trainprof::detail::note_clock_exchange_started, ReleaseGil());
  m.def("note_clock_exchange_ended", &trainprof::detail::note_clock_exchange_ended, "failed"_a, "reason"_a,
        ReleaseGil());
}

void bind_context(nb::module_& m) {
  m.def("enable_python_context",
        [] { trainprof::detail::set_context_providers(&python_stack, &current_module); });
  m.def(
      "set_module", [](const RangeName* path) { t_module = path != nullptr ? path->name : nullptr; },
      "path"_a.none());
}

void bind_ranges(nb::module_& m) {
  m.def("mark", &trainprof::mark, "message"_a, "domain"_a);
  // Tags of one category: (address, bytes, device type, device index) each.
  m.def(
      "tag_memory",
      [](int category, const std::vector<std::tuple<uint64_t, uint64_t, int, int>>& blocks) {
        for (const auto& [address, bytes, type, index] : blocks) {
          trainprof::tag_memory(static_cast<trainprof::MemoryCategory>(category),
                                reinterpret_cast<const void*>(address), bytes, type, index);
        }
      },
      "category"_a, "blocks"_a);
  m.def("range_start", &trainprof::range_start, "message"_a, "domain"_a);
  m.def("range_end", &trainprof::range_end, "range_id"_a);
  nb::class_<RangeName>(m, "RangeName").def("__init__", [](RangeName* r, std::string_view name) {
    new (r) RangeName{trainprof::detail::intern(name)};
  });
  m.def("begin_range",
        [] { return trainprof::detail::host_recording() ? trainprof::detail::now_ticks() : uint64_t{0}; });
  m.def(
      "end_range",
      [](const RangeName& name, uint64_t start_ticks) {
        if (start_ticks != 0) trainprof::detail::record_range(name.name, start_ticks);
      },
      "name"_a, "start_ticks"_a);
}

}  // namespace

NB_MODULE(_trainprof, m) {
  m.doc() = "trainprof's C++ core (internal: use the trainprof package)";
  // A profile kept in a module global lives until the interpreter is torn
  // down; nanobind would report it as a leak on every such exit.
  nb::set_leak_warnings(false);
  m.def("version", [] { return std::string(trainprof::version()); });
  bind_enums(m);
  bind_options(m);
  bind_profiler(m);
  bind_analysis(m);
  bind_dynamic(m);
  bind_flight_recorder(m);
  bind_ranges(m);
  trainprof::python::bind_stack_sampler(m);
  bind_data_stages(m);
  bind_context(m);
}
