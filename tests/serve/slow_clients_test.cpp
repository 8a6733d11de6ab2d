// HttpServer against hostile clients on a real loopback socket: clients that send a byte now and then,
// clients that connect and say nothing, and clients that never read their answer. A scrape must still be
// answered at once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "loopback_client.h"
#include "serve/http_server.h"

namespace calo::serve {
namespace {

using Clock = std::chrono::steady_clock;
using testing::allow_descriptors;
using testing::connect_to;
using testing::scrape_s;

HttpResponse metrics() {
  return {"text/plain", "calo_up 1\n# EOF\n"};
}

TEST(HttpServerUnderLoad, ScrapeAnswersWithin100msBeside50SlowAnd500IdleClients) {
  if (!allow_descriptors(2048)) GTEST_SKIP() << "this process may not hold 2048 descriptors (RLIMIT_NOFILE)";
  HttpServer server({"127.0.0.1", 0}, "/metrics", metrics);
  std::vector<int> idle;
  for (int index = 0; index < 500; ++index) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0) << "connection " << index;
    idle.push_back(fd);
  }
  std::vector<int> slow;
  for (int index = 0; index < 50; ++index) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "G", 1, MSG_NOSIGNAL), 1);
    slow.push_back(fd);
  }
  // The slow clients go on sending a byte every 100 ms while the scrapes are made.
  std::atomic<bool> sending{true};
  std::thread trickle([&] {
    while (sending) {
      for (const int fd : slow) send(fd, "E", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<double> latencies_s;
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::string reply;
    latencies_s.push_back(scrape_s(server.port(), &reply));
    EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0U) << reply;
    EXPECT_NE(reply.find("calo_up 1"), std::string::npos);
  }
  sending = false;
  trickle.join();
  std::sort(latencies_s.begin(), latencies_s.end());
  std::printf("scrape beside 50 slow + 500 idle clients: median %.2f ms, slowest %.2f ms (10 scrapes)\n",
              latencies_s[latencies_s.size() / 2] * 1e3, latencies_s.back() * 1e3);
  EXPECT_GE(latencies_s.front(), 0.0);
  EXPECT_LT(latencies_s[latencies_s.size() / 2], 0.1)
      << "median scrape " << latencies_s[latencies_s.size() / 2];
  EXPECT_LT(latencies_s.back(), 0.5) << "slowest scrape " << latencies_s.back();
  for (const int fd : idle) close(fd);
  for (const int fd : slow) close(fd);
}

TEST(HttpServerUnderLoad, ASilentClientIsDroppedAtItsDeadline) {
  HttpServer server({"127.0.0.1", 0}, "/metrics", metrics);
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "GET /met", 8, MSG_NOSIGNAL), 8);
  const Clock::time_point start = Clock::now();
  pollfd watch{fd, POLLIN, 0};
  ASSERT_EQ(poll(&watch, 1, 10'000), 1) << "the server never closed a client that stopped half-way";
  char byte = 0;
  EXPECT_EQ(recv(fd, &byte, 1, 0), 0);  // closed, no answer
  const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(waited_s, 1.0);
  EXPECT_LT(waited_s, 4.0);
  close(fd);
}

TEST(HttpServerUnderLoad, MoreClientsThanTheTableHoldsCloseTheOldest) {
  if (!allow_descriptors(4096)) GTEST_SKIP() << "this process may not hold 4096 descriptors (RLIMIT_NOFILE)";
  HttpServer server({"127.0.0.1", 0}, "/metrics", metrics);
  std::vector<int> idle;
  for (int index = 0; index < 1100; ++index) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0) << "connection " << index;
    idle.push_back(fd);
  }
  std::string reply;
  EXPECT_LT(scrape_s(server.port(), &reply), 0.5);
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0U) << reply;
  // The first clients were closed to make room: reading them ends at once.
  pollfd watch{idle.front(), POLLIN, 0};
  EXPECT_EQ(poll(&watch, 1, 1000), 1);
  for (const int fd : idle) close(fd);
}

TEST(HttpServerUnderLoad, AClientThatNeverReadsDoesNotHoldTheServer) {
  // A large answer the client never reads fills the socket buffers; other scrapes go on.
  const std::string body(8 << 20, 'x');
  HttpServer server({"127.0.0.1", 0}, "/metrics", [&] { return HttpResponse{"text/plain", body}; });
  const int stuck = connect_to(server.port());
  ASSERT_GE(stuck, 0);
  const std::string request = "GET /metrics HTTP/1.1\r\n\r\n";
  ASSERT_EQ(send(stuck, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::string reply;
  const double took_s = scrape_s(server.port(), &reply);
  EXPECT_EQ(reply.size(), body.size() + reply.find("\r\n\r\n") + 4);
  EXPECT_LT(took_s, 2.0);
  close(stuck);
}

}  // namespace
}  // namespace calo::serve
