// A minimal HTTP/1.1 server for one read-only endpoint: GET (and HEAD) only, one request per connection,
// served from one thread that polls every client at once (a slow client cannot stall the others). Enough for
// Prometheus scrapes; not a general web server.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace calo::serve {

/// Where to listen: a numeric address or host name, and a TCP port (0 = any free port).
struct ListenAddress {
  std::string host = "127.0.0.1";  ///< loopback unless an address is given explicitly
  uint16_t port = 0;               ///< TCP port
};

/// Parses "PORT", ":PORT" (both loopback), "HOST:PORT" or "[IPv6]:PORT"; throws InputError naming `flag`.
ListenAddress parse_listen_address(const std::string& text, const std::string& flag);

/// A response body and its media type.
struct HttpResponse {
  std::string content_type;  ///< e.g. "application/openmetrics-text; version=1.0.0; charset=utf-8"
  std::string body;          ///< payload
};

/// Serves GET `path` with `handler` on its own thread until destroyed or stopped.
class HttpServer {
 public:
  /// Binds and listens at once (InputError if the address cannot be bound, e.g. port in use), then serves.
  HttpServer(const ListenAddress& address, std::string path, std::function<HttpResponse()> handler);
  /// Stops serving and closes the socket.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  /// Stops the thread and closes the socket (idempotent); a request in progress finishes first.
  void stop();
  /// The bound port (the one chosen by the kernel when 0 was asked).
  uint16_t port() const { return port_; }
  /// "http://HOST:PORT/PATH".
  std::string url() const;
  /// Requests answered (any status).
  uint64_t requests() const { return requests_; }

 private:
  class ConnectionTable;
  void serve_loop();
  // The whole answer (status line, headers, body) to one request head.
  std::string respond(const std::string& head);

  std::string host_;
  std::string path_;
  std::function<HttpResponse()> handler_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<uint64_t> requests_{0};
  std::thread thread_;
};

}  // namespace calo::serve
