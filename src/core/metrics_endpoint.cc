// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/write_all.h"

namespace trainprof::core {
namespace {

constexpr size_t kMaxRequestHead = 4096;

bool starts_with_target(std::string_view rest, std::string_view path) {
  if (!rest.starts_with(path)) return false;
  if (rest.size() == path.size()) return true;
  char next = rest[path.size()];
  return next == ' ' || next == '?' || next == '\r' || next == '\n';
}

void send_text(int fd, std::string_view text) {
  base::write_all(fd, text.data(), text.size());
}

}  // namespace

bool is_metrics_request(std::string_view head) {
  std::string_view rest;
  if (head.starts_with("GET ")) {
    rest = head.substr(4);
  } else if (head.starts_with("HEAD ")) {
    rest = head.substr(5);
  } else {
    return false;
  }
  return starts_with_target(rest, "/metrics") || starts_with_target(rest, "/");
}

MetricsEndpoint::MetricsEndpoint(const std::string& address, int port, std::function<std::string()> metrics,
                                 std::string* error)
    : metrics_(std::move(metrics)), address_(address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (port < 0 || port > 65535 || inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    *error = "the metrics endpoint needs an IPv4 address and a port in [0, 65535], got '" + address + ":" +
             std::to_string(port) + "'";
    return;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *error =
        "cannot listen on " + address + ":" + std::to_string(port) + " for metrics: " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) {
    *error = std::string("cannot make the metrics endpoint's wake-up: ") + std::strerror(errno);
    ::close(fd);
    return;
  }
  listen_fd_ = fd;
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t ignored = ::write(stop_fd_, &one, sizeof(one));
    (void)ignored;
    thread_.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

std::string MetricsEndpoint::url() const {
  if (listen_fd_ < 0) return "";
  return "http://" + address_ + ":" + std::to_string(port_) + "/metrics";
}

void MetricsEndpoint::serve() {
  // Signals are the training threads' business.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "trainprof-metrics");
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    answer(client);
    ::close(client);
  }
}

// One request, one answer: the request's head is read (at most 4 KiB, 1 s
// per read), only its first line matters.
void MetricsEndpoint::answer(int client) {
  timeval one_second{1, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &one_second, sizeof(one_second));
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &one_second, sizeof(one_second));
  std::string head;
  char buffer[1024];
  while (head.size() < kMaxRequestHead && head.find("\r\n\r\n") == std::string::npos &&
         head.find("\n\n") == std::string::npos) {
    ssize_t n = ::recv(client, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    head.append(buffer, static_cast<size_t>(n));
  }
  if (!is_metrics_request(head)) {
    send_text(client,
              "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 33\r\n"
              "Connection: close\r\n\r\nonly GET /metrics is served here\n");
    return;
  }
  std::string body = metrics_();
  std::string response =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head.starts_with("HEAD ")) response += body;
  send_text(client, response);
}

}  // namespace trainprof::core
