// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/csv_tables.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "exporter/output_file.h"
#include "exporter/text_format.h"

namespace trainprof::exporter {
namespace {

// Builds a CSV file row by row; numbers in microseconds with 3 decimals.
class CsvBuilder {
 public:
  explicit CsvBuilder(const OutputPath& path) : file_(path) {}
  CsvBuilder& field(std::string_view text) {
    sep();
    append_csv_field(buf_, text);
    return *this;
  }
  CsvBuilder& us(uint64_t ns) {
    sep();
    append_us(buf_, static_cast<int64_t>(ns));
    return *this;
  }
  CsvBuilder& count(uint64_t n) {
    sep();
    append_uint(buf_, n);
    return *this;
  }
  CsvBuilder& fixed(double v, int decimals) {
    sep();
    append_fixed(buf_, v, decimals);
    return *this;
  }
  void end_row() {
    buf_ += "\r\n";  // RFC 4180
    first_ = true;
    file_.drain(buf_);
  }
  std::string commit() {
    file_.commit(buf_);
    return file_.error();
  }

 private:
  void sep() {
    if (!first_) buf_ += ',';
    first_ = false;
  }
  OutputFile file_;
  std::string buf_;
  bool first_ = true;
};

void header(CsvBuilder& csv, std::initializer_list<const char*> names) {
  for (const char* n : names) csv.field(n);
  csv.end_row();
}

}  // namespace

std::string write_op_statistic(const std::vector<analysis::OpStatisticRow>& rows, const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)", "Min Time(us)",
               "Max Time(us)", "Ratio(%)", "Total FLOPs"});
  for (const auto& r : rows) {
    csv.field(r.name)
        .field(r.core_type)
        .count(r.count)
        .us(r.total_ns)
        .us(r.total_ns / r.count)
        .us(r.min_ns)
        .us(r.max_ns)
        .fixed(r.ratio_percent, 3)
        .count(r.flops);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_operator_details(const std::vector<analysis::OperatorDetailRow>& rows,
                                   const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
               "Device Self Duration(us)", "Device Total Duration(us)", "Calls", "Total FLOPs",
               "Module Hierarchy"});
  for (const auto& r : rows) {
    csv.field(r.name)
        .field(r.input_shapes)
        .field(r.call_stack)
        .us(r.host_self_ns)
        .us(r.host_total_ns)
        .us(r.device_self_ns)
        .us(r.device_total_ns)
        .count(r.calls)
        .count(r.flops)
        .field(r.module_hierarchy);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_kernel_details(const std::vector<analysis::KernelRow>& rows, int64_t realtime_offset_ns,
                                 const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Step Id",
               "Device Id",
               "Stream Id",
               "Name",
               "Type",
               "Accelerator Core",
               "Start Time(us)",
               "Duration(us)",
               "Wait Time(us)",
               "Block Num",
               "Input Shapes",
               "Input Data Types",
               "Grid",
               "Block",
               "Registers Per Thread",
               "Static Shared Memory(B)",
               "Dynamic Shared Memory(B)",
               "Correlation Id",
               "Launch API",
               "Launch Time(us)",
               "Launch Thread",
               "Graph Id",
               "Graph Node Id",
               "Capture Operator"});
  const auto offset = static_cast<uint64_t>(realtime_offset_ns);
  for (const auto& r : rows) {
    if (r.step >= 0) {
      csv.count(static_cast<uint64_t>(r.step));
    } else {
      csv.field("");
    }
    csv.field(r.device >= 0 ? std::to_string(r.device) : std::string())
        .count(r.stream)
        .field(r.name)
        .field(r.type)
        .field("GPU")
        .us(r.start_ns + offset)
        .us(r.dur_ns)
        .us(r.wait_ns)
        .count(r.blocks)
        .field(r.input_shapes)
        .field(r.input_types)
        .field(r.grid)
        .field(r.block)
        .count(r.registers)
        .count(r.static_shared)
        .count(r.dynamic_shared)
        .count(r.correlation)
        .field(r.launch_api);
    if (r.launch_ns != 0) {
      csv.us(r.launch_ns + offset);
    } else {
      csv.field("");
    }
    csv.field(r.launch_thread != 0 ? std::to_string(r.launch_thread) : std::string());
    csv.field(r.graph != 0 ? std::to_string(r.graph) : std::string())
        .field(r.graph_node != 0 ? std::to_string(r.graph_node) : std::string())
        .field(r.capture_operator);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_dataset(const std::vector<analysis::DatasetRow>& rows, const OutputPath& path) {
  CsvBuilder csv(path);
  // MindSpore's columns exactly, its space in "Avg. time (us)" included.
  header(csv, {"Operation", "Stage", "Occurrences", "Avg. time (us)", "Custom Info"});
  for (const auto& r : rows) {
    csv.field(r.operation)
        .field(r.stage)
        .count(r.occurrences)
        .us(r.total_ns / r.occurrences)
        .field(r.custom_info);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_step_trace_time(const std::vector<analysis::StepTraceRow>& rows, const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
               "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing",
               "Data Wait"});  // ours, last: readers of the others by name or place still read them
  for (const auto& r : rows) {
    csv.count(static_cast<uint64_t>(r.step))
        .us(r.computing_ns)
        .us(r.communication_not_overlapped_ns)
        .us(r.overlapped_ns)
        .us(r.communication_ns)
        .us(r.free_ns)
        .us(r.stage_ns)
        .us(r.bubble_ns)
        .us(r.communication_not_overlapped_exclude_receive_ns)
        .us(r.preparing_ns)
        .us(r.data_wait_ns);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_critical_path(const analysis::TraceModel& model,
                                const std::vector<analysis::PathSegment>& path, const OutputPath& path_file) {
  CsvBuilder csv(path_file);
  header(csv, {"Step", "Kind", "Name", "Thread Id", "Device Id", "Stream Id", "Start Time(us)",
               "Duration(us)", "Step Share(%)", "Count", "Python"});
  std::map<int64_t, uint64_t> step_ns;
  for (const analysis::StepWindow& w : model.steps) step_ns[w.number] = w.end_ns - w.start_ns;
  const auto offset = static_cast<uint64_t>(model.realtime_offset_ns);
  // Untracked host time: the function the stack samples found there.
  std::vector<std::string> python = analysis::path_outside_functions(model, path);
  for (size_t i = 0; i < path.size(); ++i) {
    const analysis::PathSegment& s = path[i];
    uint64_t length = step_ns.count(s.step) ? step_ns[s.step] : 0;
    csv.field(std::to_string(s.step))
        .field(analysis::path_kind_name(s.kind))
        .field(model.name(s.name))
        .field(s.tid != 0 ? std::to_string(s.tid) : std::string())
        .field(s.device >= 0 ? std::to_string(s.device) : std::string())
        .field(s.device >= 0 ? std::to_string(s.stream) : std::string())
        .us(s.start_ns + offset)
        .us(s.dur_ns)
        .fixed(length > 0 ? 100.0 * static_cast<double>(s.dur_ns) / static_cast<double>(length) : 0.0, 3)
        .count(s.count)
        .field(python[i]);
    csv.end_row();
  }
  return csv.commit();
}

// Memory sizes: MB = 2^20 bytes (6 decimals, about a byte), KB = 1024 bytes.
constexpr double kBytesPerMB = 1024.0 * 1024.0;

std::string write_memory_record(const analysis::TraceModel& m, const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)",
               "Device Type"});
  for (const analysis::MemoryRecord& r : m.memory) {
    csv.field(raw::memory_from_driver(r.device) ? "CUDA driver" : "LibTorch")
        .us(r.ts_ns + static_cast<uint64_t>(m.realtime_offset_ns))
        .fixed(static_cast<double>(r.total_allocated) / kBytesPerMB, 6)
        .fixed(static_cast<double>(r.total_reserved) / kBytesPerMB, 6)
        .fixed(static_cast<double>(r.total_allocated) / kBytesPerMB, 6)
        .field(analysis::memory_device_name(r.device));
    csv.end_row();
  }
  return csv.commit();
}

