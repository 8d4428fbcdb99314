// Copyright trainprof authors.
#include "collectors/cupti/cupti_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace trainprof::cupti {
namespace {

std::vector<std::string> candidates() {
  std::vector<std::string> paths;
  if (const char* explicit_path = std::getenv("TRAINPROF_CUPTI_LIBRARY"); explicit_path && *explicit_path) {
    paths.emplace_back(explicit_path);
  }
  for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) paths.emplace_back(name);
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) roots.emplace_back(home);
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots) {
    for (const char* dir : {"/extras/CUPTI/lib64/", "/lib64/", "/lib/"})
      paths.push_back(root + dir + "libcupti.so");
  }
  return paths;
}

template <typename Fn>
bool bind(void* handle, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  return *fn != nullptr;
}

struct Loaded {
  std::once_flag once;
  CuptiLibrary library;
  bool ok = false;
  std::string why;
};

Loaded& loaded() {
  static Loaded* l = new Loaded();  // never unloaded: CUPTI's threads may outlive any owner
  return *l;
}

void load(Loaded& l) {
  std::string tried;
  for (const std::string& path : candidates()) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    CuptiLibrary& c = l.library;
    c.path = path;
    bool complete = bind(handle, "cuptiActivityEnable", &c.activity_enable) &&
                    bind(handle, "cuptiActivityDisable", &c.activity_disable) &&
                    bind(handle, "cuptiActivityRegisterCallbacks", &c.register_callbacks) &&
                    bind(handle, "cuptiActivityFlushAll", &c.flush_all) &&
                    bind(handle, "cuptiActivityGetNextRecord", &c.get_next_record) &&
                    bind(handle, "cuptiActivityGetNumDroppedRecords", &c.get_num_dropped_records) &&
                    bind(handle, "cuptiGetTimestamp", &c.get_timestamp) &&
                    bind(handle, "cuptiGetResultString", &c.get_result_string);
    bind(handle, "cuptiGetCallbackName", &c.get_callback_name);  // newer CUPTIs only
    if (complete) {
      l.ok = true;
      return;
    }
    l.why = path + " lacks functions trainprof needs (a CUPTI older than CUDA 11?)";
    dlclose(handle);
    return;
  }
  l.why = "libcupti not found (tried " + tried + "; set TRAINPROF_CUPTI_LIBRARY to its path)";
}

}  // namespace

std::string CuptiLibrary::error_text(CUptiResult result) const {
  const char* text = nullptr;
  if (get_result_string != nullptr && get_result_string(result, &text) == CUPTI_SUCCESS && text != nullptr) {
    return text;
  }
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

const CuptiLibrary* load_cupti(std::string* why) {
  Loaded& l = loaded();
  std::call_once(l.once, [&l] { load(l); });
  if (!l.ok && why != nullptr) *why = l.why;
  return l.ok ? &l.library : nullptr;
}

}  // namespace trainprof::cupti
