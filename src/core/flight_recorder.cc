// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The flight recorder (include/trainprof/flight_recorder.h): a ring session
// (core/session.h), the slow-step trigger, and a thread that writes and
// analyses dumps so that step() never waits for one.
#include "trainprof/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "base/log.h"
#include "base/run_directory.h"
#include "base/safe_file.h"
#include "base/string_format.h"
#include "core/analysis_hook.h"
#include "core/clock.h"
#include "core/comm_progress.h"
#include "core/flight_incident.h"
#include "core/metrics_endpoint.h"
#include "core/out_of_memory.h"
#include "core/session.h"
#include "core/slow_steps.h"
#include "core/step_health.h"
#include "core/thread_stacks.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof {
namespace {

// Set by the dump signal's handler, read by the recorder's thread: a
// handler may only touch atomics.
std::atomic<bool> g_dump_signalled{false};
struct sigaction g_previous_dump_action;

void on_dump_signal(int sig, siginfo_t* info, void* context) {
  g_dump_signalled.store(true);
  // A handler the program had keeps running; a default (ending the process) does not.
  const struct sigaction& prev = g_previous_dump_action;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
}

// std::terminate under a recorder: what it said, for the dump at the abort()
// that follows (a static buffer: the crash path reads it without locks).
char g_terminate_text[512];
std::atomic<bool> g_terminated{false};
std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void on_terminate() {
  std::string what = "no exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of a type not derived from std::exception";
    }
  }
  std::snprintf(g_terminate_text, sizeof(g_terminate_text), "%s", what.c_str());
  g_terminated.store(true);
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();  // the crash handler dumps the ring
}

std::string signal_name(int sig) {
  const char* abbrev = sig > 0 ? sigabbrev_np(sig) : nullptr;
  return abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
}

constexpr uint64_t kExternalDumpIntervalNs = 1'000'000'000;

// The recorder whose ring an out-of-memory error writes (a
// FlightRecorder::State, one at a time), with its process: a fork() child's
// failure takes no lock its parent's threads may have held.
std::mutex g_oom_mu;
void* g_oom_recorder = nullptr;
std::atomic<pid_t> g_oom_pid{0};
// A failure within that dump's own work does not come back to it.
thread_local bool t_in_oom_dump = false;
constexpr uint64_t kSlowStepJoinWaitNs = 10'000'000'000;

std::string format_ms(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f ms", static_cast<double>(ns) / 1e6);
  return text;
}

// The triggers of a step's numbers (a loss or gradients gone wrong).
bool is_numbers_trigger(std::string_view name) {
  return name == "non_finite_loss" || name == "non_finite_gradients" || name == "loss_spike";
}

// Automatic triggers that fire alike on every rank of a job (each rank sees
// the same slow step, hang or loss): one incident each, however many ranks
// announce it.
bool fires_alike_on_every_rank(std::string_view name) {
  return name == "slow_step" || name == "hang" || is_numbers_trigger(name);
}

}  // namespace

struct FlightRecorder::State {
  FlightRecorderOptions options;
  pid_t owner_pid = 0;  // a fork() child has no recorder thread and records nothing
  uint64_t started_realtime_ns = 0;
  std::shared_ptr<Session> session;
  std::string worker_name;

  std::mutex step_mu;  // the training thread's side
  int64_t step_num = 0;
  uint64_t step_start_ticks = 0;
  // The open step began when recording did: the start-up phase (imports,
  // set-up, the first batch), not a step: flagged for the analysis and
  // kept out of the slow-step median.
  bool step_began_at_start = true;
  std::unique_ptr<core::SlowSteps> slow_steps;
  std::unique_ptr<core::HealthSeries> health;
  // Wrong numbers: the first step whose loss this rank saw non-finite (-1:
  // none) and its value; whether each non-finite trigger fired (here or in
  // another rank's incident); the window's finite losses, for spikes.
  int64_t first_non_finite_loss_step = -1;
  double first_non_finite_loss = 0;
  bool non_finite_loss_dumped = false;
  bool non_finite_gradients_dumped = false;
  std::deque<double> recent_losses;
  uint64_t last_loss_spike_dump_ns = 0;
  // Under step_mu: a trigger for the dumper thread.
  void queue_dump(nlohmann::json trigger);
  // Under step_mu: a trigger of step `step`, queued once that step has
  // ended (so the dump holds it whole), or after kSlowStepJoinWaitNs.
  void queue_after_step(nlohmann::json trigger, int64_t step);
  // Under step_mu: those whose step ended by `ended` or whose wait is over (all: `all`).
  void release_after_step(int64_t ended, bool all);
  struct AfterStep {
    nlohmann::json trigger;
    int64_t step;
    uint64_t deadline_ns;
  };
  std::vector<AfterStep> after_step;
  void check_loss(int64_t step, double value);
  core::HealthLabels labels;

  // The dumper thread and its queue.
  std::mutex dump_mu;
  std::condition_variable dump_cv;
  std::deque<nlohmann::json> pending;  // trigger descriptions
  size_t in_progress = 0;
  bool stopping = false;
  std::vector<FlightDump> done;
  std::map<std::string, uint64_t> dumps_by_trigger;
  std::thread dumper;
  uint64_t last_metrics_write_ns = 0;  // monotonic, the recorder's thread's
  bool metrics_write_failed = false;   // said once
  std::unique_ptr<core::MetricsEndpoint> endpoint;