std::string write_operator_memory(const analysis::TraceModel& m, const analysis::MemoryMatch& match,
                                  const OutputPath& path) {
  CsvBuilder csv(path);
  // MindSpore's 15 columns. What LibTorch's allocator does not report is
  // empty: when a block freed on one stream went back to the pool (the
  // Active times) and the stream. Its allocated total stands for Active, as
  // MindSpore's own writer does.
  header(csv, {"Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Active Release Time(us)",
               "Duration(us)", "Active Duration(us)", "Allocation Total Allocated(MB)",
               "Allocation Total Reserved(MB)", "Allocation Total Active(MB)", "Release Total Allocated(MB)",
               "Release Total Reserved(MB)", "Release Total Active(MB)", "Stream Ptr", "Device Type"});
  auto offset = static_cast<uint64_t>(m.realtime_offset_ns);
  auto mb = [](uint64_t bytes) { return static_cast<double>(bytes) / kBytesPerMB; };
  for (const analysis::OperatorMemoryRow& r : match.rows) {
    csv.field(m.name(r.name)).fixed(static_cast<double>(r.bytes) / 1024.0, 3).us(r.alloc_ns + offset);
    if (r.released) {
      csv.us(r.release_ns + offset).field("").us(r.release_ns - r.alloc_ns).field("");
    } else {
      csv.field("").field("").field("").field("");
    }
    csv.fixed(mb(r.alloc_total_allocated), 6)
        .fixed(mb(r.alloc_total_reserved), 6)
        .fixed(mb(r.alloc_total_allocated), 6);
    if (r.released) {
      csv.fixed(mb(r.release_total_allocated), 6)
          .fixed(mb(r.release_total_reserved), 6)
          .fixed(mb(r.release_total_allocated), 6);
    } else {
      csv.field("").field("").field("");
    }
    csv.field("").field(analysis::memory_device_name(r.device));
    csv.end_row();
  }
  return csv.commit();
}

