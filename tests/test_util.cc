// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "raw/crc32c.h"
#include "raw/varint.h"

namespace trainprof::test {
namespace fs = std::filesystem;

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/trainprof_test_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  char* made = mkdtemp(buf.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  // Run directories are 0700 and owned by us: removable.
  fs::remove_all(path_, ec);
}

std::vector<std::string> run_dirs(const std::string& parent) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    std::string name = e.path().filename().string();
    if (e.is_directory() && name.size() > 10 && name.ends_with("_trainprof"))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

raw::RawFile read_run(const std::string& run_dir) {
  std::string error;
  auto files = raw::read_run_directory(run_dir, &error);
  EXPECT_TRUE(files.has_value()) << error;
  if (!files) return raw::RawFile{};
  EXPECT_EQ(files->size(), 1u);
  return std::move(files->front());
}

bool wait_for_raw_bytes(const std::string& run_dir, uint64_t bytes, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    uint64_t total = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(run_dir + "/raw", ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code size_ec;
      uint64_t size = it->file_size(size_ec);
      if (!size_ec) total += size;
    }
    if (total >= bytes) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string helper_path(const std::string& name) {
  return std::string(TRAINPROF_TEST_BIN_DIR) + "/trainprof_test_" + name;
}

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env) {
  ProcessResult result;
  int pipefd[2];
  if (pipe(pipefd) != 0) return result;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    close(pipefd[1]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) result.output.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  return result;
}

std::string sqlite3_query(const std::string& sqlite3, const std::string& db, const std::string& query) {
  ProcessResult p = run_process({sqlite3, "-batch", "-noheader", "-separator", ",", db, query});
  EXPECT_EQ(p.exit_code, 0) << query << ": " << p.output;
  return p.output;
}

Child spawn(const std::vector<std::string>& argv) {
  Child c;
  int fds[2];
  if (pipe(fds) != 0) return c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  c.out = fds[0];
  char ch;
  while (read(c.out, &ch, 1) == 1 && ch != '\n') c.first_line += ch;
  return c;
}

int wait_status(Child& c) {
  int status = 0;
  waitpid(c.pid, &status, 0);
  close(c.out);
  return status;
}

std::map<std::string, size_t> count_by_name(const raw::RawFile& file) {
  std::map<std::string, size_t> counts;
  for (const raw::RawEvent& e : file.events) ++counts[file.name(e.name_id)];
  return counts;
}

std::vector<RawChunk> raw_chunks(const std::string& bytes) {
  std::vector<RawChunk> chunks;
  for (size_t off = raw::kFileHeaderSize; off + raw::kChunkHeaderSize <= bytes.size();) {
    RawChunk c;
    std::memcpy(&c.header, bytes.data() + off, sizeof(c.header));
    c.offset = off;
    c.size = raw::kChunkHeaderSize + c.header.payload_size;
    if (c.header.magic != raw::kChunkMagic || off + c.size > bytes.size()) break;
    chunks.push_back(c);
    off += c.size;
  }
  return chunks;
}

void reseal_chunk(std::string& bytes, size_t offset) {
  raw::ChunkHeader h;
  std::memcpy(&h, bytes.data() + offset, sizeof(h));
  h.crc = raw::chunk_crc(h, bytes.data() + offset + sizeof(h));
  std::memcpy(bytes.data() + offset, &h, sizeof(h));
}

void set_record_count(std::string& bytes, const RawChunk& c, uint32_t count) {
  std::memcpy(&bytes[c.offset + offsetof(raw::ChunkHeader, record_count)], &count, sizeof(count));
  reseal_chunk(bytes, c.offset);
}

std::string with_first_event_named(const std::string& bytes, const RawChunk& c, uint64_t id) {
  // Payload: sequence number, head byte, name varint, the rest.
  size_t name_at = c.offset + raw::kChunkHeaderSize + raw::kChunkSequenceSize + 1;
  const auto* name = reinterpret_cast<const uint8_t*>(bytes.data() + name_at);
  uint64_t old_id = 0;
  const uint8_t* after = raw::get_varint(name, name + raw::kMaxVarintBytes, &old_id);
  size_t old_size = static_cast<size_t>(after - name);
  uint8_t varint[raw::kMaxVarintBytes];
  size_t new_size = static_cast<size_t>(raw::put_varint(varint, id) - varint);
  std::string out = bytes.substr(0, name_at) + std::string(reinterpret_cast<const char*>(varint), new_size) +
                    bytes.substr(name_at + old_size);
  uint32_t payload_size =
      c.header.payload_size + static_cast<uint32_t>(new_size) - static_cast<uint32_t>(old_size);
  std::memcpy(&out[c.offset + offsetof(raw::ChunkHeader, payload_size)], &payload_size, sizeof(payload_size));
  reseal_chunk(out, c.offset);
  return out;
}

}  // namespace trainprof::test
