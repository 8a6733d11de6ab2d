// Scrape latency of serve::HttpServer beside hostile clients: --slow clients that send one byte every
// --trickle-ms, --idle clients that connect and say nothing; --scrapes GETs of a --body-kib page, timed from
// connect to the answer's end. Prints the latency distribution and whether issue 41's target holds (every
// scrape answered, p50 < 100 ms).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "loopback_client.h"
#include "serve/http_server.h"

namespace {

using namespace calo::serve;

struct Options {
  int slow = 50;
  int idle = 500;
  int scrapes = 200;
  int trickle_ms = 100;
  int body_kib = 27;  // one scrape of 8 GPUs (docs/benchmarks/live-metrics.md, bench/serve_scrape)
};

// Latency percentile `fraction` of sorted `values`.
double percentile(const std::vector<double>& values, double fraction) {
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(fraction * static_cast<double>(values.size())))];
}

int run(const Options& options) {
  if (!testing::allow_descriptors(static_cast<rlim_t>(2 * (options.slow + options.idle) + 64))) {
    fmt::print(stderr, "cannot hold {} descriptors (ulimit -n)\n", 2 * (options.slow + options.idle) + 64);
    return 2;
  }
  const std::string body(static_cast<size_t>(options.body_kib) * 1024, 'x');
  HttpServer server({"127.0.0.1", 0}, "/metrics", [&] { return HttpResponse{"text/plain", body}; });
  std::vector<int> held;
  for (int index = 0; index < options.idle + options.slow; ++index)
    held.push_back(testing::connect_to(server.port()));
  std::atomic<bool> sending{true};
  std::thread trickle([&] {
    while (sending) {
      for (int index = options.idle; index < options.idle + options.slow; ++index)
        send(held[static_cast<size_t>(index)], "G", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(options.trickle_ms));
    }
  });
  std::vector<double> latencies_ms;
  int failed = 0;
  for (int scrape = 0; scrape < options.scrapes; ++scrape) {
    std::string reply;
    const double seconds = testing::scrape_s(server.port(), &reply);
    if (seconds < 0 || reply.size() < body.size()) ++failed;
    latencies_ms.push_back(seconds * 1e3);
  }
  sending = false;
  trickle.join();
  for (const int fd : held) close(fd);
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const double p50 = percentile(latencies_ms, 0.5);
  fmt::print("clients: {} slow (a byte every {} ms), {} idle; page {} KiB; {} scrapes, {} failed\n",
             options.slow, options.trickle_ms, options.idle, options.body_kib, options.scrapes, failed);
  fmt::print("latency ms: p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  max {:.2f}\n", p50,
             percentile(latencies_ms, 0.9), percentile(latencies_ms, 0.99), latencies_ms.back());
  const bool met = failed == 0 && p50 < 100;
  fmt::print("target (every scrape answered, p50 < 100 ms): {}\n", met ? "met" : "MISSED");
  return met ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app("scrape latency of the live-metrics endpoint beside slow and idle clients");
  app.add_option("--slow", options.slow, "clients sending one byte every --trickle-ms")
      ->capture_default_str();
  app.add_option("--idle", options.idle, "clients connected and silent")->capture_default_str();
  app.add_option("--scrapes", options.scrapes, "timed GETs")->capture_default_str();
  app.add_option("--trickle-ms", options.trickle_ms, "period of the slow clients' bytes")
      ->capture_default_str();
  app.add_option("--body-kib", options.body_kib, "size of the metrics page")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(options);
}