  int installed_signal = 0;                        // the dump signal whose handler is ours
  std::atomic<uint64_t> last_external_dump_ns{0};  // monotonic, of the last signal or file dump
  // The hang watchdog: when the last step ended (monotonic ns, 0: no step
  // yet) and its number, written by step(), read by the recorder's thread.
  std::atomic<uint64_t> last_step_end_ns{0};
  std::atomic<int64_t> steps_ended{0};
  std::atomic<int64_t> hang_dumped_after{-1};  // steps_ended when the last hang dump fired

  // All ranks (options.all_ranks): the board where they meet, made once the
  // world has several ranks; what this rank took part in; the incidents it
  // announced whose cluster pass it runs when a rank never dumps.
  std::mutex incident_mu;
  std::unique_ptr<core::IncidentBoard> board;
  int rank = 0;
  int world_size = 1;
  std::set<std::string> incidents_taken;
  std::vector<std::pair<core::Incident, uint64_t>> awaiting_cluster;  // with its deadline, monotonic ns
  // Peers' slow-step incidents whose step this rank has not finished yet
  // (the recorder's thread's own).
  std::vector<std::pair<core::Incident, uint64_t>> deferred;  // with its deadline, monotonic ns

  // nullopt: the trigger is one this rank dumped already, in an incident of
  // all ranks. `follow_up_here` false: the dump's analysis and its
  // incident's cluster pass are left to the recorder's thread.
  std::optional<FlightDump> write_dump(nlohmann::json trigger, bool follow_up_here = true);
  // Under incident_mu: the board, once the world has several ranks
  // (`at_start`: as the recorder starts, when the launcher said so).
  void update_board(bool at_start = false);
  // Which incident a dump belongs to; sets `incident` and rewrites `trigger`
  // (a peer's incident says who announced it). kLocal: this rank alone.
  enum class Part { kLocal, kIncident, kSkip };
  Part join_incident(nlohmann::json* trigger, core::Incident* incident);
  // What comes after a dump is written: its analysis, and for an incident
  // of all ranks the cluster pass when this rank is the last.
  struct FollowUp {
    std::string run_dir;
    Part part = Part::kLocal;
    core::Incident incident;
  };
  void follow_up(const FollowUp& f);
  std::deque<FollowUp> follow_ups;  // under dump_mu: the recorder's thread's to do
  // An allocation failed (core/out_of_memory.h): the ring is written on the
  // failing thread before the error goes on, since the error may end the
  // process; at most once per cooldown_s.
  void out_of_memory(uint64_t bytes, uint64_t device, const char* operator_name);
  std::atomic<uint64_t> last_oom_dump_ns{0};  // monotonic; 0: none yet
  std::atomic<int64_t> oom_dumped_step{-1};   // steps_ended at the last out-of-memory dump
  std::optional<FlightDump> oom_dump;         // under dump_mu: the last one written
  // A peer's incident (its trigger) served this rank's own of the same kind.
  void absorb(const nlohmann::json& theirs);
  // Incidents other ranks announced, queued as dumps.
  void poll_incidents();
  // After this rank's dump of an incident: the cluster pass when it is the last.
  void incident_dumped(const core::Incident& incident);
  void check_awaiting_cluster(bool stopping);
  void run_cluster(const core::Incident& incident, const std::string& why);
  // The "incident" object of a dump's flight_recorder.
  nlohmann::json incident_json(const core::Incident& incident) const;
  std::string take_hang_stacks();
  void dumper_loop();
  // The signal's or the file's request, when one came.
  void check_requests();
  // No step for hang_timeout_s: one dump per hang.
  void check_hang();
  // The metrics file, every metrics_interval_s.
  void write_metrics_file();
  std::string metrics_text();
  // The "flight_recorder" object of a dump at a signal that ends the
  // process, announced to the other ranks (then crash_incident is set).
  Session::CrashDump crash_trigger(int sig);
  std::optional<core::Incident> crash_incident;
  void crash_dumped(const std::string& run_dir);
};

Session::CrashDump FlightRecorder::State::crash_trigger(int sig) {
  int64_t step = steps_ended.load();
  nlohmann::json t = {{"signal", signal_name(sig)}, {"step", step}};
  std::string during = " during step " + std::to_string(step);
  if (sig == SIGABRT && g_terminated.load()) {
    t["trigger"] = "terminate";
    t["reason"] = "std::terminate (" + std::string(g_terminate_text) + ")" + during;
  } else if (sig == SIGTERM || sig == SIGINT) {
    t["trigger"] = "terminated";
    t["reason"] = signal_name(sig) + " ended the process" + during;
  } else {
    t["trigger"] = "crash";
    t["reason"] = signal_name(sig) + " (a crash)" + during;
  }
  // The other ranks dump too. The crashed thread may hold the lock (it
  // crashed announcing): then this rank dumps alone.
  std::unique_lock<std::mutex> lock(incident_mu, std::try_to_lock);
  if (!lock.owns_lock()) return {t.dump(), ""};
  update_board();
  if (!board) return {t.dump(), ""};
  // Ended because another rank's crash ended the job (its launcher's
  // SIGTERM): this dump belongs to that rank's incident, not a new one.
  core::Incident incident;
  for (core::Incident& fresh : board->poll()) {
    if (incidents_taken.count(fresh.key) == 0) incident = std::move(fresh);
  }
  std::string error;
  if (incident.key.empty() && !board->announce(core::IncidentBoard::key_of(t), t, &incident, &error)) {
    return {t.dump(), ""};
  }
  t["incident"] = incident_json(incident);
  crash_incident = incident;
  return {t.dump(), incident.dir};
}

void FlightRecorder::State::crash_dumped(const std::string& run_dir) {
  // The cluster pass is left to the other ranks: this process is ending.
  if (crash_incident && !run_dir.empty()) board->note_dumped(*crash_incident);
}

