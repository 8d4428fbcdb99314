// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The Python stack sampler (stack_sampler.h).
//
// One thread of its own, with a Python thread state made once: each look
// takes the GIL, walks every other thread's frames and records one sample
// per thread, standing for the time between the previous ask and this one. torch's
// bindings release the GIL while an operator runs, so a look waits at most
// for the interpreter's switch interval while another thread runs Python;
// the sample's span then covers the wait, and the analysis gives it only the
// part the thread spent outside operators and ranges.
//
// A thread that runs pure Python holds the GIL until the switch interval
// or its next operator, and one blocked in a call that let the GIL go
// (a sleep, a lock) is found wherever it let go: looks would come when the
// thread lets go, not at times of their own. The main thread, where
// training loops mostly run, is therefore sampled from inside: each look
// asks it (a pending call, which it runs at the next bytecode boundary
// where it notices: when the sampler asks for the GIL, within the switch
// interval, or when a blocking call returns) to record its own stack. The
// stack it finds is where it was when asked, give or take the switch
// interval, so each such sample stands for the time between two asks:
// evenly spaced, whatever the thread was doing. When the sampler gets the
// GIL and the main thread has not run the call yet, it is blocked outside
// Python (a sleep, a lock, an operator) where it was asked: the sampler
// reads its stack then, before the blocking call returns and the thread
// runs on into the next function.
//
// Each sample also carries how long its thread waited for a CPU in its
// span (the scheduler's run-queue wait, read from /proc): on a machine
// busy with other work a thread preempted between two operators leaves a
// gap that no function of its own spent, which the analysis takes out.
#include "stack_sampler.h"

#include <nanobind/stl/string.h>

#include <Python.h>
#include <fcntl.h>
#include <frameobject.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "python_frames.h"
#include "trainprof/range.h"
#include "trainprof/stack_sample.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace trainprof::python {
namespace {

constexpr int kMaxFrames = 64;
// Distinct stacks kept formatted; past it a new stack keeps its 8 innermost
// frames, so that a program that never repeats a stack stays bounded.
constexpr size_t kMaxStacks = 100000;

// trainprof's own wrappers (the optimizer's step counter, record_function)
// are not the program's functions.
bool own_frame(std::string_view file) {
  return file.find("/trainprof/_") != std::string_view::npos;
}

// Thread `tid`'s time ready to run but waiting for a CPU since it
// started, ns: the second field of its schedstat; 0 where the kernel keeps
// none.
uint64_t run_queue_wait_ns(uint32_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%u/schedstat", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[96];
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  return std::sscanf(text, "%llu %llu", &on_cpu, &waiting) == 2 ? waiting : 0;
}

bool is_generator(PyCodeObject* code) {
  return (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) != 0;
}

class StackSampler {
 public:
  // "" or why the sampler cannot run here.
  // `main_tid`: the main thread's OS id (it samples itself).
  std::string acquire(uint32_t interval_ms, uint32_t main_tid) {
#if PY_VERSION_HEX < 0x030B0000
    (void)interval_ms;
    (void)main_tid;
    return "Python stack sampling needs Python 3.11 or later (a thread state's OS thread id)";
#else
    forget_if_forked();
    std::lock_guard<std::mutex> lock(mu_);
    main_tid_ = main_tid;
    interval_ms_ = users_ == 0 ? interval_ms : std::min(interval_ms_, interval_ms);
    ++users_;
    if (!thread_.joinable()) {
      stopping_ = false;
      owner_ = getpid();
      thread_ = std::thread([this] { loop(); });
    }
    return "";
#endif
  }

  // Called without the GIL: the sampler may be waiting for it.
  void release() {
    forget_if_forked();
    std::thread ending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (users_ == 0 || --users_ > 0) return;
      stopping_ = true;
      ending = std::move(thread_);
    }
    cv_.notify_all();
    if (ending.joinable()) ending.join();
  }

 private:
  // A fork() child has the parent's state but not its thread.
  void forget_if_forked() {
    if (owner_ == 0 || owner_ == getpid()) return;
    new (&mu_) std::mutex();
    new (&cv_) std::condition_variable();
    new (&thread_) std::thread();  // names no thread here: forgotten, not joined
    users_ = 0;
    owner_ = 0;
    main_queued_ = false;
    main_due_ = false;
    main_previous_ = 0;
    main_wait_at_ask_ = 0;
    main_wait_at_answer_ = 0;
    waited_at_.clear();
  }

