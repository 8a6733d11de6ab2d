// A loopback HTTP client for tests and benchmarks of serve::HttpServer: connect, one GET, time to the
// answer's end, and the descriptor limit a test of many clients needs.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace calo::serve::testing {

/// A socket connected to 127.0.0.1:`port`, or -1.
inline int connect_to(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// Seconds from connecting to the end of the answer to one GET /metrics (`reply` gets it), or -1 on failure;
/// gives up after 5 s without a byte.
inline double scrape_s(uint16_t port, std::string* reply) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = connect_to(port);
  if (fd < 0) return -1;
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  char buffer[4096];
  while (true) {
    pollfd watch{fd, POLLIN, 0};
    if (poll(&watch, 1, 5000) <= 0) break;
    const ssize_t size = recv(fd, buffer, sizeof(buffer), 0);
    if (size <= 0) break;
    reply->append(buffer, static_cast<size_t>(size));
  }
  close(fd);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Raises this process's descriptor limit to `needed` if the hard limit allows; false if it cannot.
inline bool allow_descriptors(rlim_t needed) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  if (limit.rlim_cur >= needed) return true;
  if (limit.rlim_max < needed) return false;
  limit.rlim_cur = needed;
  return setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

}  // namespace calo::serve::testing