nlohmann::json FlightRecorder::State::incident_json(const core::Incident& incident) const {
  return {{"key", incident.key},
          {"dir", incident.dir},
          {"announced_by", incident.announced_by},
          {"step", incident.trigger.value("step", nlohmann::json())},
          {"rank", rank},
          {"world_size", world_size}};
}

// The hang stacks file's text, once its writer has written it (up to 1 s);
// the file is emptied for the next hang (its writer appends).
std::string FlightRecorder::State::take_hang_stacks() {
  const std::string& path = options.hang_stacks_file;
  std::string text;
  for (int waited_ms = 0; waited_ms <= 1000; waited_ms += 50) {
    text = base::read_regular_file_at(AT_FDCWD, path, /*follow=*/false);
    if (!text.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!text.empty() && ::truncate(path.c_str(), 0) != 0) {
    base::log_warning("flight recorder: cannot empty '" + path + "': " + std::strerror(errno));
  }
  return text;
}

std::optional<FlightDump> FlightRecorder::State::write_dump(nlohmann::json trigger, bool follow_up_here) {
  core::Incident incident;
  Part part = join_incident(&trigger, &incident);
  if (part == Part::kSkip) return std::nullopt;
  if (uint64_t last = last_step_end_ns.load(); last != 0)
    trigger["since_last_step_ns"] = detail::monotonic_now_ns() - last;
  if (std::vector<core::GroupProgress> groups = core::comm_progress(); !groups.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const core::GroupProgress& g : groups) {
      list.push_back({{"group", g.group},
                      {"entered", g.entered},
                      {"entered_name", g.entered_name},
                      {"entered_realtime_ns", g.entered_realtime_ns},
                      {"returned", g.returned}});
    }
    trigger["collectives"] = std::move(list);
  }
  FlightDump d;
  d.trigger = trigger.value("trigger", "");
  d.reason = trigger.value("reason", "");
  std::shared_ptr<Session> recording;
  {
    std::lock_guard<std::mutex> lock(step_mu);
    recording = session;
  }
  if (!recording) {
    d.error = "the flight recorder is not recording";
    return d;
  }
  std::vector<std::pair<std::string, std::string>> extra_files;
  {
    std::lock_guard<std::mutex> lock(step_mu);
    if (health) extra_files.emplace_back("step_health.csv", health->csv());
    if (first_non_finite_loss_step >= 0) {
      trigger["first_non_finite_loss"] = {{"step", first_non_finite_loss_step},
                                          {"value", core::number_text(first_non_finite_loss)}};
    }
  }
  if (d.trigger == "hang" && options.hang_native_stacks) {
    std::string stacks = core::take_thread_stacks();
    if (!stacks.empty()) extra_files.emplace_back("native_stacks.txt", std::move(stacks));
  }
  if (d.trigger == "hang" && !options.hang_stacks_file.empty()) {
    std::string stacks = take_hang_stacks();
    if (!stacks.empty()) extra_files.emplace_back("hang_stacks.txt", std::move(stacks));
  }
  d.run_dir = recording->dump(trigger.dump(), &d.error, extra_files,
                              part == Part::kIncident ? incident.dir : std::string());
  if (d.run_dir.empty()) {
    base::log_error("flight recorder: the dump for '" + d.reason + "' could not be written: " + d.error +
                    "; recording goes on");
    return d;
  }
  base::log_info("flight recorder: " + d.reason + ": the last steps are in '" + d.run_dir + "'");
  {
    std::lock_guard<std::mutex> lock(dump_mu);
    ++dumps_by_trigger[d.trigger];
  }
  FollowUp next{d.run_dir, part, incident};
  if (follow_up_here) {
    follow_up(next);
  } else {
    std::lock_guard<std::mutex> lock(dump_mu);
    follow_ups.push_back(std::move(next));
    dump_cv.notify_all();
  }
  return d;
}

void FlightRecorder::State::follow_up(const FollowUp& f) {
  if (options.analyse) {
    AnalyseReport report = core::analyse_through_hook(f.run_dir, AnalyseOptions{});
    if (!report.error.empty())
      base::log_warning("flight recorder: analysing '" + f.run_dir + "': " + report.error);
  }
  if (f.part == Part::kIncident) incident_dumped(f.incident);
}

void FlightRecorder::State::out_of_memory(uint64_t bytes, uint64_t device, const char* operator_name) {
  if (getpid() != owner_pid) return;  // a fork() child writes no dump of its parent's ring
  uint64_t now = detail::monotonic_now_ns();
  uint64_t last = last_oom_dump_ns.load();
  if (last != 0 && now - last < static_cast<uint64_t>(options.cooldown_s * 1e9)) return;
  last_oom_dump_ns.store(now);
  int64_t step = steps_ended.load();
  nlohmann::json trigger = {
      {"trigger", "out_of_memory"},
      {"reason", "an allocation of " + std::to_string(bytes) + " bytes on " +
                     raw::memory_device_name(device) + " failed" +
                     (operator_name != nullptr ? std::string(" in ") + operator_name : std::string()) +
                     " during step " + std::to_string(step)},
      {"step", step},
      {"bytes", bytes}};
  std::optional<FlightDump> d = write_dump(std::move(trigger), /*follow_up_here=*/false);
  if (!d) return;
  oom_dumped_step.store(step);
  std::lock_guard<std::mutex> lock(dump_mu);
  if (!d->run_dir.empty()) oom_dump = *d;
  done.push_back(std::move(*d));
}