std::string write_memory_breakdown(const analysis::TraceModel& m, const analysis::MemoryBreakdown& b,
                                   const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Step", "Device Type", "Peak Time(us)", "Peak(MB)", "Allocator Total(MB)", "Operator", "Kind",
               "Name", "Size(MB)", "Share(%)"});
  auto offset = static_cast<uint64_t>(m.realtime_offset_ns);
  for (const analysis::StepPeakBreakdown& p : b.peaks) {
    auto row = [&](const char* kind, const std::string& name, uint64_t bytes) {
      double share =
          p.peak_bytes > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(p.peak_bytes) : 0;
      csv.count(static_cast<uint64_t>(p.step))
          .field(analysis::memory_device_name(p.device))
          .us(p.peak_ns + offset)
          .fixed(static_cast<double>(p.peak_bytes) / kBytesPerMB, 6)
          .fixed(static_cast<double>(p.allocator_bytes) / kBytesPerMB, 6)
          .field(m.name(p.operator_name))
          .field(kind)
          .field(name)
          .fixed(static_cast<double>(bytes) / kBytesPerMB, 6)
          .fixed(share, 2);
      csv.end_row();
    };
    for (size_t c = 0; c < analysis::kMemoryClasses; ++c)
      row("class", analysis::memory_class_name(static_cast<analysis::MemoryClass>(c)), p.by_class[c]);
    for (const analysis::SiteBytes& s : p.sites) row("site", b.sites[s.site], s.bytes);
  }
  return csv.commit();
}

std::string write_python_outside_operators(const analysis::OutsideOperators& outside,
                                           const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Step", "Function", "File", "Line", "Input", "Time(us)"});
  for (const auto& [step, functions] : outside.by_step) {
    for (const analysis::OutsideFunction& f : functions) {
      csv.field(std::to_string(step))
          .field(f.function)
          .field(f.file)
          .count(static_cast<uint64_t>(std::max(f.line, 0)))
          .field(f.input ? "yes" : "no")
          .us(f.ns);
      csv.end_row();
    }
  }
  return csv.commit();
}

