// LiveMetrics on a real run store written by RunWriter while it is read (WAL), and HttpServer on a real
// loopback socket.
#include "serve/openmetrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "../store/temp_dir.h"
#include "core/error.h"
#include "loopback_client.h"
#include "serve/http_server.h"
#include "store/run_store.h"

namespace calo::serve {
namespace {

using store::testing::TempDir;

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

class LiveRun : public ::testing::Test {
 protected:
  void SetUp() override {
    store::RunInfo info;
    info.kind = store::RunKind::kRecord;
    info.name = "live";
    info.host = "node-a";
    info.started_ns = 1;
    writer_ = std::make_unique<store::RunWriter>(dir_.path() / "run", info);
    store::DeviceInfo gpu;
    gpu.idx = 0;
    gpu.slot = 3;
    gpu.kind = store::DeviceKind::kGpu;
    gpu.name = "NVIDIA H100 80GB HBM3";
    gpu.uuid = "GPU-1234";
    gpu.pci_bus = "00000000:19:00.0";
    writer_->add_device(gpu);
    store::DeviceInfo cpu;
    cpu.idx = 1;
    cpu.kind = store::DeviceKind::kCpu;
    cpu.name = "host";
    writer_->add_device(cpu);
    power_ = writer_->metric_id("power_avg_w", "W", store::MetricKind::kGauge);
    energy_ = writer_->metric_id("energy_j", "J", store::MetricKind::kCounter);
    throttle_ = writer_->metric_id("throttle_power_cap_s", "s", store::MetricKind::kCounter);
    cpu_util_ = writer_->metric_id("cpu_util_pct", "pct", store::MetricKind::kGauge);
  }
  void step_span(int32_t rank, int64_t step, int64_t begin_ns, int64_t end_ns, const std::string& source) {
    store::Span span;
    span.rank = rank;
    span.kind = store::SpanKind::kStep;
    span.name = "step";
    span.category = source;
    span.t_begin_ns = begin_ns;
    span.t_end_ns = end_ns;
    span.step = step;
    writer_->append_span(span);
  }