void FlightRecorder::State::update_board(bool at_start) {
  if (board || !options.all_ranks) return;
  base::RankInfo info = base::detect_rank();
  if (info.world_size <= 1) return;
  rank = info.rank;
  world_size = info.world_size;
  board = std::make_unique<core::IncidentBoard>(options.profiler.output_path, rank,
                                                at_start ? 0 : started_realtime_ns);
}

FlightRecorder::State::Part FlightRecorder::State::join_incident(nlohmann::json* trigger,
                                                                 core::Incident* incident) {
  std::lock_guard<std::mutex> lock(incident_mu);
  update_board();
  if (!board) return Part::kLocal;
  auto joined = trigger->find("join");
  if (joined != trigger->end()) {  // a peer's, from poll_incidents()
    incident->key = joined->value("key", "");
    incident->dir = joined->value("dir", "");
    incident->announced_by = joined->value("announced_by", -1);
    incident->trigger = joined->value("trigger", nlohmann::json::object());
    trigger->erase("join");
  } else {
    std::string key = core::IncidentBoard::key_of(*trigger);
    if (incidents_taken.count(key) != 0) {
      // Automatic triggers that fire alike on every rank are dumped once per
      // incident; a request asked twice in a step is a second incident.
      if (fires_alike_on_every_rank(trigger->value("trigger", ""))) return Part::kSkip;
      int n = 1;
      while (incidents_taken.count(key + "." + std::to_string(n)) != 0) ++n;
      key += "." + std::to_string(n);
    }
    std::string error;
    if (!board->announce(key, *trigger, incident, &error)) {
      base::log_warning("flight recorder: the other ranks cannot be told of this dump (" + error +
                        "); this rank dumps on its own");
      return Part::kLocal;
    }
  }
  if (!incidents_taken.insert(incident->key).second) return Part::kSkip;
  if (incident->announced_by != rank) {
    std::string theirs = incident->trigger.value("trigger", "");
    absorb(incident->trigger);
    (*trigger)["trigger"] = theirs;
    (*trigger)["reason"] =
        "rank " + std::to_string(incident->announced_by) + ": " + incident->trigger.value("reason", "");
    (*trigger)["step"] = steps_ended.load();
  }
  (*trigger)["incident"] = incident_json(*incident);
  return Part::kIncident;
}

void FlightRecorder::State::absorb(const nlohmann::json& theirs) {
  uint64_t now = detail::monotonic_now_ns();
  std::string trigger_name = theirs.value("trigger", "");
  if (trigger_name == "slow_step") {
    std::lock_guard<std::mutex> lock(step_mu);
    int64_t last_step = theirs.value("last_step", theirs.value("step", int64_t{-1}));
    if (slow_steps) slow_steps->absorb(last_step, now);
  } else if (trigger_name == "hang") {
    hang_dumped_after.store(steps_ended.load());
  } else if (is_numbers_trigger(trigger_name)) {
    std::lock_guard<std::mutex> lock(step_mu);
    if (trigger_name == "non_finite_loss") non_finite_loss_dumped = true;
    if (trigger_name == "non_finite_gradients") non_finite_gradients_dumped = true;
    if (trigger_name == "loss_spike") last_loss_spike_dump_ns = now;
  } else if (trigger_name == "signal" || trigger_name == "file") {
    // A request sent to every rank (kill -USR1 to all of them) is one incident.
    last_external_dump_ns.store(now);
    g_dump_signalled.store(false);
    if (!options.dump_file.empty()) ::unlink(options.dump_file.c_str());
  }
}

void FlightRecorder::State::poll_incidents() {
  std::vector<core::Incident> fresh;
  {
    std::lock_guard<std::mutex> lock(incident_mu);
    update_board();
    if (!board) return;
    for (core::Incident& incident : board->poll()) {
      if (incidents_taken.count(incident.key) == 0) fresh.push_back(std::move(incident));
    }
  }
  // A slow step is dumped by every rank once it finished that step too (it
  // waited in it for the slow rank): then every dump holds the step whole.
  // A rank that does not finish it within kSlowStepJoinWaitNs dumps anyway.
  uint64_t now = detail::monotonic_now_ns();
  // So are the triggers of a step's numbers (a loss that went wrong).
  auto slow = std::stable_partition(fresh.begin(), fresh.end(), [](const core::Incident& i) {
    return i.trigger.value("trigger", "") != "slow_step" && !i.trigger.contains("loss_step");
  });
  for (auto it = slow; it != fresh.end(); ++it)
    deferred.emplace_back(std::move(*it), now + kSlowStepJoinWaitNs);
  fresh.erase(slow, fresh.end());
  int64_t finished = steps_ended.load();
  for (auto it = deferred.begin(); it != deferred.end();) {
    const nlohmann::json& t = it->first.trigger;
    int64_t step =
        t.value("last_step", t.value("loss_step", t.value("step", int64_t{-1})));  // a burst's last
    if (finished > step || now >= it->second) {
      fresh.push_back(std::move(it->first));
      it = deferred.erase(it);
    } else {
      ++it;
    }
  }
  if (fresh.empty()) return;
  std::lock_guard<std::mutex> lock(dump_mu);
  for (const core::Incident& incident : fresh) {
    pending.push_back({{"trigger", incident.trigger.value("trigger", "")},
                       {"reason", incident.trigger.value("reason", "")},
                       {"join",
                        {{"key", incident.key},
                         {"dir", incident.dir},
                         {"announced_by", incident.announced_by},
                         {"trigger", incident.trigger}}}});
  }
}

