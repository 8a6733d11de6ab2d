// Benchmark: `calo ingest` throughput on a generated Kineto trace of realistic shape (CPU ops with shapes,
// runtime calls, flow events, GEMM/attention/elementwise kernels, NCCL kernels with metadata). Compares the
// hand-rolled scanner with nlohmann::json's SAX parser (no-op handler) on the same bytes. Checks the result.
// Usage: bench_trace_ingest [--mib 256] [--repeat 3] [--path /tmp/calo_bench_trace.json] [--op-shapes 1]
// (--op-shapes 1: also keep the aten ops with their input shapes, as calo calibrate ingests traces)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analyze/trace_ingest.h"

namespace {

// Writes a trace of about `target_bytes`; returns the number of GPU kernels written.
int64_t write_trace(const std::string& path, std::size_t target_bytes) {
  std::ofstream out(path, std::ios::binary);
  out << R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],)"
      << R"( "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": [)" << '\n';
  const char* kernels[] = {
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
      "kernel__5x_cublas",
      "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
      "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
      "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
      "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
      "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
      "at::detail::Array<char*, 3>)",
      "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, "
      "float, "
      "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"};
  std::size_t written = 0;
  int64_t kernel_count = 0;
  int64_t ts_ns = 1'000'000;
  int64_t external_id = 1;
  std::string event;
  bool first = true;
  while (written < target_bytes) {
    for (int op = 0; op < 8; ++op) {
      int64_t id = external_id++;
      const char* kernel = kernels[op % 4];
      bool comm = op == 7;
      event = fmt::format(
          R"({}{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": {}.{:03}, )"
          R"("dur": 12.250, "args": {{"External id": {},"Record function id": 0, "Sequence number": {}, )"
          R"("Fwd thread id": 0, "Ev Idx": {}, "Input Dims": [[4096, 4096], [4096, 4096]], )"
          R"("Input type": ["c10::BFloat16", "c10::BFloat16"], "Input Strides": [[4096, 1], [1, 4096]], )"
          R"("Concrete Inputs": ["", ""]}}}},)"
          "\n"
          R"({{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, )"
          R"("ts": {}.{:03}, "dur": 4.500, "args": {{"External id": {}, "cbid": 211, "correlation": {}}}}},)"
          "\n"
          R"({{"ph": "f", "id": {}, "pid": 0, "tid": 7, "ts": {}.{:03}, "cat": "ac2g", "name": "ac2g", "bp": "e"}},)"
          "\n",
          first ? "" : ",\n", ts_ns / 1000, ts_ns % 1000, id, id, id, ts_ns / 1000 + 1, ts_ns % 1000, id, id,
          id, ts_ns / 1000 + 8, ts_ns % 1000);
      first = false;
      if (comm) {
        event += fmt::format(
            R"~({{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, )~"
            R"~(unsigned long, ncclWork*)", "pid": 0, "tid": 20, "ts": {}.{:03}, "dur": 80.125, "args": {{)~"
            R"~("External id": {}, "queued": 0, "device": 0, "context": 1, "stream": 20, "correlation": {}, )~"
            R"~("registers per thread": 96, "shared memory": 0, "grid": [2, 1, 1], "block": [256, 1, 1], )~"
            R"~("Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, )~"
            R"~("Group size": 8, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", )~"
            R"~("Process Group Name": "0", "Process Group Description": "default_pg", )~"
            R"~("Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}}}})~",
            ts_ns / 1000 + 8, ts_ns % 1000, id, id);
      } else {
        event += fmt::format(
            R"~({{"ph": "X", "cat": "kernel", "name": "{}", "pid": 0, "tid": 7, "ts": {}.{:03}, "dur": 20.375, )~"
            R"~("args": {{"External id": {}, "queued": 0, "device": 0, "context": 1, "stream": 7, )~"
            R"~("correlation": {}, "registers per thread": 168, "shared memory": 213248, )~"
            R"~("blocks per SM": 1.000000, "warps per SM": 3.000000, "grid": [132, 1, 1], )~"
            R"~("block": [384, 1, 1], "est. achieved occupancy %": 0}}}})~",
            kernel, ts_ns / 1000 + 8, ts_ns % 1000, id, id);
      }
      out << event;
      written += event.size();
      ++kernel_count;
      ts_ns += 25'125;
    }
  }
  out << "\n],\n"
      << R"("traceName": "bench", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1763800000000000000})"
      << '\n';
  return kernel_count;
}

