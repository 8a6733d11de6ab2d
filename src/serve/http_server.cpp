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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace calo::serve {

namespace {

// A request head larger than this is refused (a scrape's head is a few hundred bytes).
constexpr size_t kMaxRequestHeadBytes = 16 * 1024;

std::string status_response(int code, const std::string& reason, const std::string& extra_headers,
                            const std::string& text) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{}"
      "Connection: close\r\n\r\n{}",
      code, reason, text.size(), extra_headers, text);
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
    const int fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          candidate->ai_protocol);
    if (fd < 0) continue;
    const int reuse = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
    if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
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

namespace {

// Connections held at once; a new one beyond this closes the oldest, so idle sockets cannot lock scrapes out.
constexpr size_t kMaxConnections = 1024;
// A client must finish sending its request head within this time of connecting (a scrape takes microseconds).
constexpr auto kRequestDeadline = std::chrono::milliseconds(2000);
// A client must take the whole answer within this time, so one that never reads cannot hold its buffer.
constexpr auto kResponseDeadline = std::chrono::milliseconds(10000);

using Clock = std::chrono::steady_clock;

// One accepted client: the bytes read so far, then the answer being written, and when it is dropped.
struct Connection {
  int fd = -1;
  std::string received;
  std::string reply;
  size_t reply_sent = 0;
  bool answering = false;
  Clock::time_point deadline;
};

bool ends_head(const std::string& text) {
  return text.find("\r\n\r\n") != std::string::npos || text.find("\n\n") != std::string::npos;
}

}  // namespace

// Every client is a non-blocking socket in one poll set with its own deadline: a slow or silent client costs
// a buffer until its deadline, never the thread, and the oldest client is closed when the table is full.
class HttpServer::ConnectionTable {
 public:
  explicit ConnectionTable(HttpServer& server) : server_(server) {}
  ~ConnectionTable() {
    for (const Connection& connection : connections_) close(connection.fd);
  }
  ConnectionTable(const ConnectionTable&) = delete;
  ConnectionTable& operator=(const ConnectionTable&) = delete;

  // Waits for the listening socket, the wake pipe or any client; false once the server is asked to stop.
  bool serve_once() {
    std::vector<pollfd> watch;
    watch.reserve(connections_.size() + 2);
    watch.push_back({server_.listen_fd_, POLLIN, 0});
    watch.push_back({server_.wake_pipe_[0], POLLIN, 0});
    for (const Connection& connection : connections_) {
      watch.push_back({connection.fd, static_cast<short>(connection.answering ? POLLOUT : POLLIN), 0});
    }
    const int ready = poll(watch.data(), watch.size(), wait_ms());
    if (ready < 0 && errno != EINTR) return false;
    if ((watch[1].revents & POLLIN) != 0) return false;
    for (size_t index = 0; ready > 0 && index < connections_.size(); ++index) {
      if (watch[index + 2].revents != 0) advance(connections_[index]);
    }
    drop_finished();
    if ((watch[0].revents & POLLIN) != 0) accept_waiting();
    return true;
  }

 private:
  // Milliseconds until the nearest deadline (-1: none).
  int wait_ms() const {
    if (connections_.empty()) return -1;
    Clock::time_point nearest = connections_.front().deadline;
    for (const Connection& connection : connections_) nearest = std::min(nearest, connection.deadline);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(nearest - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60'000));
  }

  // Accepts every waiting client; at the table's limit (or the process's descriptor limit) the oldest goes.
  void accept_waiting() {
    while (true) {
      const int fd = accept4(server_.listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0 && errno == EINTR) continue;
      if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !connections_.empty()) {
        close_oldest();
        continue;
      }
      if (fd < 0) return;
      if (connections_.size() >= kMaxConnections) close_oldest();
      connections_.push_back({fd, {}, {}, 0, false, Clock::now() + kRequestDeadline});
    }
  }

  void close_oldest() {
    close(connections_.front().fd);
    connections_.erase(connections_.begin());
  }

  // Reads what the client sent or writes what is left of its answer; fd -1 marks it finished.
  void advance(Connection& connection) {
    if (connection.answering) {
      write_some(connection);
      return;
    }
    char buffer[4096];
    while (true) {
      const ssize_t size = recv(connection.fd, buffer, sizeof(buffer), 0);
      if (size < 0 && errno == EINTR) continue;
      if (size < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (size <= 0) return finish(connection);
      connection.received.append(buffer, static_cast<size_t>(size));
      if (connection.received.size() > kMaxRequestHeadBytes) return finish(connection);
      if (ends_head(connection.received)) break;
    }
    connection.reply = server_.respond(connection.received);
    connection.answering = true;
    connection.deadline = Clock::now() + kResponseDeadline;
    write_some(connection);
  }

  void write_some(Connection& connection) {
    while (connection.reply_sent < connection.reply.size()) {
      const ssize_t step = send(connection.fd, connection.reply.data() + connection.reply_sent,
                                connection.reply.size() - connection.reply_sent, MSG_NOSIGNAL);
      if (step < 0 && errno == EINTR) continue;
      if (step < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (step <= 0) return finish(connection);
      connection.reply_sent += static_cast<size_t>(step);
    }
    finish(connection);
  }

  static void finish(Connection& connection) {
    close(connection.fd);
    connection.fd = -1;
  }

  // Removes finished clients and those past their deadline.
  void drop_finished() {
    const Clock::time_point now = Clock::now();
    std::erase_if(connections_, [now](Connection& connection) {
      if (connection.fd >= 0 && connection.deadline <= now) finish(connection);
      return connection.fd < 0;
    });
  }

  HttpServer& server_;
  std::vector<Connection> connections_;  // oldest first
};

void HttpServer::serve_loop() {
  ConnectionTable table(*this);
  while (table.serve_once()) {
  }
}

std::string HttpServer::respond(const std::string& head) {
  ++requests_;
  const size_t line_end = head.find_first_of("\r\n");
  const std::string request_line = head.substr(0, line_end);
  const size_t method_end = request_line.find(' ');
  const size_t target_end = request_line.find(' ', method_end + 1);
  if (method_end == std::string::npos || target_end == std::string::npos) {
    return status_response(400, "Bad Request", "", "malformed request line\n");
  }
  const std::string method = request_line.substr(0, method_end);
  std::string target = request_line.substr(method_end + 1, target_end - method_end - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    return status_response(405, "Method Not Allowed", "Allow: GET, HEAD\r\n", "only GET is served here\n");
  }
  if (target != path_) {
    return status_response(404, "Not Found", "", fmt::format("metrics are served at {}\n", path_));
  }
  HttpResponse response;
  try {
    response = handler_();
  } catch (const std::exception& failure) {
    return status_response(500, "Internal Server Error", "", std::string(failure.what()) + "\n");
  }
  std::string reply = fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
      "Connection: close\r\n\r\n",
      response.content_type, response.body.size());
  if (method == "GET") reply += response.body;
  return reply;
}

}  // namespace calo::serve