  TempDir dir_;
  std::unique_ptr<store::RunWriter> writer_;
  int32_t power_ = 0, energy_ = 0, throttle_ = 0, cpu_util_ = 0;
};

TEST_F(LiveRun, RendersLatestValuesWithCaloAndDcgmNames) {
  writer_->append({0, power_, 100, 350.0, store::kNoSensorTime});
  writer_->append({0, power_, 200, 512.5, store::kNoSensorTime});
  writer_->append({0, energy_, 200, 1234.5, store::kNoSensorTime});
  writer_->append({0, throttle_, 200, 2.5, store::kNoSensorTime});
  writer_->append({1, cpu_util_, 200, 37.0, store::kNoSensorTime});
  writer_->flush();
  LiveMetrics live(dir_.path() / "run");
  const std::string text = live.render();
  const std::string gpu =
      "gpu=\"3\",UUID=\"GPU-1234\",modelName=\"NVIDIA H100 80GB HBM3\",pci_bus_id=\"00000000:19:00.0\","
      "Hostname=\"node-a\"";
  EXPECT_TRUE(has_line(text, "# TYPE calo_power_avg_w gauge")) << text;
  EXPECT_TRUE(has_line(text, "calo_power_avg_w{" + gpu + "} 512.5")) << text;  // the latest value
  EXPECT_TRUE(has_line(text, "# TYPE calo_energy_j counter")) << text;
  EXPECT_TRUE(has_line(text, "calo_energy_j_total{" + gpu + "} 1234.5")) << text;
  EXPECT_TRUE(has_line(text, "DCGM_FI_DEV_POWER_USAGE{" + gpu + "} 512.5")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown")) << text;
  EXPECT_TRUE(has_line(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" + gpu + "} 1234500")) << text;  // mJ
  EXPECT_TRUE(has_line(text, "DCGM_FI_DEV_POWER_VIOLATION{" + gpu + "} 2500000")) << text;           // µs
  EXPECT_TRUE(has_line(text, "calo_cpu_util_pct{device=\"cpu\",modelName=\"host\",Hostname=\"node-a\"} 37"))
      << text;
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_UTIL"), std::string::npos);  // not recorded, not invented
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n");
}

TEST_F(LiveRun, FollowsRowsCommittedAfterTheFirstScrape) {
  writer_->append({0, power_, 100, 300.0, store::kNoSensorTime});
  writer_->flush();
  LiveMetrics live(dir_.path() / "run");
  EXPECT_NE(live.render().find("calo_power_avg_w{gpu=\"3\""), std::string::npos);
  EXPECT_EQ(live.steps().size(), 0U);
  writer_->append({0, power_, 300, 640.0, store::kNoSensorTime});
  // Rank 0 by socket markers: 0.1 s steps ending every 0.125 s (a gap between steps counts against the rate).
  for (int64_t step = 0; step < 4; ++step) {
    step_span(0, step, step * 125'000'000, step * 125'000'000 + 100'000'000, "socket");
  }
  // Output lines (no rank): a Megatron line every 10 steps, each span 10 x 0.2 s.
  step_span(store::kNone, 10, 0, 2'000'000'000, "megatron");
  step_span(store::kNone, 20, 2'000'000'000, 4'000'000'000, "megatron");
  writer_->flush();
  const std::string text = live.render();
  EXPECT_NE(text.find("calo_power_avg_w{gpu=\"3\",UUID=\"GPU-1234\""), std::string::npos);
  EXPECT_NE(text.find("} 640\n"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "calo_steps_total{Hostname=\"node-a\",rank=\"0\"} 4")) << text;
  EXPECT_TRUE(has_line(text, "calo_last_step{Hostname=\"node-a\",rank=\"0\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "calo_last_step_time_s{Hostname=\"node-a\",rank=\"0\"} 0.1")) << text;
  EXPECT_TRUE(has_line(text, "calo_step_rate_hz{Hostname=\"node-a\",rank=\"0\"} 8")) << text;  // 3 / 0.375 s
  // The first Megatron line covers one step (nothing before it), the second the 10 since the first.
  EXPECT_TRUE(has_line(text, "calo_steps_total{Hostname=\"node-a\"} 11")) << text;
  EXPECT_TRUE(has_line(text, "calo_last_step_time_s{Hostname=\"node-a\"} 0.2")) << text;
  EXPECT_TRUE(has_line(text, "calo_step_rate_hz{Hostname=\"node-a\"} 5")) << text;  // 10 steps / 2 s
}

TEST(ListenAddress, LoopbackUnlessAnAddressIsGiven) {
  EXPECT_EQ(parse_listen_address("9400", "--serve").host, "127.0.0.1");
  EXPECT_EQ(parse_listen_address(":9400", "--serve").port, 9400);
  EXPECT_EQ(parse_listen_address(":9400", "--serve").host, "127.0.0.1");
  EXPECT_EQ(parse_listen_address("0.0.0.0:80", "--serve").host, "0.0.0.0");
  EXPECT_EQ(parse_listen_address("[::1]:9400", "--serve").host, "::1");
  EXPECT_THROW(parse_listen_address("::1:9400", "--serve"), InputError);
  EXPECT_THROW(parse_listen_address("host:", "--serve"), InputError);
  EXPECT_THROW(parse_listen_address("70000", "--serve"), InputError);
  EXPECT_THROW(parse_listen_address("nine", "--serve"), InputError);
}

// Sends `request` to 127.0.0.1:port and returns everything the server answers.
std::string exchange(uint16_t port, const std::string& request) {
  const int fd = testing::connect_to(port);
  if (fd < 0) return "";
  [[maybe_unused]] const ssize_t sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buffer[4096];
  for (ssize_t size; (size = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, size);
  close(fd);
  return reply;
}

TEST(HttpServer, ServesGetOnItsPathOnly) {
  HttpServer server({"127.0.0.1", 0}, "/metrics", [] { return HttpResponse{"text/plain", "x 1\n# EOF\n"}; });
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  const std::string ok = exchange(server.port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0U) << ok;
  EXPECT_NE(ok.find("Content-Length: 10\r\n"), std::string::npos) << ok;
  EXPECT_EQ(ok.substr(ok.size() - 10), "x 1\n# EOF\n");
  const std::string head = exchange(server.port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");  // headers, no body
  EXPECT_EQ(exchange(server.port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0U);
  EXPECT_EQ(exchange(server.port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0U);
  EXPECT_EQ(exchange(server.port(), "nonsense\r\n\r\n").rfind("HTTP/1.1 400", 0), 0U);
  EXPECT_EQ(server.requests(), 5U);
  server.stop();
  EXPECT_EQ(exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").find("200 OK"), std::string::npos);
}

TEST(HttpServer, PortInUseIsAnInputError) {
  HttpServer first({"127.0.0.1", 0}, "/metrics", [] { return HttpResponse{"text/plain", ""}; });
  EXPECT_THROW(HttpServer({"127.0.0.1", first.port()}, "/metrics",
                          [] {
                            return HttpResponse{"text/plain", ""};
                          }),
               InputError);
}

}  // namespace
}  // namespace calo::serve
