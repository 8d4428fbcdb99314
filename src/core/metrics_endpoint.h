// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A metrics endpoint for Prometheus: a listening socket and a thread of its own
// that answers `GET /metrics` with the text a callback makes, and anything else
// with 404.
//
// It binds to 127.0.0.1 unless told otherwise: the metrics then leave the
// machine only through a scraper on it (or a tunnel someone set up on
// purpose). Each connection gets one answer and is closed; a client that
// sends nothing for 1 s is dropped, so a stuck client never holds it.
#ifndef TRAINPROF_CORE_METRICS_ENDPOINT_H_
#define TRAINPROF_CORE_METRICS_ENDPOINT_H_

#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace trainprof::core {

// Whether the start of an HTTP request asks for the metrics ("GET /metrics"
// or "GET /", with or without a query; HEAD too). Outside bytes: fuzzed.
bool is_metrics_request(std::string_view request_head);

class MetricsEndpoint {
 public:
  // Listens on address:port (port 0: one the system picks); `error` says
  // why not (the object is then inert).
  MetricsEndpoint(const std::string& address, int port, std::function<std::string()> metrics,
                  std::string* error);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // "http://address:port/metrics", or "" when it does not listen.
  std::string url() const;

 private:
  void serve();
  void answer(int client);

  std::function<std::string()> metrics_;
  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: the thread's wake-up to end
  std::thread thread_;
};

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_METRICS_ENDPOINT_H_