void FlightRecorder::State::incident_dumped(const core::Incident& incident) {
  bool last;
  {
    std::lock_guard<std::mutex> lock(incident_mu);
    last = board->mark_dumped(incident, world_size);
    // Watched until every rank has dumped (a crashed rank's dump may come
    // last, and its process cannot run the pass), or incident_wait_s.
    if (!last) {
      uint64_t wait_ns = static_cast<uint64_t>(std::max(options.incident_wait_s, 0.0) * 1e9);
      awaiting_cluster.emplace_back(incident, detail::monotonic_now_ns() + wait_ns);
    }
  }
  if (last) run_cluster(incident, "all " + std::to_string(world_size) + " ranks dumped");
}

void FlightRecorder::State::check_awaiting_cluster(bool stopping) {
  // (incident, what to say): the passes this rank claimed.
  std::vector<std::pair<core::Incident, std::string>> claimed;
  {
    std::lock_guard<std::mutex> lock(incident_mu);
    uint64_t now = detail::monotonic_now_ns();
    for (auto it = awaiting_cluster.begin(); it != awaiting_cluster.end();) {
      const core::Incident& incident = it->first;
      auto dumped = static_cast<int>(core::IncidentBoard::dumped_ranks(incident).size());
      std::string counted = std::to_string(dumped) + " of " + std::to_string(world_size) + " ranks dumped";
      if (dumped >= world_size) {
        if (core::IncidentBoard::claim_cluster(incident)) claimed.emplace_back(incident, "all " + counted);
      } else if (stopping) {
        if (incident.announced_by == rank) {
          base::log_warning("flight recorder: " + counted + " '" + incident.dir +
                            "' when this recorder stopped: run `trainprof cluster " + incident.dir +
                            "` once they have");
        }
      } else if (now < it->second) {
        ++it;
        continue;  // waited for
      } else if (core::IncidentBoard::claim_cluster(incident)) {
        std::string waited = format_ms(static_cast<uint64_t>(options.incident_wait_s * 1e9));
        claimed.emplace_back(incident, counted + " within " + waited);
      }
      it = awaiting_cluster.erase(it);
    }
  }
  for (const auto& [incident, why] : claimed) run_cluster(incident, why);
}

void FlightRecorder::State::run_cluster(const core::Incident& incident, const std::string& why) {
  if (!options.analyse) return;
  ClusterReport report = core::cluster_through_hook(incident.dir);
  if (!report.ok()) {
    base::log_warning("flight recorder: the cluster analysis of '" + incident.dir + "' (" + why +
                      "): " + report.error);
    return;
  }
  std::string straggler = report.straggler >= 0 ? "; straggler: rank " + std::to_string(report.straggler) +
                                                      " (" + report.cause + ")"
                                                : "";
  base::log_info("flight recorder: " + why + "; the cluster analysis is in '" + report.output_dir + "'" +
                 straggler);
}

void FlightRecorder::State::check_requests() {
  bool signalled = installed_signal != 0 && g_dump_signalled.load();
  struct stat st;
  bool touched = !options.dump_file.empty() && ::stat(options.dump_file.c_str(), &st) == 0;
  if (!signalled && !touched) return;
  // A storm of requests (a script sending the signal in a loop) costs one
  // dump a second at most, each writing the whole ring: the requests that
  // come within a second of a dump wait for the next, as one.
  uint64_t now = detail::monotonic_now_ns();
  uint64_t last = last_external_dump_ns.load();
  if (last != 0 && now - last < kExternalDumpIntervalNs) return;
  last_external_dump_ns.store(now);
  if (signalled) g_dump_signalled.store(false);
  if (touched && !signalled) ::unlink(options.dump_file.c_str());  // one touch, one dump
  if (signalled) {
    pending.push_back({{"trigger", "signal"}, {"reason", signal_name(installed_signal) + " received"}});
  } else {
    pending.push_back({{"trigger", "file"}, {"reason", "'" + options.dump_file + "' appeared"}});
  }
}

void FlightRecorder::State::check_hang() {
  uint64_t last = last_step_end_ns.load();
  if (options.hang_timeout_s <= 0 || last == 0) return;
  int64_t ended = steps_ended.load();
  if (ended == hang_dumped_after.load()) return;  // this hang was dumped; the next step re-arms
  uint64_t now = detail::monotonic_now_ns();
  double waited_s = static_cast<double>(now - last) / 1e9;
  if (waited_s < options.hang_timeout_s) return;
  hang_dumped_after.store(ended);
  char waited[32];
  std::snprintf(waited, sizeof(waited), "%.1f s", waited_s);
  pending.push_back({{"trigger", "hang"},
                     {"reason", "no step ended for " + std::string(waited) + ": step " +
                                    std::to_string(ended) + " has not finished"},
                     {"step", ended},
                     {"waited_ns", now - last},
                     {"timeout_s", options.hang_timeout_s}});
}

std::string FlightRecorder::State::metrics_text() {
  core::StepHealth totals, last;
  uint64_t median = 0;
  {
    std::lock_guard<std::mutex> lock(step_mu);  // the training thread's: only what the text needs is copied
    if (!health) return "";
    totals = health->totals();
    last = health->last();
    if (slow_steps) median = slow_steps->median_ns();
  }
  std::map<std::string, uint64_t> dumped;
  {
    std::lock_guard<std::mutex> lock(dump_mu);
    dumped = dumps_by_trigger;
  }
  return core::prometheus_text(totals, last, labels, median, dumped);
}