struct NullSax : nlohmann::json_sax<nlohmann::json> {
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

double cpu_seconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int repeat = 3;
  std::string path = "/tmp/calo_bench_trace.json";
  bool op_shapes = false;
  for (int arg = 1; arg + 1 < argc; arg += 2) {
    std::string flag = argv[arg];
    if (flag == "--mib") mib = std::stoul(argv[arg + 1]);
    if (flag == "--repeat") repeat = std::stoi(argv[arg + 1]);
    if (flag == "--path") path = argv[arg + 1];
    if (flag == "--op-shapes") op_shapes = std::string(argv[arg + 1]) == "1";
  }
  int64_t kernels_written = write_trace(path, mib << 20);
  std::ifstream probe(path, std::ios::binary | std::ios::ate);
  double megabytes = static_cast<double>(probe.tellg()) / 1e6;
  fmt::print("# bench_trace_ingest: calo ingest scanner vs nlohmann::json SAX on a generated Kineto trace\n");
  fmt::print("# trace: {} ({:.1f} MB, {} GPU kernels), repeat {}, one core, file in page cache\n", path,
             megabytes, kernels_written, repeat);
  std::vector<double> calo_s;
  std::vector<double> calo_cpu_s;
  int errors = 0;
  for (int run = 0; run < repeat; ++run) {
    auto start = std::chrono::steady_clock::now();
    double cpu_start = cpu_seconds();
    auto data = calo::analyze::ingest_traces({path}, op_shapes);
    calo_s.push_back(seconds_since(start));
    calo_cpu_s.push_back(cpu_seconds() - cpu_start);
    if (static_cast<int64_t>(data.kernels.size()) != kernels_written) ++errors;
    if (op_shapes == data.ops.empty()) ++errors;  // shapes kept exactly when asked
  }
  std::vector<double> sax_s;
  std::vector<double> sax_cpu_s;
  {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (int run = 0; run < std::min(repeat, 2); ++run) {
      NullSax handler;
      auto start = std::chrono::steady_clock::now();
      double cpu_start = cpu_seconds();
      bool ok = nlohmann::json::sax_parse(text, &handler);
      sax_s.push_back(seconds_since(start));
      sax_cpu_s.push_back(cpu_seconds() - cpu_start);
      if (!ok) ++errors;
    }
  }
  for (auto* list : {&calo_s, &calo_cpu_s, &sax_s, &sax_cpu_s}) std::sort(list->begin(), list->end());
  // Wall time is what a user waits; CPU time is the single-core cost (they differ on a loaded machine).
  fmt::print("{:<24} {:>10} {:>10} {:>12} {:>12}\n", "parser", "wall_s", "cpu_s", "MB/s_wall", "MB/s_cpu");
  fmt::print("{:<24} {:>10.3f} {:>10.3f} {:>12.1f} {:>12.1f}\n",
             op_shapes ? "calo ingest (op shapes)" : "calo ingest (full)", calo_s.front(), calo_cpu_s.front(),
             megabytes / calo_s.front(), megabytes / calo_cpu_s.front());
  fmt::print("{:<24} {:>10.3f} {:>10.3f} {:>12.1f} {:>12.1f}\n", "nlohmann sax (no-op)", sax_s.front(),
             sax_cpu_s.front(), megabytes / sax_s.front(), megabytes / sax_cpu_s.front());
  fmt::print("# errors: {}\n", errors);
  fmt::print("ingest_MBps_per_core={:.1f} (wall {:.1f}; nlohmann SAX {:.1f} per core, speedup {:.2f}x)\n",
             megabytes / calo_cpu_s.front(), megabytes / calo_s.front(), megabytes / sax_cpu_s.front(),
             sax_cpu_s.front() / calo_cpu_s.front());
  std::remove(path.c_str());
  return errors == 0 ? 0 : 1;
}