  // With the GIL: how long thread `tid` waited for a CPU since the last
  // call for it (0 the first time).
  uint64_t cpu_wait_since_last(uint32_t tid) {
    constexpr size_t kMaxThreads = 4096;  // threads come and go: forget them all now and then
    if (waited_at_.size() >= kMaxThreads) waited_at_.clear();
    uint64_t now = run_queue_wait_ns(tid);
    auto [it, first] = waited_at_.emplace(tid, now);
    uint64_t since = first || now < it->second ? 0 : now - it->second;
    it->second = now;
    return since;
  }

  void loop() {
    if (!Py_IsInitialized() || python_finalizing()) return;
    PyGILState_STATE gil = PyGILState_Ensure();  // this thread's state, kept
    PyThreadState* saved = PyEval_SaveThread();
    uint64_t previous = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stopping_; });
      if (stopping_) break;
      lock.unlock();
      if (!detail::host_recording() || python_finalizing()) {
        previous = 0;  // the next look stands for nothing before it
        main_previous_ = 0;
      } else {
        // The other threads' stacks too stand for the time between two
        // asks: the GIL comes within the switch interval of asking, and a
        // thread that does not hold it is blocked where it was asked.
        uint64_t asked = detail::now_ticks();
        ask_main_thread(asked);
        // Taken at every look, even with no other thread to read: the
        // pending call alone does not wake a main thread running Python
        // (the interpreter signals it only to a thread that can run it, and
        // this one cannot), asking for the GIL does. Without it the main
        // thread answered at its next operator, past the function asked.
        PyEval_RestoreThread(saved);
        look(previous, asked);
        saved = PyEval_SaveThread();
        previous = asked;
      }
      lock.lock();
    }
    lock.unlock();
    if (python_finalizing()) return;  // the interpreter is going: its thread states with it
    PyEval_RestoreThread(saved);
    PyGILState_Release(gil);
  }

  // With the GIL: one sample per other thread, for [start, end).
  //
  // The threads' frames come from sys._current_frames(), which walks the
  // interpreter's thread states under the runtime's lock. Walking them
  // here, with the GIL alone, crashed: a C++ thread that takes the GIL for
  // the first time (torch's Gloo threads, releasing a tensor) adds its new
  // thread state to the list without the GIL, and one read while it was
  // being set up had no frame pointer yet.
  //
  // Nothing here may run Python code: the interpreter lets another thread
  // take the GIL between two bytecodes, and a thread that runs pops the
  // frames being walked (a crash, seen while the main thread imported).
  // So the garbage collector, whose finalizers are Python, is off for the
  // look, and threads' ids are read from their __dict__, not through
  // Thread.native_id, a property.
  void look(uint64_t start, uint64_t end) {
#if PY_VERSION_HEX >= 0x030B0000
    int gc_was_on = PyGC_Disable();
    look_without_python(start, end);
    if (gc_was_on) PyGC_Enable();
#else
    (void)start;
    (void)end;
#endif
  }

  void look_without_python(uint64_t start, uint64_t end) {
#if PY_VERSION_HEX >= 0x030B0000
    PyObject* frames = current_frames();  // a new reference: {thread ident: innermost frame}
    if (frames == nullptr) return;
    unsigned long me = PyThread_get_thread_ident();
    Py_ssize_t at = 0;
    PyObject *ident_object = nullptr, *frame = nullptr;
    while (PyDict_Next(frames, &at, &ident_object, &frame)) {
      unsigned long ident = PyLong_AsUnsignedLong(ident_object);
      if (PyErr_Occurred() != nullptr) {
        PyErr_Clear();
        continue;
      }
      if (ident == me || !PyFrame_Check(frame)) continue;
      uint32_t tid = native_id_of(ident_object);
      if (tid == 0) continue;  // not a thread threading knows: no OS id to give its sample
      bool main = tid == main_tid_;
      if (main && !main_due_) continue;  // it sampled itself since the ask
      const char* stack = stack_of(reinterpret_cast<PyFrameObject*>(frame));
      if (main) {
        record_main(stack);
        continue;
      }
      uint64_t cpu_wait = cpu_wait_since_last(tid);
      if (stack != nullptr && start != 0 && end > start)
        detail::record_stack_sample(tid, start, end, stack, cpu_wait);
    }
    Py_DECREF(frames);
#else
    (void)start;
    (void)end;
#endif
  }

  // With the GIL: sys._current_frames(), or null (the error cleared).
  static PyObject* current_frames() {
    PyObject* function = PySys_GetObject("_current_frames");  // borrowed
    PyObject* frames = function != nullptr ? PyObject_CallNoArgs(function) : nullptr;
    if (frames == nullptr || !PyDict_Check(frames)) {
      Py_XDECREF(frames);
      PyErr_Clear();
      return nullptr;
    }
    return frames;
  }

  // With the GIL: the OS id of the thread whose threading ident is
  // `ident` (threading's table of live threads, threading._active, read
  // at each look: an ended thread's ident is reused by the next), 0 when
  // threading does not know it.
  static uint32_t native_id_of(PyObject* ident) {
    PyObject* threading = PyImport_GetModule(threading_name());  // a new reference, or null
    PyObject* active = threading != nullptr ? PyObject_GetAttrString(threading, "_active") : nullptr;
    PyObject* thread =
        active != nullptr && PyDict_Check(active) ? PyDict_GetItemWithError(active, ident) : nullptr;
    // Thread.native_id is a property (Python code): its attribute instead.
    PyObject* attributes = thread != nullptr ? PyObject_GenericGetDict(thread, nullptr) : nullptr;
    PyObject* native = attributes != nullptr && PyDict_Check(attributes)
                           ? PyDict_GetItemWithError(attributes, native_id_name())  // borrowed
                           : nullptr;
    uint32_t tid =
        native != nullptr && PyLong_Check(native) ? static_cast<uint32_t>(PyLong_AsUnsignedLong(native)) : 0;
    Py_XDECREF(attributes);
    Py_XDECREF(active);
    Py_XDECREF(threading);
    PyErr_Clear();
    return tid;
  }
  static PyObject* threading_name() {
    static PyObject* name = PyUnicode_InternFromString("threading");  // kept for the process's life
    return name;
  }
  static PyObject* native_id_name() {
    static PyObject* name = PyUnicode_InternFromString("_native_id");  // kept for the process's life
    return name;
  }

  // One pending call at a time: a main thread blocked outside Python runs
  // it when it comes back (its sample then stands for the whole wait).
  // The main thread's wait for a CPU is read here, on the sampler's
  // thread, at each ask: its samples stand for the time between two asks,
  // and the training thread is spared the read (5 us).
  void ask_main_thread(uint64_t now) {
    main_wait_at_ask_ = run_queue_wait_ns(main_tid_);
    main_asked_at_ = now;
    main_due_ = true;
    if (main_queued_.exchange(true)) return;  // a call still pending answers this ask too
    if (Py_AddPendingCall(&StackSampler::sample_main_thread, this) != 0) main_queued_ = false;  // queue full
  }

  // With the GIL: the main thread's sample due for the time from the
  // previous ask to the last one.
  void record_main(const char* stack) {
    main_due_ = false;
    uint64_t end = main_asked_at_, start = main_previous_.exchange(end);
#if PY_VERSION_HEX >= 0x030B0000
    uint64_t wait_end = main_wait_at_ask_, wait_start = main_wait_at_answer_.exchange(wait_end);
    uint64_t cpu_wait = wait_start != 0 && wait_end > wait_start ? wait_end - wait_start : 0;
    if (stack != nullptr && start != 0 && end > start && detail::host_recording())
      detail::record_stack_sample(main_tid_, start, end, stack, cpu_wait);
#endif
  }

  // In the main thread, with the GIL, at a bytecode boundary.
  static int sample_main_thread(void* self) {
    auto* s = static_cast<StackSampler*>(self);
    s->main_queued_ = false;
    if (!s->main_due_) return 0;  // the sampler read it, blocked, already
    const char* stack = nullptr;
    if (PyFrameObject* frame = PyThreadState_GetFrame(PyThreadState_Get())) {
      stack = s->stack_of(frame);
      Py_DECREF(frame);
    }
    s->record_main(stack);
    return 0;
  }

  // The stack's text, interned, looked up by a hash of its frames' code
  // objects and lines: a repeated stack is a walk and a lookup.
  const char* stack_of(PyFrameObject* innermost) {
    uint64_t h = 0;
    int depth = 0;
    PyFrameObject* frame = innermost;
    Py_INCREF(frame);
    for (; frame != nullptr && depth < kMaxFrames; ++depth) {
      PyCodeObject* code = PyFrame_GetCode(frame);
      h = mix(mix(h, reinterpret_cast<uintptr_t>(code)), static_cast<uint64_t>(PyFrame_GetLineNumber(frame)));
      Py_DECREF(code);
      PyFrameObject* back = PyFrame_GetBack(frame);
      Py_DECREF(frame);
      frame = back;
    }
    Py_XDECREF(frame);
    if (auto it = stacks_.find(h); it != stacks_.end()) return it->second;
    bool keep = stacks_.size() < kMaxStacks;
    const char* interned = format(innermost, keep ? kMaxFrames : 8, keep);
    if (keep) stacks_.emplace(h, interned);
    return interned;
  }

  // "file(line): function" frames, innermost first, joined by ';'; a
  // generator's (or coroutine's) function ends in " (generator)". `keep`:
  // the code objects stay alive, so that their addresses (in the hash) are
  // not reused by others.
  const char* format(PyFrameObject* innermost, int max_frames, bool keep) {
    std::string text;
    PyFrameObject* frame = innermost;
    Py_INCREF(frame);
    for (int depth = 0; frame != nullptr && depth < max_frames; ++depth) {
      PyCodeObject* code = PyFrame_GetCode(frame);
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      const char* function = PyUnicode_AsUTF8(code->co_name);
      if (file == nullptr || function == nullptr) {
        PyErr_Clear();
      } else if (!own_frame(file)) {
        if (!text.empty()) text += ';';
        text.append(file).append("(").append(std::to_string(PyFrame_GetLineNumber(frame))).append("): ");
        text.append(function);
        if (is_generator(code)) text += " (generator)";
      }
      if (keep) {
        kept_codes_.push_back(reinterpret_cast<PyObject*>(code));  // the reference is kept
      } else {
        Py_DECREF(code);
      }
      PyFrameObject* back = PyFrame_GetBack(frame);
      Py_DECREF(frame);
      frame = back;
    }
    Py_XDECREF(frame);
    return text.empty() ? nullptr : detail::intern(text);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  pid_t owner_ = 0;
  int users_ = 0;
  uint32_t interval_ms_ = 10;
  bool stopping_ = false;
  uint32_t main_tid_ = 0;
  std::atomic<bool> main_queued_{false};          // a pending call is queued
  std::atomic<bool> main_due_{false};             // a sample is due (asked, not yet taken)
  std::atomic<uint64_t> main_asked_at_{0};        // when the last ask was made
  std::atomic<uint64_t> main_previous_{0};        // the main thread's previous look; 0: none while recording
  std::atomic<uint64_t> main_wait_at_ask_{0};     // its run-queue wait at the last ask
  std::atomic<uint64_t> main_wait_at_answer_{0};  // its run-queue wait at the ask its last sample ends at
  // The sampler thread's and the main thread's, under the GIL.
  std::unordered_map<uint64_t, const char*> stacks_;
  std::vector<PyObject*> kept_codes_;
  std::unordered_map<uint32_t, uint64_t> waited_at_;  // tid -> its run-queue wait at the last look
};

StackSampler& sampler() {
  static StackSampler* s = new StackSampler();  // a thread may outlive static destructors
  return *s;
}

}  // namespace

void bind_stack_sampler(nb::module_& m) {
  m.def(
      "acquire_stack_sampler",
      [](uint32_t interval_ms, uint32_t main_tid) { return sampler().acquire(interval_ms, main_tid); },
      "interval_ms"_a, "main_tid"_a);
  m.def("release_stack_sampler", [] {
    nb::gil_scoped_release unlocked;
    sampler().release();
  });
}

}  // namespace trainprof::python
