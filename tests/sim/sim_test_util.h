// Helpers shared by the simulator tests: temporary files and small graphs.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/scratch.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "sim/cluster.h"

namespace calo::sim::testing {

/// A fresh directory in this test process's scratch (tests/common/scratch.h), unique per test.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = calo::testing::scratch_path("sim-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Writes `text` to `path` and returns the path as a string.
inline std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

/// Builds the graph of `model_name` (preset or file) under a layout after validation.
inline graph::Graph make_graph(const std::string& model_name, parallel::Layout layout) {
  const model::ModelSpec spec = model::load_model(model_name);
  return graph::build_graph(spec, parallel::resolve_layout(spec, layout));
}

/// A cluster YAML with near-ideal links (for closed forms that ignore communication) and no launch overhead.
inline std::string ideal_cluster_yaml(int gpus_per_node) {
  return "name: ideal\n"
         "gpu:\n"
         "  name: test-gpu\n"
         "  peak_bf16_tflops: 1000\n"
         "  hbm_bandwidth_gb_s: 5000\n"
         "  memory_gib: 141\n"
         "  power_limit_w: 700\n"
         "  idle_power_w: 100\n"
         "  max_sm_mhz: 2000\n"
         "  active_power_w: {gemm: 800, attention: 700, elementwise: 300, optimizer: 300, communication: "
         "100}\n"
         "  efficiency: {kernel_overhead_us: 0}\n"
         "node:\n"
         "  gpus: " +
         std::to_string(gpus_per_node) +
         "\n"
         "  nvlink_bandwidth_gb_s: 1.0e9\n"
         "  nvlink_latency_us: 0\n"
         "network:\n"
         "  nics_per_node: 8\n"
         "  nic_bandwidth_gbit_s: 1.0e10\n"
         "  latency_us: 0\n";
}

}  // namespace calo::sim::testing
