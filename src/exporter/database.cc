// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/database.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "analysis/gpu_launches.h"
#include "exporter/gpu_activity.h"
#include "exporter/sqlite_file.h"
#include "raw/format.h"

namespace trainprof::exporter {
namespace {

// The schema (docs/DB_SCHEMA.md). Times are wall-clock ns (the run's
// realtime anchor applied), so that they compare across ranks.
constexpr const char* kSchema = R"sql(
CREATE TABLE run_info (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE strings (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE threads (tid INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE slice_kinds (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO slice_kinds VALUES (0, 'range'), (1, 'operator'), (2, 'step');
CREATE TABLE steps (
  step INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  computing_ns INTEGER, communication_not_overlapped_ns INTEGER, overlapped_ns INTEGER,
  communication_ns INTEGER, free_ns INTEGER, stage_ns INTEGER, bubble_ns INTEGER,
  communication_not_overlapped_exclude_receive_ns INTEGER, preparing_ns INTEGER, data_wait_ns INTEGER);
CREATE TABLE operator_inputs (
  inputs_id INTEGER PRIMARY KEY, input_shapes TEXT, input_types TEXT, flops INTEGER, call_stack TEXT,
  module TEXT);
CREATE TABLE slices (
  id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  tid INTEGER NOT NULL REFERENCES threads(tid), name_id INTEGER NOT NULL REFERENCES strings(id),
  kind INTEGER NOT NULL REFERENCES slice_kinds(id), backward INTEGER NOT NULL,
  inputs_id INTEGER REFERENCES operator_inputs(inputs_id), step INTEGER REFERENCES steps(step));
CREATE TABLE operator_statistics (
  name TEXT, count INTEGER, total_ns INTEGER, min_ns INTEGER, max_ns INTEGER, self_ns INTEGER,
  ratio_percent REAL, flops INTEGER, core_type TEXT, PRIMARY KEY (name, core_type)) WITHOUT ROWID;
CREATE TABLE memory (
  id INTEGER PRIMARY KEY, ts_ns INTEGER NOT NULL, tid INTEGER REFERENCES threads(tid), address INTEGER,
  bytes INTEGER, total_allocated INTEGER, total_reserved INTEGER, device INTEGER,
  operator_id INTEGER REFERENCES strings(id), step INTEGER REFERENCES steps(step));
CREATE TABLE data_stages (
  id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  tid INTEGER REFERENCES threads(tid), operation_id INTEGER REFERENCES strings(id),
  stage_id INTEGER REFERENCES strings(id), custom_info_id INTEGER REFERENCES strings(id),
  step INTEGER REFERENCES steps(step));
CREATE TABLE communication_groups (name_id INTEGER PRIMARY KEY REFERENCES strings(id), ranks TEXT, origin TEXT);
CREATE TABLE communication (
  id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  tid INTEGER REFERENCES threads(tid), name_id INTEGER REFERENCES strings(id),
  group_id INTEGER REFERENCES communication_groups(name_id), flags INTEGER, sequence INTEGER,
  bytes INTEGER, peer INTEGER, tag INTEGER, step INTEGER REFERENCES steps(step),
  algorithm_id INTEGER REFERENCES strings(id), protocol_id INTEGER REFERENCES strings(id));
CREATE TABLE gpu_activity_kinds (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO gpu_activity_kinds VALUES (0, 'kernel'), (1, 'gpu_memcpy'), (2, 'gpu_memset'), (3, 'cuda_runtime'),
  (4, 'cuda_driver'), (5, 'cuda_sync');
CREATE TABLE gpu_activity (
  id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  kind INTEGER NOT NULL REFERENCES gpu_activity_kinds(id), name_id INTEGER NOT NULL REFERENCES strings(id),
  correlation INTEGER NOT NULL, device INTEGER, context INTEGER, stream INTEGER, subkind INTEGER, bytes INTEGER,
  grid_x INTEGER, grid_y INTEGER, grid_z INTEGER, block_x INTEGER, block_y INTEGER, block_z INTEGER,
  registers INTEGER, static_shared_bytes INTEGER, dynamic_shared_bytes INTEGER,
  tid INTEGER REFERENCES threads(tid), launch_id INTEGER REFERENCES gpu_activity(id),
  step INTEGER REFERENCES steps(step), graph_id INTEGER, graph_node_id INTEGER,
  capture_operator_id INTEGER REFERENCES strings(id));
CREATE TABLE stack_samples (
  id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  tid INTEGER REFERENCES threads(tid), stack_id INTEGER NOT NULL REFERENCES strings(id),
  cpu_wait_ns INTEGER NOT NULL, outside_ns INTEGER NOT NULL, step INTEGER REFERENCES steps(step));
CREATE TABLE python_outside_operators (
  step INTEGER REFERENCES steps(step), function TEXT, file TEXT, line INTEGER, input INTEGER,
  time_ns INTEGER);
)sql";

// Made after the rows: building an index once is faster than keeping it
// (2 M slices: 2.05 s against 2.70 s). One covering index for the slices
// (the top operators of a step); each more costs about 0.4 s per 2 M.
constexpr const char* kIndexes = R"sql(
CREATE INDEX slices_by_step ON slices(step, kind, name_id);
CREATE INDEX memory_by_ts ON memory(ts_ns);
CREATE INDEX communication_by_group ON communication(group_id, sequence);
CREATE INDEX gpu_activity_by_correlation ON gpu_activity(correlation, kind);
)sql";

// A slice's row: start, end, tid, name, kind, backward, inputs and step (the
// last two negative for NULL).
constexpr int kSliceColumns = 8;
constexpr int kSliceBatch = 64;
struct SliceRow {
  int64_t v[kSliceColumns];
};

// Binds `row`'s columns from parameter `first` on.
void bind_slice(Statement& s, int first, const SliceRow& row) {
  for (int c = 0; c < kSliceColumns; ++c) {
    if (c >= 6 && row.v[c] < 0) {
      s.bind_null(first + c);
    } else {
      s.bind(first + c, row.v[c]);
    }
  }
}

}  // namespace

struct DatabaseWriter::Impl {
  explicit Impl(const OutputPath& path) : file(path, kSchema) {}
  SqliteFile file;
  // Slices go in kSliceBatch rows a statement (fewer statement runs: about
  // 1.5x the single-row rate); the rest one by one at the end.
  std::unique_ptr<Statement> insert_slice;
  std::unique_ptr<Statement> insert_slices;
  std::vector<SliceRow> pending;
  int64_t realtime_offset = 0;
  bool have_offset = false;
};

DatabaseWriter::DatabaseWriter(const OutputPath& path) : impl_(std::make_unique<Impl>(path)) {
  Impl& d = *impl_;
  const std::string insert =
      "INSERT INTO slices(start_ns, end_ns, tid, name_id, kind, backward, inputs_id, step) VALUES ";
  const std::string row = "(?, ?, ?, ?, ?, ?, ?, ?)";
  d.insert_slice = std::make_unique<Statement>(d.file.db(), (insert + row).c_str(), &d.file.error());
  std::string batch = insert + row;
  for (int i = 1; i < kSliceBatch; ++i) batch += ", " + row;
  d.insert_slices = std::make_unique<Statement>(d.file.db(), batch.c_str(), &d.file.error());
  d.pending.reserve(kSliceBatch);
}

// The statements are finalized before the file closes.
DatabaseWriter::~DatabaseWriter() {
  impl_->insert_slice.reset();
  impl_->insert_slices.reset();
}

namespace {

using analysis::step_at;

void bind_step(Statement& s, int i, int64_t step) {
  s.bind_or_null(i, step >= 0, step);
}

// gpu_activity_kinds' id of an activity (its name is gpu_category's).
int64_t gpu_kind(const analysis::GpuActivity& a) {
  switch (a.kind) {
    case raw::EventKind::kGpuKernel: return 0;
    case raw::EventKind::kGpuMemcpy: return 1;
    case raw::EventKind::kGpuMemset: return 2;
    case raw::EventKind::kGpuApi: return a.subkind == static_cast<uint32_t>(raw::GpuApiKind::kDriver) ? 4 : 3;
    default: return 5;
  }
}

// GPU activities, id = index in the model + 1, so that a kernel, copy or set
// names its launching call (launch_id) before that row exists; the host
// thread is the call's own, or for an activity its launching call's. The
// rows written.
uint64_t write_gpu_activity(sqlite3* db, std::string* error, const analysis::TraceModel& m,
                            const std::vector<analysis::StepWindow>& by_start) {
  if (m.gpu.empty()) return 0;
  int64_t offset = m.realtime_offset_ns;
  std::vector<uint32_t> launches = gpu_launches(m);
  Statement s(
      db,
      "INSERT INTO gpu_activity VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?)",
      error);
  uint64_t rows = 0;
  for (size_t i = 0; i < m.gpu.size() && error->empty(); ++i) {
    const analysis::GpuActivity& a = m.gpu[i];
    const analysis::GpuActivity* launch = launches[i] != kNoLaunch ? &m.gpu[launches[i]] : nullptr;
    bool api = a.kind == raw::EventKind::kGpuApi;
    s.bind(1, static_cast<int64_t>(i + 1))
        .bind(2, static_cast<int64_t>(a.start_ns) + offset)
        .bind(3, static_cast<int64_t>(a.end_ns) + offset)
        .bind(4, gpu_kind(a))
        .bind(5, static_cast<int64_t>(a.name))
        .bind(6, static_cast<int64_t>(a.correlation));
    s.bind_or_null(7, a.device >= 0, a.device);
    s.bind_or_null(8, !api, a.context);
    s.bind_or_null(9, !api, a.stream);
    s.bind(10, static_cast<int64_t>(a.subkind));
    s.bind_or_null(11, a.kind == raw::EventKind::kGpuMemcpy || a.kind == raw::EventKind::kGpuMemset,
                   i64(a.bytes));
    std::optional<KernelGeometry> geometry;
    if (a.kind == raw::EventKind::kGpuKernel) geometry = kernel_geometry(m.name(a.detail));
    bool kernel = geometry.has_value();
    KernelGeometry g = geometry.value_or(KernelGeometry{});
    for (int c = 0; c < 3; ++c) {
      s.bind_or_null(12 + c, kernel, i64(g.grid[c]));
      s.bind_or_null(15 + c, kernel, i64(g.block[c]));
    }
    s.bind_or_null(18, kernel, i64(g.registers));
    s.bind_or_null(19, kernel, i64(g.static_shared));
    s.bind_or_null(20, kernel, i64(g.dynamic_shared));
    uint32_t tid = api ? a.thread : launch != nullptr ? launch->thread : 0;
    s.bind_or_null(21, tid != 0, tid);
    s.bind_or_null(22, launch != nullptr, static_cast<int64_t>(launches[i]) + 1);
    // The step of the launch, as kernel_details.csv's (GPU work runs after the
    // step that asked for it may have ended).
    bind_step(s, 23, step_at(by_start, launch != nullptr ? launch->start_ns : a.start_ns));
    s.bind_or_null(24, a.graph != 0, a.graph);
    s.bind_or_null(25, a.graph_node != 0, i64(a.graph_node));
    uint32_t captured = analysis::graph_capture_operator(m, a);
    s.bind_or_null(26, captured != 0, captured);
    s.step(db, error);
    ++rows;
  }
  return rows;
}

// Where finish() writes the tables after the slices: the database, its first
// error, the model, the steps by start, the realtime offset, the rows written.
struct Tables {
  sqlite3* db;
  std::string* error;
  const analysis::TraceModel& m;
  const std::vector<analysis::StepWindow>& by_start;
  int64_t offset;
  uint64_t rows = 0;
};

// strings: every name id and its text.
void write_strings(Tables& t) {
  Statement s(t.db, "INSERT INTO strings(id, value) VALUES (?, ?)", t.error);
  for (size_t i = 0; i < t.m.strings.size() && t.error->empty(); ++i) {
    s.bind(1, static_cast<int64_t>(i)).bind(2, t.m.strings[i]).step(t.db, t.error);
    ++t.rows;
  }
}

// operator_inputs: what operators were called with (record_shapes,
// with_stack, with_modules, with_flops), once per distinct combination.
void write_operator_inputs(Tables& t) {
  std::set<uint32_t> inputs;
  for (const analysis::SliceKey& k : t.m.keys) {
    if (k.inputs != 0) inputs.insert(k.inputs);
  }
  Statement s(t.db, "INSERT INTO operator_inputs VALUES (?, ?, ?, ?, ?, ?)", t.error);
  for (uint32_t id : inputs) {
    auto stack = t.m.call_stacks.find(id);
    s.bind(1, static_cast<int64_t>(id));
    s.bind_text_or_null(2, analysis::input_dims(t.m, id))
        .bind_text_or_null(3, analysis::input_types(t.m, id));
    uint64_t flops = analysis::input_flops(t.m, id);
    s.bind_or_null(4, flops > 0, i64(flops));
    s.bind_text_or_null(
         5, stack != t.m.call_stacks.end() ? std::string_view(stack->second) : analysis::input_stack(t.m, id))
        .bind_text_or_null(6, analysis::input_module(t.m, id))
        .step(t.db, t.error);
    ++t.rows;
  }
}

// threads: every thread with slices or other records, named where its name
// is known.
void write_threads(Tables& t) {
  std::map<uint32_t, std::string> threads = t.m.thread_names;
  for (const analysis::SliceKey& k : t.m.keys) threads.emplace(k.tid, "");
  for (const analysis::MemoryRecord& r : t.m.memory) threads.emplace(r.tid, "");
  for (const analysis::DataStageSlice& r : t.m.data_stages) threads.emplace(r.tid, "");
  for (const analysis::CommCall& r : t.m.comm_calls) threads.emplace(r.tid, "");
  for (const analysis::GpuActivity& a : t.m.gpu) {
    if (a.kind == raw::EventKind::kGpuApi && a.thread != 0) threads.emplace(a.thread, "");
  }
  Statement s(t.db, "INSERT INTO threads(tid, name) VALUES (?, ?)", t.error);
  for (const auto& [tid, name] : threads) {
    s.bind(1, static_cast<int64_t>(tid)).bind_text_or_null(2, name).step(t.db, t.error);
    ++t.rows;
  }
}

// steps: each step's window and its step_trace_time.csv breakdown. OR
// IGNORE: a damaged run may number two steps alike (the first is kept), and
// the database must not fail the analysis over it.
void write_steps(Tables& t, const std::vector<analysis::StepTraceRow>& rows) {
  std::map<int64_t, const analysis::StepTraceRow*> row_of;
  for (const analysis::StepTraceRow& r : rows) row_of[r.step] = &r;
  Statement s(t.db, "INSERT OR IGNORE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", t.error);
  for (const analysis::StepWindow& w : t.m.steps) {
    analysis::StepTraceRow r;
    if (auto it = row_of.find(w.number); it != row_of.end()) r = *it->second;
    s.bind(1, w.number)
        .bind(2, static_cast<int64_t>(w.start_ns) + t.offset)
        .bind(3, static_cast<int64_t>(w.end_ns) + t.offset)
        .bind(4, i64(r.computing_ns))
        .bind(5, i64(r.communication_not_overlapped_ns))
        .bind(6, i64(r.overlapped_ns))
        .bind(7, i64(r.communication_ns))
        .bind(8, i64(r.free_ns))
        .bind(9, i64(r.stage_ns))
        .bind(10, i64(r.bubble_ns))
        .bind(11, i64(r.communication_not_overlapped_exclude_receive_ns))
        .bind(12, i64(r.preparing_ns))
        .bind(13, i64(r.data_wait_ns))
        .step(t.db, t.error);
    ++t.rows;
  }
}

// operator_statistics: op_statistic.csv's rows.
void write_operator_statistics(Tables& t, const std::vector<analysis::OpStatisticRow>& operators) {
  Statement s(t.db, "INSERT OR IGNORE INTO operator_statistics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", t.error);
  for (const analysis::OpStatisticRow& r : operators) {
    s.bind(1, r.name)
        .bind(2, i64(r.count))
        .bind(3, i64(r.total_ns))
        .bind(4, i64(r.min_ns))
        .bind(5, i64(r.max_ns))
        .bind(6, i64(r.self_ns))
        .bind(7, r.ratio_percent)
        .bind(8, i64(r.flops))
        .bind(9, r.core_type)
        .step(t.db, t.error);
    ++t.rows;
  }
}

// memory: each report, its operator and step.
void write_memory(Tables& t, const std::vector<uint32_t>& memory_operators) {
  Statement s(t.db,
              "INSERT INTO memory(ts_ns, tid, address, bytes, total_allocated, total_reserved, device, "
              "operator_id, step) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
              t.error);
  for (size_t i = 0; i < t.m.memory.size() && t.error->empty(); ++i) {
    const analysis::MemoryRecord& r = t.m.memory[i];
    uint32_t op = i < memory_operators.size() ? memory_operators[i] : 0;
    s.bind(1, static_cast<int64_t>(r.ts_ns) + t.offset)
        .bind(2, static_cast<int64_t>(r.tid))
        .bind(3, static_cast<int64_t>(r.address))
        .bind(4, r.bytes)
        .bind(5, i64(r.total_allocated))
        .bind(6, i64(r.total_reserved))
        .bind(7, static_cast<int64_t>(r.device))
        .bind_or_null(8, op != 0, static_cast<int64_t>(op));
    bind_step(s, 9, step_at(t.by_start, r.ts_ns));
    s.step(t.db, t.error);
    ++t.rows;
  }
}

// data_stages: the data pipeline's stages.
void write_data_stages(Tables& t) {
  Statement s(t.db,
              "INSERT INTO data_stages(start_ns, end_ns, tid, operation_id, stage_id, custom_info_id, step) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)",
              t.error);
  for (const analysis::DataStageSlice& r : t.m.data_stages) {
    s.bind(1, static_cast<int64_t>(r.start_ns) + t.offset)
        .bind(2, static_cast<int64_t>(r.start_ns + r.dur_ns) + t.offset)
        .bind(3, static_cast<int64_t>(r.tid))
        .bind(4, static_cast<int64_t>(r.operation))
        .bind(5, static_cast<int64_t>(r.stage))
        .bind_or_null(6, r.custom_info != 0, static_cast<int64_t>(r.custom_info));
    bind_step(s, 7, step_at(t.by_start, r.start_ns));
    s.step(t.db, t.error);
    ++t.rows;
  }
}

// communication_groups and communication: the groups and each call.
void write_communication(Tables& t) {
  Statement g(t.db, "INSERT OR IGNORE INTO communication_groups VALUES (?, ?, ?)", t.error);
  for (const analysis::CommGroup& group : t.m.comm_groups) {
    std::string ranks;
    for (int32_t r : group.world_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    g.bind(1, static_cast<int64_t>(group.name)).bind(2, ranks).bind(3, group.origin).step(t.db, t.error);
    ++t.rows;
  }
  Statement s(t.db,
              "INSERT INTO communication(start_ns, end_ns, tid, name_id, group_id, flags, sequence, bytes, "
              "peer, tag, step, algorithm_id, protocol_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              t.error);
  for (const analysis::CommCall& c : t.m.comm_calls) {
    s.bind(1, static_cast<int64_t>(c.start_ns) + t.offset)
        .bind(2, static_cast<int64_t>(c.end_ns) + t.offset)
        .bind(3, static_cast<int64_t>(c.tid))
        .bind(4, static_cast<int64_t>(c.name))
        .bind_or_null(5, c.group != 0, static_cast<int64_t>(c.group))
        .bind(6, static_cast<int64_t>(c.flags))
        .bind_or_null(7, c.sequence >= 0, c.sequence);
    s.bind(8, i64(c.bytes)).bind(9, static_cast<int64_t>(c.peer)).bind(10, static_cast<int64_t>(c.tag));
    bind_step(s, 11, step_at(t.by_start, c.start_ns));
    s.bind_or_null(12, c.algorithm != 0, c.algorithm).bind_or_null(13, c.protocol != 0, c.protocol);
    s.step(t.db, t.error);
    ++t.rows;
  }
}

// stack_samples: every look of the Python sampler, its stack (innermost
// frame first), the span it stands for and the part of it outside operators.
void write_stack_samples(Tables& t) {
  Statement s(t.db,
              "INSERT INTO stack_samples(start_ns, end_ns, tid, stack_id, cpu_wait_ns, outside_ns, step) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)",
              t.error);
  for (const analysis::StackSample& r : t.m.stack_samples) {
    if (!t.error->empty()) break;
    s.bind(1, static_cast<int64_t>(r.start_ns) + t.offset)
        .bind(2, static_cast<int64_t>(r.end_ns) + t.offset)
        .bind(3, static_cast<int64_t>(r.tid))
        .bind(4, static_cast<int64_t>(r.stack))
        .bind(5, i64(r.cpu_wait_ns))
        .bind(6, i64(r.outside_ns));
    bind_step(s, 7, step_at(t.by_start, r.end_ns > 0 ? r.end_ns - 1 : 0));
    s.step(t.db, t.error);
    ++t.rows;
  }
}

// python_outside_operators: python_outside_operators.csv's rows.
void write_python_outside(Tables& t, const analysis::OutsideOperators& outside) {
  Statement s(t.db, "INSERT INTO python_outside_operators VALUES (?, ?, ?, ?, ?, ?)", t.error);
  for (const auto& [step, functions] : outside.by_step) {
    for (const analysis::OutsideFunction& f : functions) {
      s.bind(1, step)
          .bind(2, f.function)
          .bind(3, f.file)
          .bind(4, static_cast<int64_t>(f.line))
          .bind(5, static_cast<int64_t>(f.input ? 1 : 0))
          .bind(6, i64(f.ns))
          .step(t.db, t.error);
      ++t.rows;
    }
  }
}

// run_info: the run's facts and its profiler_info.json.
void write_run_info(Tables& t, const std::string& run_info_json) {
  Statement s(t.db, "INSERT INTO run_info VALUES (?, ?)", t.error);
  for (const auto& [key, value] : {std::pair<const char*, std::string>{"rank", std::to_string(t.m.rank)},
                                   {"world_size", std::to_string(t.m.world_size)},
                                   {"host", t.m.host},
                                   {"pid", std::to_string(t.m.pid)},
                                   {"stop_reason", t.m.stop_reason},
                                   {"closed_cleanly", t.m.closed_cleanly ? "1" : "0"},
                                   {"events", std::to_string(t.m.event_count)},
                                   {"profiler_info", run_info_json}}) {
    s.bind(1, key).bind(2, value).step(t.db, t.error);
    ++t.rows;
  }
}

}  // namespace

void DatabaseWriter::add_window(const analysis::TraceModel& m) {
  Impl& d = *impl_;
  if (!d.file.error().empty()) return;
  std::vector<analysis::StepWindow> steps = analysis::steps_by_start(m.steps);
  int64_t offset = m.realtime_offset_ns;
  for (const analysis::ThreadSlices& thread : m.threads) {
    for (size_t i = thread.first_own; i < thread.slices.size(); ++i) {
      const analysis::Slice& slice = thread.slices[i];
      const analysis::SliceKey& key = m.keys[slice.key];
      d.pending.push_back(SliceRow{{static_cast<int64_t>(slice.start_ns) + offset,
                                    static_cast<int64_t>(m.end(slice)) + offset,
                                    static_cast<int64_t>(key.tid), static_cast<int64_t>(key.name),
                                    key.is_step ? 2
                                    : key.is_op ? 1
                                                : 0,
                                    (key.op_flags & raw::kOperatorBackward) != 0 ? 1 : 0,
                                    key.inputs != 0 ? static_cast<int64_t>(key.inputs) : -1,
                                    // A step's slice starts its own window; the
                                    // start-up's and the tail's are in none.
                                    step_at(steps, slice.start_ns)}});
      ++rows_;
      if (d.pending.size() < kSliceBatch) continue;
      for (int r = 0; r < kSliceBatch; ++r) bind_slice(*d.insert_slices, 1 + r * kSliceColumns, d.pending[r]);
      d.pending.clear();
      if (!d.insert_slices->step(d.file.db(), &d.file.error())) return;
    }
  }
}

std::string DatabaseWriter::finish(const analysis::TraceModel& m,
                                   const std::vector<analysis::StepTraceRow>& rows,
                                   const std::vector<analysis::OpStatisticRow>& operators,
                                   const std::vector<uint32_t>& memory_operators,
                                   const std::string& run_info_json,
                                   const analysis::OutsideOperators* outside) {
  Impl& d = *impl_;
  for (const SliceRow& row : d.pending) {
    bind_slice(*d.insert_slice, 1, row);
    d.insert_slice->step(d.file.db(), &d.file.error());
  }
  d.pending.clear();
  d.insert_slice.reset();
  d.insert_slices.reset();
  int64_t offset = m.realtime_offset_ns;
  std::vector<analysis::StepWindow> by_start = analysis::steps_by_start(m.steps);
  Tables t{d.file.db(), &d.file.error(), m, by_start, offset};
  write_strings(t);
  write_operator_inputs(t);
  write_threads(t);
  write_steps(t, rows);
  write_operator_statistics(t, operators);
  write_memory(t, memory_operators);
  write_data_stages(t);
  write_communication(t);
  t.rows += write_gpu_activity(d.file.db(), &d.file.error(), m, by_start);
  write_stack_samples(t);
  if (outside != nullptr) write_python_outside(t, *outside);
  write_run_info(t, run_info_json);
  rows_ += t.rows;
  return d.file.finish(kIndexes);
}

}  // namespace trainprof::exporter
