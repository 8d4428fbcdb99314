// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus from a real run: every event kind through the library
// (operators, their inputs and memory reports as the LibTorch collector records
// them), then the run's raw file, copies of it with damage no checksum sees,
// and the outputs the analysis writes, as seeds for the targets that parse
// them. Usage: fuzz_seed_recorder CORPUS_DIR (fuzz/corpus).
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/event.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "raw/crc32c.h"
#include "raw/format.h"
#include "raw/varint.h"
#include "trainprof/trainprof.h"

namespace fs = std::filesystem;
namespace tp = trainprof;

namespace {

void op(const char* name, const char* inputs, uint8_t flags, uint32_t sequence) {
  uint64_t t0 = tp::detail::now_ticks();
  { tp::Range inner("inside"); }
  uint64_t t1 = tp::detail::now_ticks();
  tp::core::record_event(
      tp::core::Event{t0, t1, name, static_cast<uint8_t>(tp::raw::EventKind::kOperator), flags, 7, sequence});
  tp::core::record_event(tp::core::Event{t0, 0, tp::detail::intern(inputs),
                                         static_cast<uint8_t>(tp::raw::EventKind::kOperatorInputs), 0, 0, 0});
}

void memory(uint64_t address, int64_t bytes, uint64_t total) {
  tp::core::record_memory(tp::detail::now_ticks(), address, bytes, total, 2 * total,
                          tp::raw::memory_device(0, -1));
}

// A kernel launched by a runtime call (correlation `id`), a copy, and a
// driver allocation, as the GPU collector records them.
void gpu(uint32_t id) {
  namespace raw = tp::raw;
  uint64_t t0 = tp::detail::now_ticks();
  const uint32_t tid = tp::core::current_tid();
  tp::core::record_gpu(tp::core::Event{t0, t0 + 500, tp::detail::intern("cudaLaunchKernel"),
                                       static_cast<uint8_t>(raw::EventKind::kGpuApi), 0, 0, id},
                       tp::core::GpuDetail{0, nullptr, 0, 0, tp::core::kGpuDetailSlot,
                                           static_cast<uint8_t>(raw::GpuApiKind::kRuntime), 0, tid});
  tp::core::record_gpu(tp::core::Event{t0 + 800, t0 + 5000, tp::detail::intern("gemm_kernel(float*)"),
                                       static_cast<uint8_t>(raw::EventKind::kGpuKernel), 0, 1, id},
                       tp::core::GpuDetail{0,
                                           tp::detail::intern("4,3,2\x1f"
                                                              "128,1,1\x1f"
                                                              "40\x1f"
                                                              "0\x1f"
                                                              "512"),
                                           1, 7, tp::core::kGpuDetailSlot, 0, 0, 0});
  tp::core::record_gpu(
      tp::core::Event{t0 + 5000, t0 + 6000, tp::detail::intern("Memcpy DtoH (Device -> Pageable)"),
                      static_cast<uint8_t>(raw::EventKind::kGpuMemcpy), 0, 1, id + 1},
      tp::core::GpuDetail{4096, nullptr, 1, 7, tp::core::kGpuDetailSlot, 2, 0, 0});
  tp::core::record_memory(t0 + 100, 0x7f0000 + id, 1 << 20, 1 << 20, 1 << 20,
                          raw::memory_device(1, 0) | raw::kMemoryFromDriver);
}

void work(int thread) {
  tp::set_thread_name("worker " + std::to_string(thread));
  for (int i = 0; i < 20; ++i) {
    tp::Range r("step body");
    op("aten::conv2d",
       "[[64,1,28,28],[32,1,3,3]]\x1f[\"float\",\"float\"]\x1f"
       "1806336\x1f/lib/x.so+0x10;?+0x20",
       0, static_cast<uint32_t>(i));
    op("ConvolutionBackward0", "[[64,32,26,26]]\x1f[\"float\"]", tp::raw::kOperatorBackward,
       static_cast<uint32_t>(i));
    memory(0x1000 + static_cast<uint64_t>(i) * 64, 4096, 4096u * static_cast<uint64_t>(i + 1));
    memory(0x1000 + static_cast<uint64_t>(i) * 64, -4096, 4096u * static_cast<uint64_t>(i));
    tp::counter("loss", 1.0 / (i + 1));
    tp::mark("checkpoint " + std::to_string(i), "io");
    { tp::DataStage d("read", tp::kStageDatasetGet, "shard 1"); }
    {
      tp::Range launching("aten::mm");
      gpu(static_cast<uint32_t>(thread * 1000 + 2 * i + 1));
    }
  }
  uint64_t id = tp::range_start("epoch", "train");
  tp::range_end(id);
}

// The first chunk of `type` in raw file bytes, and where it starts (0: none).
struct ChunkAt {
  size_t offset = 0;
  tp::raw::ChunkHeader header{};
};

ChunkAt first_chunk(const std::string& bytes, tp::raw::ChunkType type) {
  namespace raw = tp::raw;
  ChunkAt c{raw::kFileHeaderSize};
  while (c.offset + raw::kChunkHeaderSize <= bytes.size()) {
    std::memcpy(&c.header, bytes.data() + c.offset, sizeof(c.header));
    if (c.header.type == static_cast<uint16_t>(type)) return c;
    c.offset += raw::kChunkHeaderSize + c.header.payload_size;
  }
  return ChunkAt{};
}

// Writes `c.header`, its checksum recomputed over the payload in `bytes`.
void seal(std::string& bytes, ChunkAt c) {
  c.header.crc = tp::raw::chunk_crc(c.header, bytes.data() + c.offset + tp::raw::kChunkHeaderSize);
  std::memcpy(&bytes[c.offset], &c.header, sizeof(c.header));
}

// Damage behind a valid checksum (docs/FORMAT.md, "Damage"), for the checks
// that come after it: the first event naming a string id no table defines.
std::string with_undefined_string_id(std::string bytes) {
  namespace raw = tp::raw;
  ChunkAt c = first_chunk(bytes, raw::ChunkType::kEvents);
  if (c.offset == 0) return bytes;
  size_t name_at = c.offset + raw::kChunkHeaderSize + raw::kChunkSequenceSize + 1;  // after the head byte
  const auto* name = reinterpret_cast<const uint8_t*>(bytes.data() + name_at);
  uint64_t id = 0;
  auto old_size = static_cast<uint32_t>(raw::get_varint(name, name + raw::kMaxVarintBytes, &id) - name);
  uint8_t varint[raw::kMaxVarintBytes];
  auto new_size = static_cast<uint32_t>(raw::put_varint(varint, (uint64_t{1} << 24) + 1) - varint);
  bytes.replace(name_at, old_size, reinterpret_cast<const char*>(varint), new_size);
  c.header.payload_size = c.header.payload_size - old_size + new_size;
  seal(bytes, c);
  return bytes;
}

// And a string table that counts one record less than it holds.
std::string with_short_string_table(std::string bytes) {
  ChunkAt c = first_chunk(bytes, tp::raw::ChunkType::kStrings);
  if (c.offset == 0) return bytes;
  --c.header.record_count;
  seal(bytes, c);
  return bytes;
}

bool write_seed(const std::string& bytes, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::fprintf(stderr, "cannot write %s\n", to.c_str());
  return static_cast<bool>(out);
}

bool copy_seed(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) std::fprintf(stderr, "cannot copy %s: %s\n", from.c_str(), ec.message().c_str());
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  fs::path corpus = argv[1];
  fs::path scratch = fs::temp_directory_path() / ("trainprof_seeds_" + std::to_string(::getpid()));
  tp::ProfilerOptions o;
  o.output_path = scratch.string();
  o.record_shapes = o.with_stack = o.with_flops = o.profile_memory = o.data_process = true;
  tp::Profiler prof(o);
  for (int s = 0; s < 3; ++s) {
    std::thread a(work, 1), b(work, 2);
    a.join();
    b.join();
    prof.step();
  }
  prof.stop();
  fs::path run = prof.last_run().run_dir;
  tp::AnalyseReport report = tp::analyse(run.string());
  bool ok = report.ok();
  ok &= copy_seed(run / "raw" / "host.tpraw", corpus / "raw_reader" / "run");
  ok &= copy_seed(run / "raw" / "host.tpraw", corpus / "analyse" / "run");
  std::stringstream raw_bytes;
  raw_bytes << std::ifstream(run / "raw" / "host.tpraw", std::ios::binary).rdbuf();
  for (const char* target : {"raw_reader", "analyse"}) {
    ok &= write_seed(with_undefined_string_id(raw_bytes.str()), corpus / target / "undefined_string_id");
    ok &= write_seed(with_short_string_table(raw_bytes.str()), corpus / target / "short_string_table");
  }
  ok &= copy_seed(run / "PROFILER_OUTPUT" / "op_statistic.csv", corpus / "csv_reader" / "op_statistic");
  ok &= copy_seed(run / "PROFILER_OUTPUT" / "step_trace_time.csv", corpus / "csv_reader" / "step_trace_time");
  ok &= copy_seed(run / "profiler_info.json", corpus / "metadata_json" / "profiler_info");
  std::error_code ec;
  fs::remove_all(scratch, ec);
  return ok ? 0 : 1;
}
