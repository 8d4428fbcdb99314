// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/cupti/cupti_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <utility>
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

// A CUPTI the process already has (PyTorch's CUDA builds link libcupti from
// their NVIDIA wheel) must be the one used: a second copy, of another
// version, would subscribe to the same driver beside it. Its path as loaded.
void* already_loaded(std::string* path) {
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so"}) {
    void* handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    link_map* map = nullptr;
    *path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
                    *map->l_name != '\0'
                ? map->l_name
                : soname;
    return handle;
  }
  return nullptr;
}

// Binds the functions trainprof calls; false when one is missing.
bool bind_all(void* handle, CuptiLibrary& c) {
  bool complete = bind(handle, "cuptiActivityEnable", &c.activity_enable) &&
                  bind(handle, "cuptiActivityDisable", &c.activity_disable) &&
                  bind(handle, "cuptiActivityRegisterCallbacks", &c.register_callbacks) &&
                  bind(handle, "cuptiActivityFlushAll", &c.flush_all) &&
                  bind(handle, "cuptiActivityGetNextRecord", &c.get_next_record) &&
                  bind(handle, "cuptiActivityGetNumDroppedRecords", &c.get_num_dropped_records) &&
                  bind(handle, "cuptiGetTimestamp", &c.get_timestamp);
  bind(handle, "cuptiGetCallbackName", &c.get_callback_name);  // newer CUPTIs only
  bind(handle, "cuptiSubscribe", &c.subscribe);
  bind(handle, "cuptiUnsubscribe", &c.unsubscribe);
  bind(handle, "cuptiEnableCallback", &c.enable_callback);
  bind(handle, "cuptiGetGraphNodeId", &c.get_graph_node_id);
  return complete;
}

void load(Loaded& l) {
  std::string tried, path;
  void* handle = already_loaded(&path);
  std::vector<std::string> paths = handle != nullptr ? std::vector<std::string>{} : candidates();
  for (size_t i = 0; handle == nullptr && i < paths.size(); ++i) {
    handle = dlopen(paths[i].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      path = paths[i];
    } else {
      tried += (tried.empty() ? "" : ", ") + paths[i];
    }
  }
  if (handle == nullptr) {
    l.why = "libcupti not found (tried " + tried + "; set TRAINPROF_CUPTI_LIBRARY to its path)";
    return;
  }
  l.library.path = path;
  if (bind_all(handle, l.library)) {
    l.ok = true;
    return;
  }
  l.why = path + " lacks functions trainprof needs (a CUPTI older than CUDA 11?)";
  dlclose(handle);
}

}  // namespace

std::string CuptiLibrary::error_text(CUptiResult result) {
  // The results a start or a flush can give; others by number.
  static constexpr std::pair<CUptiResult, const char*> kNames[] = {
      {CUPTI_SUCCESS, "CUPTI_SUCCESS"},
      {CUPTI_ERROR_INVALID_PARAMETER, "CUPTI_ERROR_INVALID_PARAMETER"},
      {CUPTI_ERROR_INVALID_DEVICE, "CUPTI_ERROR_INVALID_DEVICE"},
      {CUPTI_ERROR_INVALID_CONTEXT, "CUPTI_ERROR_INVALID_CONTEXT"},
      {CUPTI_ERROR_INVALID_OPERATION, "CUPTI_ERROR_INVALID_OPERATION"},
      {CUPTI_ERROR_OUT_OF_MEMORY, "CUPTI_ERROR_OUT_OF_MEMORY"},
      {CUPTI_ERROR_HARDWARE, "CUPTI_ERROR_HARDWARE"},
      {CUPTI_ERROR_API_NOT_IMPLEMENTED, "CUPTI_ERROR_API_NOT_IMPLEMENTED"},
      {CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED"},
      {CUPTI_ERROR_NOT_READY, "CUPTI_ERROR_NOT_READY"},
      {CUPTI_ERROR_NOT_COMPATIBLE, "CUPTI_ERROR_NOT_COMPATIBLE"},
      {CUPTI_ERROR_NOT_INITIALIZED, "CUPTI_ERROR_NOT_INITIALIZED"},
      {CUPTI_ERROR_INVALID_KIND, "CUPTI_ERROR_INVALID_KIND"},
      {CUPTI_ERROR_DISABLED, "CUPTI_ERROR_DISABLED"},
      {CUPTI_ERROR_HARDWARE_BUSY, "CUPTI_ERROR_HARDWARE_BUSY"},
      {CUPTI_ERROR_NOT_SUPPORTED, "CUPTI_ERROR_NOT_SUPPORTED"},
      {CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED, "CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED"},
      {CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"},
      {CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"},
      {CUPTI_ERROR_UNKNOWN, "CUPTI_ERROR_UNKNOWN"},
  };
  for (const auto& [code, name] : kNames) {
    if (code == result) return name;
  }
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

bool cuda_driver_present(std::string* why) {
  static const std::string* error = [] {
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr) return new std::string();  // kept loaded
    const char* text = dlerror();
    return new std::string("no CUDA driver (" +
                           std::string(text != nullptr ? text : "libcuda.so.1 not found") + ")");
  }();
  if (!error->empty() && why != nullptr) *why = *error;
  return error->empty();
}

const CuptiLibrary* load_cupti(std::string* why) {
  Loaded& l = loaded();
  std::call_once(l.once, [&l] { load(l); });
  if (!l.ok && why != nullptr) *why = l.why;
  return l.ok ? &l.library : nullptr;
}

}  // namespace trainprof::cupti
