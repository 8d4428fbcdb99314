// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Call stacks symbolized from module files.
#include "analysis/symbolizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <string>

#include "test_util.h"

// External linkage, not inlined: a function this binary's symbol table names.
__attribute__((noinline)) int trainprof_symbolizer_test_function(int x) {
  return x * 3 + 1;
}

namespace trainprof::analysis {
namespace {

// The frame text the collector records for a return address inside `fn`.
std::string frame_of(void* fn) {
  Dl_info info{};
  EXPECT_NE(dladdr(fn, &info), 0);
  auto offset = reinterpret_cast<uintptr_t>(fn) - reinterpret_cast<uintptr_t>(info.dli_fbase) + 4;
  char hex[20];
  char* end = std::to_chars(hex, hex + sizeof(hex), offset, 16).ptr;
  return std::string(info.dli_fname) + "+0x" + std::string(hex, end);
}

TEST(Symbolizer, NamesTheFunctionOfAFrameFromTheModuleFile) {
  Symbolizer s;
  std::string frame = frame_of(reinterpret_cast<void*>(&trainprof_symbolizer_test_function));
  std::string text = s.symbolize(frame);
  EXPECT_NE(text.find("trainprof_symbolizer_test_function(int)"), std::string::npos)
      << frame << " -> " << text;
  EXPECT_NE(text.find("(trainprof_tests)"), std::string::npos) << text;
}

TEST(Symbolizer, DropsFrameworkFramesAndKeepsWhatItCannotName) {
  Symbolizer s;
  std::string ours = frame_of(reinterpret_cast<void*>(&trainprof_symbolizer_test_function));
  test::TempDir dir;
  std::string not_elf = dir.sub("notes.txt");
  std::ofstream(not_elf) << "not an ELF file\n";
  std::string text = s.symbolize("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13+0x1234;" + ours +
                                 ";/no/such/libfoo.so+0x10;garbage;" + not_elf + "+0x20;x.so+0xzz;" +
                                 "/lib/x86_64-linux-gnu/libc.so.6+0x2724a");
  EXPECT_EQ(text.find("libtorch_cpu"), std::string::npos) << text;
  EXPECT_EQ(text.find("libc.so"), std::string::npos) << text;
  EXPECT_EQ(text.rfind("trainprof_symbolizer_test_function(int) (trainprof_tests);", 0), 0u) << text;
  EXPECT_NE(text.find(";/no/such/libfoo.so+0x10;garbage;" + not_elf + "+0x20;x.so+0xzz"), std::string::npos)
      << text;
  EXPECT_EQ(s.symbolize(""), "");
}

// Issue 11 item 14: a call stack naming a FIFO blocked the symbolizer in
// open(2) forever. Only regular files are opened now; the frame is kept.
TEST(Symbolizer, AModuleThatIsAFifoIsRefusedNotOpened) {
  test::TempDir dir;
  std::string fifo = dir.sub("libfifo.so");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Symbolizer s;
  auto result = std::async(std::launch::async, [&] { return s.symbolize(fifo + "+0x10"); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    int unblock = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let the stuck open(2) return
    ADD_FAILURE() << "the symbolizer blocked on a FIFO";
    result.wait();
    if (unblock >= 0) close(unblock);
    return;
  }
  EXPECT_EQ(result.get(), fifo + "+0x10");
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_NE(s.warnings()[0].find("not a regular file"), std::string::npos) << s.warnings()[0];
}

// Found by fuzz/elf_symbols_fuzz.cc: an ELF header with no section table
// (e_shnum 0) made the reader memcpy into an empty vector (undefined; the
// ASan+UBSan build of this test catches it).
TEST(Symbolizer, ElfWithoutSectionsIsKeptAsGiven) {
  test::TempDir dir;
  std::string module = dir.sub("nosections.so");
  std::string elf(64, '\0');
  std::memcpy(elf.data(),
              "\x7f"
              "ELF\x02\x01\x01",
              7);
  elf[16] = 1;                  // e_type ET_REL
  elf[18] = 0x3e;               // e_machine x86-64
  elf[20] = 1;                  // e_version
  elf[40] = 0x68, elf[41] = 3;  // e_shoff 0x368 (past the end)
  elf[52] = 64;                 // e_ehsize
  elf[58] = 64;                 // e_shentsize; e_shnum (60) stays 0
  std::ofstream(module, std::ios::binary) << elf;
  Symbolizer s;
  EXPECT_EQ(s.symbolize(module + "+0x10"), module + "+0x10");
}

}  // namespace
}  // namespace trainprof::analysis