void FlightRecorder::State::write_metrics_file() {
  const std::string& path = options.metrics_file;
  uint64_t now = detail::monotonic_now_ns();
  if (path.empty() ||
      (last_metrics_write_ns != 0 &&
       now - last_metrics_write_ns < static_cast<uint64_t>(options.metrics_interval_s * 1e9))) {
    return;
  }
  last_metrics_write_ns = now;
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  base::UniqueFd dir_fd(base::open_directory_at(AT_FDCWD, dir));
  std::string error = dir_fd.valid()
                          ? base::write_file_atomically_at(dir_fd.get(), name, metrics_text(), path, 0644)
                          : "cannot open the directory '" + dir + "': " + std::strerror(errno);
  if (!error.empty() && !metrics_write_failed) {
    base::log_error("flight recorder: the metrics file: " + error + "; recording goes on (said once)");
  }
  metrics_write_failed = !error.empty();
}

void FlightRecorder::State::dumper_loop() {
  std::unique_lock<std::mutex> lock(dump_mu);
  for (;;) {
    while (!dump_cv.wait_for(lock, std::chrono::milliseconds(100),
                             [&] { return stopping || !pending.empty() || !follow_ups.empty(); })) {
      check_requests();
      check_hang();
      lock.unlock();  // step() may queue a dump meanwhile
      {
        std::lock_guard<std::mutex> step_lock(step_mu);  // before dump_mu, as step() takes them
        if (!after_step.empty()) release_after_step(-1, false);
      }
      write_metrics_file();
      poll_incidents();
      check_awaiting_cluster(/*stopping=*/false);
      lock.lock();
    }
    if (!follow_ups.empty()) {  // a dump written on another thread: its analysis
      FollowUp next = std::move(follow_ups.front());
      follow_ups.pop_front();
      ++in_progress;
      lock.unlock();
      follow_up(next);
      lock.lock();
      --in_progress;
      dump_cv.notify_all();
      continue;
    }
    if (pending.empty()) {  // stopping, nothing left
      lock.unlock();
      check_awaiting_cluster(/*stopping=*/true);
      return;
    }
    nlohmann::json trigger = std::move(pending.front());
    pending.pop_front();
    ++in_progress;
    lock.unlock();
    std::optional<FlightDump> d = write_dump(std::move(trigger));
    lock.lock();
    if (d) done.push_back(std::move(*d));
    --in_progress;
    dump_cv.notify_all();
  }
}

FlightRecorder::FlightRecorder(FlightRecorderOptions options) : state_(new State) {
  State& s = *state_;
  s.options = std::move(options);
  if (s.options.profiler.sample_operators == 0) {
    // torch.distributed's calls come through the operator callbacks: a
    // stuck collective and the cluster pass need every one of them. An
    // allocation's site is the operator open around it: an out-of-memory
    // report needs every one too.
    const ProfilerOptions& p = s.options.profiler;
    bool every_call =
        p.profile_communication || p.profiler_level >= ProfilerLevel::Level1 || p.profile_memory;
    s.options.profiler.sample_operators = every_call ? 1 : kFlightRecorderOperatorSampling;
  }
  s.options.slow_step_window = std::max<uint32_t>(s.options.slow_step_window, 1);
  s.slow_steps = std::make_unique<core::SlowSteps>(
      core::SlowStepRule{s.options.slow_step_factor, s.options.slow_step_window,
                         s.options.slow_step_min_steps, s.options.cooldown_s});
  s.owner_pid = getpid();
  s.started_realtime_ns = detail::realtime_now_ns();
  s.worker_name = base::host_name() + "_" + std::to_string(getpid());
  s.session = Session::open_ring(
      s.options.profiler, s.options.ring_mb, s.worker_name, [&s](int sig) { return s.crash_trigger(sig); },
      [&s](const std::string& run_dir) { s.crash_dumped(run_dir); });
  if (!s.session) return;  // said why
  s.labels.rank = base::detect_rank().rank;
  {
    std::lock_guard<std::mutex> lock(s.incident_mu);
    s.update_board(/*at_start=*/true);
  }
  s.labels.pid = static_cast<long>(getpid());
  if (s.options.hang_native_stacks && s.options.hang_timeout_s > 0) core::prepare_thread_stacks();
  s.health = std::make_unique<core::HealthSeries>(s.options.health_steps);
  s.health->start();
  if (s.options.metrics_port >= 0) {
    std::string error;
    auto endpoint = std::make_unique<core::MetricsEndpoint>(
        s.options.metrics_address, s.options.metrics_port, [&s] { return s.metrics_text(); }, &error);
    if (error.empty()) {
      s.endpoint = std::move(endpoint);
      base::log_info("flight recorder: metrics at " + s.endpoint->url());
    } else {
      base::log_error("flight recorder: " + error + "; recording goes on without the endpoint");
    }
  }
  g_terminated.store(false);
  g_previous_terminate = std::set_terminate(on_terminate);
  s.step_start_ticks = detail::now_ticks();
  if (s.options.dump_signal > 0 && s.options.dump_signal < NSIG) {
    struct sigaction sa {};
    sa.sa_sigaction = on_dump_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    g_dump_signalled.store(false);
    if (sigaction(s.options.dump_signal, &sa, &g_previous_dump_action) == 0) {
      s.installed_signal = s.options.dump_signal;
    } else {
      base::log_warning("flight recorder: cannot handle signal " + std::to_string(s.options.dump_signal) +
                        ": " + std::strerror(errno) + "; dumps on request come from dump() and the file");
    }
  }
  s.dumper = std::thread([&s] { s.dumper_loop(); });
  {
    std::lock_guard<std::mutex> lock(g_oom_mu);
    g_oom_recorder = &s;
    g_oom_pid.store(s.owner_pid);
  }
  core::set_out_of_memory_listener([](uint64_t bytes, uint64_t device, const char* operator_name) {
    if (t_in_oom_dump || g_oom_pid.load() != getpid()) return;
    t_in_oom_dump = true;
    try {
      std::lock_guard<std::mutex> lock(g_oom_mu);
      if (g_oom_recorder != nullptr)
        static_cast<State*>(g_oom_recorder)->out_of_memory(bytes, device, operator_name);
    } catch (...) {  // no memory even for the dump's own work: the error goes on as it is
    }
    t_in_oom_dump = false;
  });
}

