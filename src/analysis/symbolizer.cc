// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/symbolizer.h"

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "analysis/passes.h"
#include "base/safe_file.h"

namespace trainprof::analysis {
namespace {

// Modules whose frames say nothing about the user's code.
bool is_framework_module(std::string_view path) {
  std::string_view base = path.substr(path.rfind('/') + 1);
  for (std::string_view prefix : {"libtrainprof", "libtorch", "libc10", "libc.so", "libc-", "libstdc++",
                                  "libgcc_s", "ld-linux", "libgomp", "libpthread"}) {
    if (base.starts_with(prefix)) return true;
  }
  return false;
}

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string text = status == 0 && out != nullptr ? out : name;
  std::free(out);
  return text;
}

}  // namespace

// One ELF file's functions, sorted by address; empty when the file is gone,
// not ELF64 or has no symbol table.
class Symbolizer::Module {
 public:
  explicit Module(const std::string& path) { load(path); }

  // The path named something other than a regular file (a FIFO, a device).
  bool not_regular() const { return not_regular_; }

  // The function containing `offset` (from the load address), or nullptr.
  const std::string* function_at(uint64_t offset) const {
    uint64_t address = offset + load_bias_;
    auto it = std::upper_bound(functions_.begin(), functions_.end(), address,
                               [](uint64_t a, const Function& f) { return a < f.start; });
    if (it == functions_.begin()) return nullptr;
    --it;
    return address < it->start + it->size ? &it->name : nullptr;
  }

 private:
  struct Function {
    uint64_t start;
    uint64_t size;
    std::string name;
  };

  void load(const std::string& path) {
    // Raw data names the path: only a regular file is opened (a FIFO would
    // block the open or the read forever, a device could do anything).
    // Symlinks are followed: libfoo.so.1 -> libfoo.so.1.2 is the usual case.
    int fd = base::open_regular_file_at(AT_FDCWD, path, /*follow=*/true);
    if (fd < 0) {
      not_regular_ = errno == EINVAL;
      return;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
      ::close(fd);
      return;
    }
    size_t size = static_cast<size_t>(st.st_size);
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) return;
    parse(static_cast<const uint8_t*>(map), size);
    munmap(map, size);
    std::sort(functions_.begin(), functions_.end(),
              [](const Function& a, const Function& b) { return a.start < b.start; });
  }

  // Every read is bounds-checked: the file is not trusted.
  void parse(const uint8_t* data, size_t size) {
    Elf64_Ehdr eh;
    std::memcpy(&eh, data, sizeof(eh));
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return;
    auto in_file = [size](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
    // The first loadable segment's page: frames are offsets from it.
    if (!in_file(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr))) return;
    for (uint16_t i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph;
      std::memcpy(&ph, data + eh.e_phoff + i * sizeof(Elf64_Phdr), sizeof(ph));
      if (ph.p_type == PT_LOAD) {
        load_bias_ = ph.p_vaddr & ~uint64_t{0xfff};
        break;
      }
    }
    // No section table (e_shnum 0) leaves nothing to copy (memcpy from a
    // null vector is undefined, found by fuzz/elf_symbols_fuzz.cc).
    if (eh.e_shnum == 0 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !in_file(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
      return;
    }
    std::vector<Elf64_Shdr> sections(eh.e_shnum);
    std::memcpy(sections.data(), data + eh.e_shoff, sections.size() * sizeof(Elf64_Shdr));
    for (uint32_t wanted : {SHT_SYMTAB, SHT_DYNSYM}) {
      for (const Elf64_Shdr& sh : sections) {
        if (sh.sh_type != wanted || sh.sh_link >= sections.size()) continue;
        const Elf64_Shdr& strtab = sections[sh.sh_link];
        if (!in_file(sh.sh_offset, sh.sh_size) || !in_file(strtab.sh_offset, strtab.sh_size)) continue;
        read_symbols(data + sh.sh_offset, sh.sh_size / sizeof(Elf64_Sym),
                     reinterpret_cast<const char*>(data + strtab.sh_offset), strtab.sh_size);
      }
      if (!functions_.empty()) return;  // .symtab has everything .dynsym has
    }
  }

  void read_symbols(const uint8_t* symbols, uint64_t count, const char* names, uint64_t names_size) {
    for (uint64_t i = 0; i < count; ++i) {
      Elf64_Sym sym;
      std::memcpy(&sym, symbols + i * sizeof(Elf64_Sym), sizeof(sym));
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_size == 0 || sym.st_name >= names_size) continue;
      const char* name = names + sym.st_name;
      if (std::memchr(name, '\0', names_size - sym.st_name) == nullptr) continue;
      functions_.push_back(Function{sym.st_value, sym.st_size, demangle(name)});
    }
  }

  uint64_t load_bias_ = 0;
  bool not_regular_ = false;
  std::vector<Function> functions_;
};

Symbolizer::Symbolizer() = default;
Symbolizer::~Symbolizer() = default;

Symbolizer::Module& Symbolizer::module(const std::string& path) {
  auto it = modules_.find(path);
  if (it == modules_.end()) {
    it = modules_.emplace(path, std::make_unique<Module>(path)).first;
    if (it->second->not_regular()) {
      warnings_.push_back(
          "call stacks name '" + path +
          "', which is not a regular file: it is not opened and its frames are not symbolized");
    }
  }
  return *it->second;
}

// "path+0xoffset" -> "function (basename)", "" for a framework frame.
std::string Symbolizer::frame(std::string_view text) {
  size_t plus = text.rfind("+0x");
  if (plus == std::string_view::npos) return std::string(text);
  std::string path(text.substr(0, plus));
  if (is_framework_module(path)) return "";
  uint64_t offset = 0;
  std::string_view hex = text.substr(plus + 3);
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), offset, 16);
  if (ec != std::errc() || end != hex.data() + hex.size()) return std::string(text);
  // A return address points after the call: look up the call itself.
  const std::string* function = module(path).function_at(offset > 0 ? offset - 1 : 0);
  if (function == nullptr) return std::string(text);
  return *function + " (" + path.substr(path.rfind('/') + 1) + ")";
}

std::string Symbolizer::symbolize(std::string_view frames) {
  std::string out;
  while (!frames.empty()) {
    size_t semi = frames.find(';');
    std::string f = frame(frames.substr(0, semi));
    if (!f.empty()) {
      if (!out.empty()) out += ';';
      out += f;
    }
    if (semi == std::string_view::npos) break;
    frames.remove_prefix(semi + 1);
  }
  return out;
}

void symbolize_call_stacks(TraceModel& m) {
  Symbolizer symbolizer;
  for (const SliceKey& k : m.keys) {
    if (k.inputs == 0 || m.call_stacks.count(k.inputs) != 0) continue;
    std::string_view frames = input_stack(m, k.inputs);
    if (!frames.empty()) m.call_stacks[k.inputs] = symbolizer.symbolize(frames);
  }
  for (const std::string& w : symbolizer.warnings()) m.warnings.push_back(w);
}

}  // namespace trainprof::analysis