std::string write_memory_leaks(const analysis::MemoryBreakdown& b, const OutputPath& path) {
  CsvBuilder csv(path);
  header(csv, {"Device Type", "Site", "Growth per Step(MB)", "First Step", "Live at End(MB)", "Steps"});
  for (const analysis::MemoryLeak& l : b.leaks) {
    csv.field(analysis::memory_device_name(l.device))
        .field(b.sites[l.site])
        .fixed(l.growth_per_step / kBytesPerMB, 6)
        .count(static_cast<uint64_t>(l.first_step))
        .fixed(static_cast<double>(l.live_at_end) / kBytesPerMB, 6)
        .count(l.steps);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_memory_timeline(const analysis::TraceModel& m,
                                  const std::vector<analysis::MemoryClassSample>& series,
                                  const OutputPath& path) {
  CsvBuilder csv(path);
  csv.field("Timestamp(us)").field("Device Type");
  for (size_t c = 0; c < analysis::kMemoryClasses; ++c)
    csv.field(std::string(analysis::memory_class_name(static_cast<analysis::MemoryClass>(c))) + "(MB)");
  csv.end_row();
  auto offset = static_cast<uint64_t>(m.realtime_offset_ns);
  for (const analysis::MemoryClassSample& s : series) {
    csv.us(s.ts_ns + offset).field(analysis::memory_device_name(s.device));
    for (uint64_t bytes : s.by_class) csv.fixed(static_cast<double>(bytes) / kBytesPerMB, 6);
    csv.end_row();
  }
  return csv.commit();
}

std::string write_host_usage(const analysis::HostUsageTable& table, int64_t realtime_offset_ns,
                             const OutputPath& path) {
  CsvBuilder csv(path);
  csv.field("Timestamp(us)");
  for (const std::string& column : table.columns) csv.field(column);
  csv.end_row();
  for (size_t row = 0; row < table.ts_ns.size(); ++row) {
    csv.us(table.ts_ns[row] + static_cast<uint64_t>(realtime_offset_ns));
    for (double v : table.values[row]) {
      if (std::isnan(v))
        csv.field("");
      else
        csv.fixed(v, 3);
    }
    csv.end_row();
  }
  return csv.commit();
}

namespace {

// The step trace's columns after the step, as the rank summaries carry them.
void append_step_parts(std::string& csv, const analysis::StepTraceRow& r) {
  for (uint64_t ns : {r.computing_ns, r.communication_not_overlapped_ns, r.overlapped_ns, r.communication_ns,
                      r.free_ns, r.stage_ns, r.bubble_ns, r.communication_not_overlapped_exclude_receive_ns,
                      r.preparing_ns, r.data_wait_ns}) {
    csv += ',';
    append_us(csv, static_cast<int64_t>(ns));
  }
  csv += '\n';
}

}  // namespace

std::string cluster_step_trace_csv(const std::vector<analysis::RankSummary>& ranks) {
  std::string csv =
      "Step,Type,Index,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
      "Communication(Not Overlapped and Exclude Receive),Preparing,Data Wait\n";
  std::map<std::pair<int64_t, int>, const analysis::StepTraceRow*> rows;  // (step, rank), in that order
  for (const analysis::RankSummary& s : ranks) {
    for (const analysis::RankStep& st : s.steps) rows[{st.row.step, s.rank}] = &st.row;
  }
  for (const auto& [key, r] : rows) {
    csv += std::to_string(key.first) + ",rank," + std::to_string(key.second);
    append_step_parts(csv, *r);
  }
  return csv;
}

std::string cluster_critical_path_csv(const std::vector<analysis::ClusterPathSegment>& segments) {
  std::string csv = "Step,Kind,Rank,Name,Start Time(us),Duration(us),Step Share(%)\n";
  std::map<int64_t, uint64_t> step_ns;
  for (const analysis::ClusterPathSegment& s : segments) step_ns[s.step] += s.dur_ns;
  for (const analysis::ClusterPathSegment& s : segments) {
    csv += std::to_string(s.step) + (s.communication ? ",communication," : ",work,") +
           std::to_string(s.rank) + ",";
    append_csv_field(csv, s.name);
    csv += ",";
    append_us(csv, static_cast<int64_t>(s.start_ns));
    csv += ",";
    append_us(csv, static_cast<int64_t>(s.dur_ns));
    csv += ",";
    uint64_t total = step_ns[s.step];
    append_fixed(csv, total > 0 ? 100.0 * static_cast<double>(s.dur_ns) / static_cast<double>(total) : 0, 1);
    csv += "\n";
  }
  return csv;
}

std::string msprof_step_trace_csv(const analysis::RankSummary& summary) {
  std::string csv =
      "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
      "Communication(Not Overlapped and Exclude Receive),Preparing,Data Wait\n";
  for (const analysis::RankStep& st : summary.steps) {
    csv += std::to_string(summary.rank) + "," + std::to_string(st.row.step);
    append_step_parts(csv, st.row);
  }
  return csv;
}

}  // namespace trainprof::exporter