FlightRecorder::~FlightRecorder() {
  stop();
}

bool FlightRecorder::recording() const {
  if (getpid() != state_->owner_pid) return false;  // a fork() child records nothing
  std::lock_guard<std::mutex> lock(state_->step_mu);
  return state_->session != nullptr && !state_->session->is_closed();
}

int64_t FlightRecorder::step_num() const {
  if (getpid() != state_->owner_pid) return state_->step_num;  // the child's only thread: no lock
  std::lock_guard<std::mutex> lock(state_->step_mu);
  return state_->step_num;
}

void FlightRecorder::step() {
  State& s = *state_;
  // A fork() child: triggers are off. Asked before any lock: the parent's
  // recorder thread may have held one at the fork.
  if (getpid() != s.owner_pid) return;
  std::lock_guard<std::mutex> lock(s.step_mu);
  if (!s.session) return;
  uint64_t end = detail::now_ticks();
  bool start_up = s.step_began_at_start;
  s.step_began_at_start = false;
  Session::record_step(s.step_num, s.step_start_ticks, end, start_up ? raw::kStepStartUp : 0);
  auto duration_ns =
      static_cast<uint64_t>(static_cast<double>(end - s.step_start_ticks) / core::ticks_per_ns());
  int64_t finished = s.step_num++;
  s.step_start_ticks = end;
  const core::StepHealth& health = s.health->on_step(finished, duration_ns);
  std::optional<nlohmann::json> trigger =
      s.slow_steps->on_step(health, s.health->steps(), detail::monotonic_now_ns(), start_up);
  if (trigger) s.queue_dump(std::move(*trigger));
  if (!s.after_step.empty()) s.release_after_step(finished, false);
  s.last_step_end_ns.store(detail::monotonic_now_ns());
  s.steps_ended.store(s.step_num);
}

void FlightRecorder::State::queue_dump(nlohmann::json trigger) {
  std::lock_guard<std::mutex> dump_lock(dump_mu);
  pending.push_back(std::move(trigger));
  dump_cv.notify_all();
}

void FlightRecorder::State::queue_after_step(nlohmann::json trigger, int64_t step) {
  if (step < step_num) {
    queue_dump(std::move(trigger));
    return;
  }
  after_step.push_back({std::move(trigger), step, detail::monotonic_now_ns() + kSlowStepJoinWaitNs});
}

void FlightRecorder::State::release_after_step(int64_t ended, bool all) {
  uint64_t now = detail::monotonic_now_ns();
  for (auto it = after_step.begin(); it != after_step.end();) {
    if (all || it->step <= ended || now >= it->deadline_ns) {
      queue_dump(std::move(it->trigger));
      it = after_step.erase(it);
    } else {
      ++it;
    }
  }
}

void FlightRecorder::State::check_loss(int64_t step, double value) {
  if (!std::isfinite(value)) {
    if (first_non_finite_loss_step < 0) {
      first_non_finite_loss_step = step;
      first_non_finite_loss = value;
    }
    if (!options.check_loss || non_finite_loss_dumped) return;
    non_finite_loss_dumped = true;
    // No step in the key: ranks whose losses go wrong a step apart (a NaN
    // spreads through the gradients' all-reduce) meet in one incident.
    queue_after_step(
        {{"trigger", "non_finite_loss"},
         {"reason", "the loss is " + core::number_text(value) + " at step " + std::to_string(step)},
         {"loss_step", step},
         {"loss", core::number_text(value)}},
        step);
    return;
  }
  const double factor = options.loss_spike_factor;
  if (factor > 0 && recent_losses.size() >= std::max<uint32_t>(options.slow_step_min_steps, 1)) {
    std::vector<double> magnitudes;
    for (double l : recent_losses) magnitudes.push_back(std::fabs(l));
    double median = core::median_of(std::move(magnitudes));
    uint64_t now = detail::monotonic_now_ns();
    bool cooled = last_loss_spike_dump_ns == 0 ||
                  now - last_loss_spike_dump_ns >= static_cast<uint64_t>(options.cooldown_s * 1e9);
    if (median > 0 && std::fabs(value) > factor * median && cooled) {
      last_loss_spike_dump_ns = now;
      queue_after_step(
          {{"trigger", "loss_spike"},
           {"reason", "the loss at step " + std::to_string(step) + " is " + core::number_text(value) + ", " +
                          base::format("%.1f", std::fabs(value) / median) + "x the median of the last " +
                          std::to_string(recent_losses.size()) + " (" + base::format("%.4g", median) + ")"},
           {"step", step},
           {"loss", value},
           {"median_loss", median}},
          step);
    }
  }
  recent_losses.push_back(value);
  if (recent_losses.size() > options.slow_step_window) recent_losses.pop_front();
}

void FlightRecorder::loss(double value, int64_t step) {
  State& s = *state_;
  if (getpid() != s.owner_pid) return;  // before any lock, as in step()
  std::lock_guard<std::mutex> lock(s.step_mu);
  if (!s.session) return;
  if (step < 0) step = s.step_num;
  s.health->set_loss(step, value);
  s.check_loss(step, value);
}

