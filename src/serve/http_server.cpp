// GET-only HTTP endpoint: see http_server.h.
#include "serve/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace calo::serve {

namespace {

// A request head larger than this is refused (a scrape's head is a few hundred bytes).
constexpr size_t kMaxRequestHeadBytes = 16 * 1024;
// A client that sends nothing for this long is dropped, so a stuck client cannot hold the only thread.
constexpr int kClientTimeoutMs = 2000;

void write_all(int fd, const std::string& data) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t step = send(fd, data.data() + written, data.size() - written, MSG_NOSIGNAL);
    if (step < 0 && errno == EINTR) continue;
    if (step <= 0) return;  // the client went away; nothing to do
    written += static_cast<size_t>(step);
  }
}

std::string status_response(int code, const std::string& reason, const std::string& extra_headers,
                            const std::string& text) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{}"
      "Connection: close\r\n\r\n{}",
      code, reason, text.size(), extra_headers, text);
}

// Reads the request head (up to the blank line); empty on timeout, error or an oversized head.
std::string read_request_head(int fd) {
  std::string head;
  char buffer[2048];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    pollfd watch{fd, POLLIN, 0};
    const int ready = poll(&watch, 1, kClientTimeoutMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return "";
    const ssize_t size = recv(fd, buffer, sizeof(buffer), 0);
    if (size < 0 && errno == EINTR) continue;
    if (size <= 0) return "";
    head.append(buffer, static_cast<size_t>(size));
    if (head.size() > kMaxRequestHeadBytes) return "";
  }
  return head;
}

}  // namespace

ListenAddress parse_listen_address(const std::string& text, const std::string& flag) {
  ListenAddress address;
  std::string port_text = text;
  const auto invalid = [&] {
    return InputError(
        fmt::format("{} '{}': write PORT or ADDRESS:PORT, e.g. {} 9400 (loopback) or {} "
                    "0.0.0.0:9400 (every interface: anyone who can reach this host can read it)",
                    flag, text, flag, flag));
  };
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("]:");
    if (close == std::string::npos) throw invalid();
    address.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
    if (text.find(':') != colon) throw invalid();  // a bare IPv6 address needs brackets
    if (colon > 0) address.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos || std::stoul(port_text) > 65535) {
    throw invalid();
  }
  address.port = static_cast<uint16_t>(std::stoul(port_text));
  return address;
}

HttpServer::HttpServer(const ListenAddress& address, std::string path, std::function<HttpResponse()> handler)
    : host_(address.host), path_(std::move(path)), handler_(std::move(handler)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(address.port);
  if (const int code = getaddrinfo(address.host.c_str(), port_text.c_str(), &hints, &found); code != 0) {
    throw InputError(fmt::format("cannot listen on {}:{}: {}; give an address of this host, e.g. 127.0.0.1",
                                 address.host, address.port, gai_strerror(code)));
  }
  std::string last_error = "no address";
  for (addrinfo* candidate = found; candidate != nullptr && listen_fd_ < 0; candidate = candidate->ai_next) {
    const int fd =
        socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd < 0) continue;
    const int reuse = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
    if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      listen_fd_ = fd;
    } else {
      last_error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    throw InputError(fmt::format("cannot listen on {}:{}: {}; choose another port (or 0 for any free one)",
                                 address.host, address.port, last_error));
  }
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_size);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    close(listen_fd_);
    throw RuntimeFailure(fmt::format("cannot create the HTTP server's wake pipe: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { serve_loop(); });
}

HttpServer::~HttpServer() {
  stop();
  for (int& fd : wake_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void HttpServer::stop() {
  if (thread_.joinable()) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = write(wake_pipe_[1], &byte, 1);
    thread_.join();
  }
  // Closed at once, so a client connecting after stop() is refused instead of waiting in the backlog.
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

std::string HttpServer::url() const {
  const bool is_ipv6 = host_.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}{}", is_ipv6 ? "[" : "", host_, is_ipv6 ? "]" : "", port_, path_);
}

void HttpServer::serve_loop() {
  while (true) {
    pollfd watch[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    const int ready = poll(watch, 2, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (watch[1].revents & POLLIN) != 0) return;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    answer(connection);
    close(connection);
  }
}

void HttpServer::answer(int connection_fd) {
  const std::string head = read_request_head(connection_fd);
  if (head.empty()) return;
  ++requests_;
  const size_t line_end = head.find_first_of("\r\n");
  const std::string request_line = head.substr(0, line_end);
  const size_t method_end = request_line.find(' ');
  const size_t target_end = request_line.find(' ', method_end + 1);
  if (method_end == std::string::npos || target_end == std::string::npos) {
    write_all(connection_fd, status_response(400, "Bad Request", "", "malformed request line\n"));
    return;
  }
  const std::string method = request_line.substr(0, method_end);
  std::string target = request_line.substr(method_end + 1, target_end - method_end - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    write_all(connection_fd, status_response(405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
                                             "only GET is served here\n"));
    return;
  }
  if (target != path_) {
    write_all(connection_fd,
              status_response(404, "Not Found", "", fmt::format("metrics are served at {}\n", path_)));
    return;
  }
  HttpResponse response;
  try {
    response = handler_();
  } catch (const std::exception& failure) {
    write_all(connection_fd,
              status_response(500, "Internal Server Error", "", std::string(failure.what()) + "\n"));
    return;
  }
  std::string reply = fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
      "Connection: close\r\n\r\n",
      response.content_type, response.body.size());
  if (method == "GET") reply += response.body;
  write_all(connection_fd, reply);
}

}  // namespace calo::serve
