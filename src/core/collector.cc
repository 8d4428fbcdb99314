// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/collector.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "base/log.h"

namespace trainprof::core {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<Collector*> collectors;
  std::optional<ProfilerOptions> running;  // the open session's options
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: collectors may stop at exit
  return *r;
}

std::atomic<detail::ContextProvider> g_stack_provider{nullptr};
std::atomic<detail::ContextProvider> g_module_provider{nullptr};
std::atomic<OpenOperatorFn> g_open_operator{nullptr};

}  // namespace

}  // namespace trainprof::core

namespace trainprof::detail {

void set_context_providers(detail::ContextProvider stack, detail::ContextProvider module) noexcept {
  core::g_stack_provider.store(stack, std::memory_order_release);
  core::g_module_provider.store(module, std::memory_order_release);
}

}  // namespace trainprof::detail

namespace trainprof::core {

detail::ContextProvider stack_provider() noexcept {
  return g_stack_provider.load(std::memory_order_acquire);
}

detail::ContextProvider module_provider() noexcept {
  return g_module_provider.load(std::memory_order_acquire);
}

void register_open_operator(OpenOperatorFn fn) noexcept {
  g_open_operator.store(fn, std::memory_order_release);
}

const char* open_operator() noexcept {
  OpenOperatorFn fn = g_open_operator.load(std::memory_order_acquire);
  return fn != nullptr ? fn() : nullptr;
}

void register_collector(Collector* collector) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.collectors.push_back(collector);
  base::log_debug("collector registered: " + std::string(collector->name()));
  if (r.running) collector->start(*r.running);
}

std::string collector_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string names;
  for (Collector* c : r.collectors) {
    if (!names.empty()) names += ",";
    names += c->name();
  }
  return names;
}

std::string collectors_info_json() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string info;
  for (Collector* c : r.collectors) {
    std::string one = c->info_json();
    if (one.empty()) continue;
    info += info.empty() ? "{" : ",";
    info += "\"" + std::string(c->name()) + "\":" + one;
  }
  return info.empty() ? info : info + "}";
}

void start_collectors(const ProfilerOptions& options) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.running = options;
  for (Collector* c : r.collectors) c->start(options);
}

void stop_collectors() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.running) return;
  r.running.reset();
  for (Collector* c : r.collectors) c->stop();
}

}  // namespace trainprof::core