void FlightRecorder::gradient_norm(double value, int64_t step) {
  State& s = *state_;
  if (getpid() != s.owner_pid) return;
  std::lock_guard<std::mutex> lock(s.step_mu);
  if (!s.session) return;
  if (step < 0) step = s.step_num;
  s.health->set_gradient_norm(step, value);
  if (std::isfinite(value) || s.non_finite_gradients_dumped) return;
  s.non_finite_gradients_dumped = true;
  s.queue_after_step(
      {{"trigger", "non_finite_gradients"},
       {"reason", "the gradients' norm is " + core::number_text(value) + " at step " + std::to_string(step)},
       {"loss_step", step},
       {"gradient_norm", core::number_text(value)}},
      step);
}

FlightDump FlightRecorder::dump(std::string_view reason, std::string_view trigger_name) {
  State& s = *state_;
  nlohmann::json trigger = {{"trigger", std::string(trigger_name)}, {"reason", std::string(reason)}};
  FlightDump refused;
  refused.trigger = std::string(trigger_name);
  refused.reason = std::string(reason);
  if (getpid() != s.owner_pid) {  // before any lock, as in step()
    refused.error = "a fork() child does not write its parent's flight recorder";
    return refused;
  }
  {
    std::lock_guard<std::mutex> lock(s.step_mu);
    if (!s.session) {
      refused.error = "the flight recorder is not recording";
      return refused;
    }
    trigger["step"] = s.step_num;  // the step under way
  }
  if (trigger_name == "exception" && s.oom_dumped_step.load() == s.steps_ended.load()) {
    // The exception of an allocation that failed in this step: its dump,
    // written at the failure, holds the same steps.
    std::lock_guard<std::mutex> lock(s.dump_mu);
    if (s.oom_dump) {
      base::log_info("flight recorder: " + std::string(reason) + ": the steps up to it are in '" +
                     s.oom_dump->run_dir + "' (written at the out-of-memory error)");
      return *s.oom_dump;
    }
  }
  std::optional<FlightDump> d = s.write_dump(std::move(trigger));
  if (!d) {  // an automatic trigger's name given to dump(), and dumped already
    refused.error = "this rank dumped this incident already";
    return refused;
  }
  std::lock_guard<std::mutex> lock(s.dump_mu);
  s.done.push_back(*d);
  return *d;
}

std::string FlightRecorder::metrics_url() const {
  if (getpid() != state_->owner_pid) return "";
  return state_->endpoint ? state_->endpoint->url() : "";
}

std::string FlightRecorder::metrics_text() const {
  if (getpid() != state_->owner_pid) return "";
  return state_->metrics_text();
}

std::vector<FlightDump> FlightRecorder::dumps() const {
  std::lock_guard<std::mutex> lock(state_->dump_mu);
  return state_->done;
}

void FlightRecorder::wait_for_dumps() {
  State& s = *state_;
  if (getpid() != s.owner_pid) return;  // no recorder thread here
  std::unique_lock<std::mutex> lock(s.dump_mu);
  s.dump_cv.wait(lock, [&] { return s.pending.empty() && s.follow_ups.empty() && s.in_progress == 0; });
}

void FlightRecorder::stop() {
  State& s = *state_;
  if (getpid() != s.owner_pid) {
    // A fork() child: the recorder thread and the ring are the parent's.
    // The thread's handle names no thread here: forgotten, not joined.
    new (&s.dumper) std::thread();
    // So is the metrics endpoint's thread (and its wake-up descriptor is
    // shared with the parent): the endpoint is forgotten, not ended.
    (void)s.endpoint.release();
    // The parent's recorder thread waited on this condition variable at the
    // fork: its count of waiters would make the destructor wait forever.
    new (&s.dump_cv) std::condition_variable();
    s.session.reset();  // the child's only thread: no lock (one may be held by the parent's threads)
    return;
  }
  {
    std::lock_guard<std::mutex> lock(g_oom_mu);  // waits for an out-of-memory dump under way
    if (g_oom_recorder == &s) {
      g_oom_recorder = nullptr;
      core::set_out_of_memory_listener(nullptr);
    }
  }
  if (s.dumper.joinable()) {
    {
      // Slow steps up to the last one: their burst is written too.
      std::lock_guard<std::mutex> step_lock(s.step_mu);
      std::optional<nlohmann::json> burst;
      if (s.session && s.health) burst = s.slow_steps->flush(s.health->steps(), detail::monotonic_now_ns());
      if (burst) s.queue_dump(std::move(*burst));
      s.release_after_step(s.step_num, /*all=*/true);  // the step they wait for never ends
      std::lock_guard<std::mutex> lock(s.dump_mu);
      s.stopping = true;
      s.dump_cv.notify_all();
    }
    s.dumper.join();  // writes what was triggered first
  }
  s.endpoint.reset();  // before the state it reads goes
  if (!s.options.metrics_file.empty()) {
    s.last_metrics_write_ns = 0;  // the last steps' counts, whatever the interval
    s.write_metrics_file();
  }
  if (std::get_terminate() == on_terminate) std::set_terminate(g_previous_terminate);
  if (s.installed_signal != 0) {  // after the join: the recorder's thread reads it
    sigaction(s.installed_signal, &g_previous_dump_action, nullptr);
    s.installed_signal = 0;
  }
  std::lock_guard<std::mutex> lock(s.step_mu);
  if (s.session) s.session->close("stop");
  s.session.reset();
}

}  // namespace trainprof
