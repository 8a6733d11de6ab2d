#include "sim/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/config.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/json_fields.h"

namespace calo::sim {

namespace {

using core::ConfigReader;

constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;

/// Reads a number in [low, high] at `key` (required unless `fallback` > 0). The ranges span every real device
/// by orders of magnitude (upper bounds are generous: tests model near-ideal links) but keep the simulated
/// work bounded: 1e-12 TFLOPS made one step last 1e24 s, and the power trace of it never finished.
double physical(const ConfigReader& reader, const std::string& origin, const std::string& key, double low,
                double high, double fallback = -1) {
  double value = fallback > 0 ? reader.get_double(key, fallback) : reader.get_double(key);
  require_input(value >= low && value <= high,
                fmt::format("{}: '{}' = {} is outside what any device has; use a value in [{}, {}]", origin,
                            key, value, low, high));
  return value;
}

/// Reads a number in [low, high] at `key`, `fallback` when absent.
double bounded(const ConfigReader& reader, const std::string& origin, const std::string& key, double fallback,
               double low, double high) {
  double value = reader.get_double(key, fallback);
  require_input(
      value >= low && value <= high,
      fmt::format("{}: '{}' = {} is out of range; use a value in [{}, {}]", origin, key, value, low, high));
  return value;
}

/// Reads an integer in [low, high] at `key` (required when `fallback` is empty). Checked before it is
/// narrowed to int: 4294967304 GPUs per node used to become 8.
int integer_in(const ConfigReader& reader, const std::string& origin, const std::string& key,
               std::optional<long long> fallback, long long low, long long high) {
  const long long value = fallback ? reader.get_int(key, *fallback) : reader.get_int(key);
  require_input(value >= low && value <= high,
                fmt::format("{}: '{}' = {} is out of range; use {}..{}", origin, key, value, low, high));
  return static_cast<int>(value);
}

const nlohmann::json& section(const nlohmann::json& object, const std::string& origin, const std::string& key,
                              bool required) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  auto found = object.find(key);
  if (found == object.end() || found->is_null()) {
    require_input(!required,
                  fmt::format("{}: missing section '{}' (see data/clusters/h200-hgx.yaml)", origin, key));
    return kEmpty;
  }
  require_input(found->is_object(), fmt::format("{}: '{}' must be a mapping", origin, key));
  return *found;
}

std::vector<double> number_list(const nlohmann::json& object, const std::string& origin,
                                const std::string& key, int expected_size) {
  std::vector<double> values;
  auto found = object.find(key);
  if (found == object.end() || found->is_null()) return values;
  require_input(found->is_array(), fmt::format("{}: '{}' must be a list of numbers", origin, key));
  for (const auto& item : *found) {
    require_input(item.is_number(),
                  fmt::format("{}: '{}' must hold numbers, got {}", origin, key, item.dump()));
    values.push_back(item.get<double>());
  }
  if (values.empty()) return values;
  require_input(static_cast<int>(values.size()) == expected_size,
                fmt::format("{}: '{}' has {} entries; give one per GPU slot (node.gpus = {})", origin, key,
                            values.size(), expected_size));
  return values;
}

ComputeEfficiency parse_efficiency(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"gemm_max", "gemm_half_dim", "attention_max", "attention_half_seq",
                              "attention_half_rows", "attention_backward_fraction", "memory_max",
                              "memory_half_bytes", "kernel_overhead_us", "op_time_scale", "gemm_fp8_max",
                              "gemm_fp8_rowwise_max"});
  ComputeEfficiency efficiency;
  efficiency.gemm_max = bounded(reader, origin, "gemm_max", efficiency.gemm_max, 0.01, 1.0);
  efficiency.gemm_half_dim = bounded(reader, origin, "gemm_half_dim", efficiency.gemm_half_dim, 0, 1e6);
  efficiency.gemm_fp8_max = bounded(reader, origin, "gemm_fp8_max", 0, 0, 1.0);
  efficiency.gemm_fp8_rowwise_max = bounded(reader, origin, "gemm_fp8_rowwise_max", 0, 0, 1.0);
  efficiency.attention_max = bounded(reader, origin, "attention_max", efficiency.attention_max, 0.01, 1.0);
  efficiency.attention_half_seq =
      bounded(reader, origin, "attention_half_seq", efficiency.attention_half_seq, 0, 1e7);
  efficiency.attention_half_rows =
      bounded(reader, origin, "attention_half_rows", efficiency.attention_half_rows, 0, 1e9);
  efficiency.attention_backward_fraction = bounded(reader, origin, "attention_backward_fraction",
                                                   efficiency.attention_backward_fraction, 0.05, 2.0);
  efficiency.memory_max = bounded(reader, origin, "memory_max", efficiency.memory_max, 0.01, 1.0);
  efficiency.memory_half_bytes =
      bounded(reader, origin, "memory_half_bytes", efficiency.memory_half_bytes, 0, 1e12);
  efficiency.kernel_overhead_s =
      bounded(reader, origin, "kernel_overhead_us", efficiency.kernel_overhead_s / kMicro, 0, 1e4) * kMicro;
  auto scales = object.find("op_time_scale");
  if (scales != object.end() && !scales->is_null()) {
    require_input(scales->is_object(), fmt::format("{}: 'op_time_scale' must map kernel kinds (e.g. "
                                                   "elementwise.cross_entropy) to multipliers",
                                                   origin));
    for (const auto& [kind, value] : scales->items()) {
      require_input(
          value.is_number() && value.get<double>() > 0 && value.get<double>() <= 100,
          fmt::format("{}: op_time_scale.{} = {} must be a number in (0, 100]", origin, kind, value.dump()));
      efficiency.op_time_scale[kind] = value.get<double>();
    }
  }
  return efficiency;
}

ThermalSpec parse_thermal(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"r_die_k_per_w", "r_sink_k_per_w", "tau_die_s", "tau_sink_s", "slowdown_c",
                              "slowdown_mhz_per_c", "hw_slowdown_c", "leakage_w_per_c", "leakage_ref_c",
                              "cooling_cut_max", "cooling_start_c", "cooling_span_c", "cooling_tau_s"});
  ThermalSpec thermal;
  thermal.r_die_k_per_w = bounded(reader, origin, "r_die_k_per_w", thermal.r_die_k_per_w, 0, 10);
  thermal.r_sink_k_per_w = bounded(reader, origin, "r_sink_k_per_w", thermal.r_sink_k_per_w, 0, 10);
  thermal.tau_die_s = physical(reader, origin, "tau_die_s", 1e-9, 1e9, thermal.tau_die_s);
  thermal.tau_sink_s = physical(reader, origin, "tau_sink_s", 1e-9, 1e9, thermal.tau_sink_s);
  thermal.slowdown_c = bounded(reader, origin, "slowdown_c", thermal.slowdown_c, 0, 200);
  thermal.slowdown_mhz_per_c =
      bounded(reader, origin, "slowdown_mhz_per_c", thermal.slowdown_mhz_per_c, 0, 1e4);
  thermal.hw_slowdown_c = bounded(reader, origin, "hw_slowdown_c", thermal.hw_slowdown_c, 0, 200);
  thermal.leakage_w_per_c = bounded(reader, origin, "leakage_w_per_c", thermal.leakage_w_per_c, 0, 100);
  thermal.leakage_ref_c = bounded(reader, origin, "leakage_ref_c", thermal.leakage_ref_c, 0, 200);
  thermal.cooling_cut_max = bounded(reader, origin, "cooling_cut_max", thermal.cooling_cut_max, 0, 0.95);
  thermal.cooling_start_c = bounded(reader, origin, "cooling_start_c", thermal.cooling_start_c, 0, 200);
  thermal.cooling_span_c = bounded(reader, origin, "cooling_span_c", thermal.cooling_span_c, 0.1, 100);
  thermal.cooling_tau_s = bounded(reader, origin, "cooling_tau_s", thermal.cooling_tau_s, 0.1, 3600);
  require_input(thermal.hw_slowdown_c >= thermal.slowdown_c,
                fmt::format("{}: hw_slowdown_c ({}) must be >= slowdown_c ({})", origin,
                            thermal.hw_slowdown_c, thermal.slowdown_c));
  return thermal;
}

PowerControlSpec parse_power_control(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"response_ms", "sample_window_ms", "average_ms", "raise_response_ms"});
  PowerControlSpec control;
  control.response_s = bounded(reader, origin, "response_ms", control.response_s * 1e3, 0.1, 1e5) * 1e-3;
  control.sample_window_s =
      bounded(reader, origin, "sample_window_ms", control.sample_window_s * 1e3, 0.1, 1e4) * 1e-3;
  control.average_s = bounded(reader, origin, "average_ms", control.average_s * 1e3, 0, 1e5) * 1e-3;
  // Optional: a controller that raises the clock more slowly than it cuts it (0 or absent: one response).
  control.raise_response_s = bounded(reader, origin, "raise_response_ms", 0, 0, 1e5) * 1e-3;
  return control;
}

GpuSpec parse_gpu(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys(
      {"name", "peak_bf16_tflops", "peak_fp32_tflops", "peak_fp8_tflops", "hbm_bandwidth_gb_s", "memory_gib",
       "power_limit_w", "idle_power_w", "wait_power_w", "wait_power_decay_ms", "max_sm_mhz", "min_sm_mhz",
       "clock_step_mhz", "clock_power_exponent", "active_power_w", "efficiency", "thermal", "power_control"});
  GpuSpec gpu;
  gpu.name = reader.get_string("name");
  // At least 1 GFLOP/s: a 2-core VM's CPU backend calibrates to ~0.01 TFLOP/s (the main job's cpu-host fit).
  // fp32 defaults to bf16 / 16, so its floor is the bf16 floor / 16: a file that leaves it out always loads.
  constexpr double kMinBf16Tflops = 1e-3, kDefaultBf16PerFp32 = 16;
  gpu.peak_bf16_flops = physical(reader, origin, "peak_bf16_tflops", kMinBf16Tflops, 1e7) * kTera;
  gpu.peak_fp32_flops = physical(reader, origin, "peak_fp32_tflops", kMinBf16Tflops / kDefaultBf16PerFp32,
                                 1e7, gpu.peak_bf16_flops / kTera / kDefaultBf16PerFp32) *
                        kTera;
  // Optional: 0 or absent is a card without FP8 tensor cores, which refuses --precision fp8.
  gpu.peak_fp8_flops = bounded(reader, origin, "peak_fp8_tflops", 0, 0, 1e7) * kTera;
  gpu.hbm_bandwidth_bytes_per_s = physical(reader, origin, "hbm_bandwidth_gb_s", 1, 1e12) * kGiga;
  gpu.memory_bytes = physical(reader, origin, "memory_gib", 0.01, 1e5) * 1024.0 * 1024.0 * 1024.0;
  gpu.power_limit_w = physical(reader, origin, "power_limit_w", 1, 1e5);
  gpu.idle_power_w = physical(reader, origin, "idle_power_w", 0.01, 1e5);
  require_input(gpu.idle_power_w < gpu.power_limit_w,
                fmt::format("{}: idle_power_w ({}) must be below power_limit_w ({})", origin,
                            gpu.idle_power_w, gpu.power_limit_w));
  gpu.wait_power_w = bounded(reader, origin, "wait_power_w", 0, 0, 1e4);
  // Divided, not multiplied by 1e-3: ms -> s -> ms then gives back the same double (a round trip is exact).
  gpu.wait_power_decay_s = bounded(reader, origin, "wait_power_decay_ms", 0, 0, 1e6) / 1e3;
  require_input(gpu.idle_power_w + gpu.wait_power_w <= gpu.power_limit_w,
                fmt::format("{}: idle_power_w + wait_power_w ({} W) must not exceed power_limit_w ({} W): a "
                            "waiting GPU draws less than the cap",
                            origin, gpu.idle_power_w + gpu.wait_power_w, gpu.power_limit_w));
  gpu.max_sm_mhz = physical(reader, origin, "max_sm_mhz", 10, 1e5);
  gpu.min_sm_mhz = physical(reader, origin, "min_sm_mhz", 1, 1e5, gpu.max_sm_mhz / 4);
  require_input(
      gpu.min_sm_mhz <= gpu.max_sm_mhz,
      fmt::format("{}: min_sm_mhz ({}) must be <= max_sm_mhz ({})", origin, gpu.min_sm_mhz, gpu.max_sm_mhz));
  gpu.clock_step_mhz = physical(reader, origin, "clock_step_mhz", 1, 1e4, 15);
  gpu.clock_power_exponent = bounded(reader, origin, "clock_power_exponent", 1.25, 0.5, 4.0);
  const auto& power = section(object, origin, "active_power_w", true);
  ConfigReader power_reader(power, origin + ": active_power_w");
  std::vector<std::string> class_names;
  for (int index = 0; index < kNumPowerClasses; ++index)
    class_names.emplace_back(to_string(PowerClass(index)));
  power_reader.reject_unknown_keys(class_names);
  for (int index = 0; index < kNumPowerClasses; ++index) {
    // An FP8 GEMM draws what a bf16 one does until a measurement says otherwise.
    const double fallback_w = PowerClass(index) == PowerClass::kGemmFp8 ? gpu.active_power_w[0] : 0;
    gpu.active_power_w[index] =
        bounded(power_reader, origin + ": active_power_w", class_names[index], fallback_w, 0, 1e4);
  }
  require_input(
      gpu.active_power_w[0] > 0,
      fmt::format("{}: active_power_w.gemm must be > 0 (the power a full-speed GEMM adds to idle)", origin));
  gpu.efficiency = parse_efficiency(section(object, origin, "efficiency", false), origin + ": efficiency");
  gpu.thermal = parse_thermal(section(object, origin, "thermal", false), origin + ": thermal");
  gpu.power_control =
      parse_power_control(section(object, origin, "power_control", false), origin + ": power_control");
  return gpu;
}

NodeSpec parse_node(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"gpus", "nvlink_bandwidth_gb_s", "nvlink_topology", "nvlink_latency_us",
                              "pcie_bandwidth_gb_s", "inlet_c", "slot_inlet_offset_c", "slot_r_scale"});
  NodeSpec node;
  node.gpus = integer_in(reader, origin, "gpus", std::nullopt, 1, 64);  // GPUs per node
  node.nvlink_bandwidth_bytes_per_s = physical(reader, origin, "nvlink_bandwidth_gb_s", 0.01, 1e12) * kGiga;
  const std::string topology = reader.get_string("nvlink_topology", "switch");
  require_input(
      topology == "switch" || topology == "direct",
      fmt::format("{}: nvlink_topology '{}' is not modeled; use switch (NVSwitch) or direct (a full "
                  "mesh of GPU-to-GPU links)",
                  origin, topology));
  node.nvlink_topology = topology == "direct" ? NvlinkTopology::kDirect : NvlinkTopology::kSwitch;
  node.nvlink_latency_s = bounded(reader, origin, "nvlink_latency_us", 3, 0, 1e4) * kMicro;
  node.pcie_bandwidth_bytes_per_s = physical(reader, origin, "pcie_bandwidth_gb_s", 0.01, 1e12, 64) * kGiga;
  node.inlet_c = bounded(reader, origin, "inlet_c", 25, -20, 80);
  node.slot_inlet_offset_c = number_list(object, origin, "slot_inlet_offset_c", node.gpus);
  node.slot_r_scale = number_list(object, origin, "slot_r_scale", node.gpus);
  for (double scale : node.slot_r_scale) {
    require_input(scale > 0, fmt::format("{}: slot_r_scale entries must be > 0, got {}", origin, scale));
  }
  return node;
}

NetworkSpec parse_network(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"nics_per_node", "nic_bandwidth_gbit_s", "latency_us", "topology",
                              "nodes_per_leaf", "oversubscription"});
  NetworkSpec network;
  network.nics_per_node = integer_in(reader, origin, "nics_per_node", std::nullopt, 1, 1024);
  network.nic_bandwidth_bytes_per_s =
      physical(reader, origin, "nic_bandwidth_gbit_s", 0.01, 1e13) * kGiga / 8.0;
  network.latency_s = bounded(reader, origin, "latency_us", 5, 0, 1e5) * kMicro;
  network.topology = reader.get_string("topology", network.topology);
  require_input(
      network.topology == "rail-optimized-fat-tree",
      fmt::format("{}: topology '{}' is not modeled; use rail-optimized-fat-tree", origin, network.topology));
  network.nodes_per_leaf = integer_in(reader, origin, "nodes_per_leaf", network.nodes_per_leaf, 1,
                                      std::numeric_limits<int>::max());
  network.oversubscription = bounded(reader, origin, "oversubscription", 1.0, 1.0, 64.0);
  return network;
}

/// The kind named `name` ("all_reduce", ...); InputError listing the kinds otherwise.
graph::CollectiveKind collective_kind_named(const std::string& name, const std::string& origin) {
  using graph::CollectiveKind;
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                              CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll}) {
    if (name == graph::to_string(kind)) return kind;
  }
  throw InputError(
      fmt::format("{}: lines.{} is no collective kind; use all_reduce, all_gather, "
                  "reduce_scatter, all_to_all or p2p",
                  origin, name));
}

/// A line's `fitted_members: [min, max]` (optional): the group sizes it was fitted over.
void parse_fitted_members(const nlohmann::json& entry, const std::string& where, CollectiveLine& line) {
  auto found = entry.find("fitted_members");
  if (found == entry.end() || found->is_null()) return;
  const bool valid = found->is_array() && found->size() == 2 && (*found)[0].is_number_integer() &&
                     (*found)[1].is_number_integer() && (*found)[0].get<int>() >= 2 &&
                     (*found)[1].get<int>() >= (*found)[0].get<int>();
  require_input(valid, fmt::format("{}: fitted_members must be [smallest, largest] group size, 2 <= smallest "
                                   "<= largest (got {})",
                                   where, found->dump()));
  line.fitted_members_min = (*found)[0].get<int>();
  line.fitted_members_max = (*found)[1].get<int>();
}

/// One kind's list of lines at `where` (lines.<kind>).
std::vector<CollectiveLine> parse_line_list(const nlohmann::json& list, const std::string& where) {
  require_input(list.is_array() && !list.empty(),
                fmt::format("{} must be a non-empty list of {{name, bandwidth_scale, latency_scale, "
                            "call_latency_scale, members_half}}",
                            where));
  std::vector<CollectiveLine> lines;
  for (const nlohmann::json& entry : list) {
    require_input(entry.is_object(), fmt::format("{}: each line must be a mapping", where));
    ConfigReader reader(entry, where);
    reader.reject_unknown_keys(
        {"name", "bandwidth_scale", "latency_scale", "call_latency_scale", "members_half", "fitted_members"});
    CollectiveLine line;
    line.name = reader.get_string("name", "");
    line.bandwidth_scale = bounded(reader, where, "bandwidth_scale", 1.0, 1e-3, 10);
    line.latency_scale = bounded(reader, where, "latency_scale", 1.0, 0, 1e3);
    line.call_latency_scale = bounded(reader, where, "call_latency_scale", 0.0, 0, 1e3);
    line.members_half = bounded(reader, where, "members_half", 0.0, 0, 1e3);
    parse_fitted_members(entry, where, line);
    lines.push_back(line);
  }
  return lines;
}

/// `collective.lines` into `collective`: per kind (and `p2p`), a list of {name, bandwidth_scale,
/// latency_scale, call_latency_scale, members_half}; absent = none.
void parse_collective_lines(const nlohmann::json& object, const std::string& origin,
                            CollectiveSpec& collective) {
  auto found = object.find("lines");
  if (found == object.end() || found->is_null()) return;
  require_input(
      found->is_object(),
      fmt::format("{}: 'lines' must map collective kinds (all_reduce, ..., p2p) "
                  "to lists of {{name, bandwidth_scale, latency_scale, call_latency_scale, members_half}}",
                  origin));
  for (const auto& [name, list] : found->items()) {
    const std::string where = fmt::format("{}: lines.{}", origin, name);
    if (name == "p2p") {
      collective.p2p_lines = parse_line_list(list, where);
    } else {
      collective.lines[collective_kind_named(name, origin)] = parse_line_list(list, where);
    }
  }
}

CollectiveSpec parse_collective(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"algorithm", "bw_efficiency_max", "bw_half_bytes", "lines"});
  CollectiveSpec collective;
  collective.algorithm = reader.get_string("algorithm", collective.algorithm);
  require_input(
      collective.algorithm == "ring" || collective.algorithm == "tree" || collective.algorithm == "auto",
      fmt::format("{}: algorithm '{}' is unknown; use ring, tree or auto", origin, collective.algorithm));
  collective.bw_efficiency_max =
      bounded(reader, origin, "bw_efficiency_max", collective.bw_efficiency_max, 0.01, 1);
  collective.bw_half_bytes = bounded(reader, origin, "bw_half_bytes", collective.bw_half_bytes, 0, 1e12);
  parse_collective_lines(object, origin, collective);
  return collective;
}

}  // namespace

constexpr std::array kPowerClassNames{"gemm",      "attention",     "elementwise",
                                      "optimizer", "communication", "gemm_fp8"};
static_assert(kPowerClassNames.size() == kNumPowerClasses);

const char* to_string(PowerClass power_class) {
  return core::enum_name(power_class, kPowerClassNames);
}

double ClusterSpec::slot_inlet_c(int slot) const {
  double offset = node.slot_inlet_offset_c.empty() ? 0.0 : node.slot_inlet_offset_c[slot % node.gpus];
  return node.inlet_c + offset;
}

double ClusterSpec::slot_r_scale(int slot) const {
  return node.slot_r_scale.empty() ? 1.0 : node.slot_r_scale[slot % node.gpus];
}

double ClusterSpec::nic_bandwidth_per_gpu() const {
  return network.nics_per_node * network.nic_bandwidth_bytes_per_s / node.gpus;
}

ClusterSpec parse_cluster(const nlohmann::json& object, const std::string& origin) {
  ConfigReader reader(object, origin);
  reader.reject_unknown_keys(
      {"name", "description", "gpu", "node", "network", "collective", "attention", "calibration"});
  ClusterSpec cluster;
  cluster.name = reader.get_string("name", origin);
  cluster.description = reader.get_string("description", "");
  cluster.gpu = parse_gpu(section(object, origin, "gpu", true), origin + ": gpu");
  cluster.node = parse_node(section(object, origin, "node", true), origin + ": node");
  cluster.network = parse_network(section(object, origin, "network", true), origin + ": network");
  cluster.collective =
      parse_collective(section(object, origin, "collective", false), origin + ": collective");
  cluster.attention =
      parallel::parse_attention(reader.get_string("attention", "fused"), origin + ": attention");
  auto calibration = object.find("calibration");
  if (calibration != object.end() && !calibration->is_null()) cluster.calibration = *calibration;
  return cluster;
}

std::string power_cap_refusal(const GpuSpec& gpu, double cap_w) {
  if (cap_w > gpu.idle_power_w && cap_w <= gpu.power_limit_w) return "";
  return fmt::format(
      "a cap on {} must lie above its idle power ({:.0f} W) and at most its power limit ({:.0f} W): a cap "
      "only "
      "lowers the limit",
      gpu.name, gpu.idle_power_w, gpu.power_limit_w);
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  nlohmann::json object = core::load_preset_or_file("clusters", name_or_path);
  return parse_cluster(object, "cluster '" + name_or_path + "'");
}

nlohmann::json to_json(const CollectiveLine& line) {
  nlohmann::json json = {{"name", line.name},
                         {"bandwidth_scale", line.bandwidth_scale},
                         {"latency_scale", line.latency_scale},
                         {"call_latency_scale", line.call_latency_scale},
                         {"members_half", line.members_half}};
  if (line.fitted_members_max > 0)
    json["fitted_members"] = {line.fitted_members_min, line.fitted_members_max};
  return json;
}

CALO_JSON_FIELDS(ThermalSpec, r_die_k_per_w, r_sink_k_per_w, tau_die_s, tau_sink_s, slowdown_c,
                 slowdown_mhz_per_c, hw_slowdown_c, leakage_w_per_c, leakage_ref_c, cooling_cut_max,
                 cooling_start_c, cooling_span_c, cooling_tau_s)

namespace {

/// A time in ms as a cluster file holds it: to 1e-9 ms, so that a file read and written again is the same
/// file (the seconds kept in memory times 1e3 can land one double away from the value read).
double file_ms(double ms) {
  return std::round(ms * 1e9) / 1e9;
}

/// The members written as they are; efficiency_json adds the kernel overhead in microseconds.
CALO_JSON_WRITER(write_plain_fields, ComputeEfficiency, gemm_max, gemm_half_dim, attention_max,
                 attention_half_seq, attention_half_rows, attention_backward_fraction, memory_max,
                 memory_half_bytes, op_time_scale)

nlohmann::json efficiency_json(const ComputeEfficiency& efficiency) {
  nlohmann::json json;
  write_plain_fields(json, efficiency);
  json["kernel_overhead_us"] = efficiency.kernel_overhead_s / kMicro;
  if (efficiency.gemm_fp8_max > 0) json["gemm_fp8_max"] = efficiency.gemm_fp8_max;
  if (efficiency.gemm_fp8_rowwise_max > 0) json["gemm_fp8_rowwise_max"] = efficiency.gemm_fp8_rowwise_max;
  return json;
}

}  // namespace

nlohmann::json to_json(const ClusterSpec& cluster) {
  const GpuSpec& gpu = cluster.gpu;
  nlohmann::json power = nlohmann::json::object();
  for (int index = 0; index < kNumPowerClasses; ++index) {
    // The FP8 GEMM's power only on a card with FP8 tensor cores (a bf16-only file reads as it was written).
    if (PowerClass(index) == PowerClass::kGemmFp8 && gpu.peak_fp8_flops <= 0) continue;
    power[to_string(PowerClass(index))] = gpu.active_power_w[index];
  }
  nlohmann::json json = {
      {"name", cluster.name},
      {"description", cluster.description},
      {"gpu",
       {{"name", gpu.name},
        {"peak_bf16_tflops", gpu.peak_bf16_flops / kTera},
        {"peak_fp32_tflops", gpu.peak_fp32_flops / kTera},
        {"hbm_bandwidth_gb_s", gpu.hbm_bandwidth_bytes_per_s / kGiga},
        {"memory_gib", gpu.memory_bytes / (1024.0 * 1024.0 * 1024.0)},
        {"power_limit_w", gpu.power_limit_w},
        {"idle_power_w", gpu.idle_power_w},
        {"wait_power_w", gpu.wait_power_w},
        {"wait_power_decay_ms", file_ms(gpu.wait_power_decay_s * 1e3)},
        {"max_sm_mhz", gpu.max_sm_mhz},
        {"min_sm_mhz", gpu.min_sm_mhz},
        {"clock_step_mhz", gpu.clock_step_mhz},
        {"clock_power_exponent", gpu.clock_power_exponent},
        {"active_power_w", power},
        {"efficiency", efficiency_json(gpu.efficiency)},
        {"thermal", gpu.thermal},
        {"power_control",
         {{"response_ms", file_ms(gpu.power_control.response_s * 1e3)},
          {"sample_window_ms", file_ms(gpu.power_control.sample_window_s * 1e3)},
          {"average_ms", file_ms(gpu.power_control.average_s * 1e3)},
          {"raise_response_ms", file_ms(raise_response_ms(gpu.power_control))}}}}},
      {"node",
       {{"gpus", cluster.node.gpus},
        {"nvlink_bandwidth_gb_s", cluster.node.nvlink_bandwidth_bytes_per_s / kGiga},
        {"nvlink_latency_us", cluster.node.nvlink_latency_s / kMicro},
        {"pcie_bandwidth_gb_s", cluster.node.pcie_bandwidth_bytes_per_s / kGiga},
        {"inlet_c", cluster.node.inlet_c},
        {"slot_inlet_offset_c", cluster.node.slot_inlet_offset_c},
        {"slot_r_scale", cluster.node.slot_r_scale}}},
      {"network",
       {{"nics_per_node", cluster.network.nics_per_node},
        {"nic_bandwidth_gbit_s", cluster.network.nic_bandwidth_bytes_per_s * 8.0 / kGiga},
        {"latency_us", cluster.network.latency_s / kMicro},
        {"topology", cluster.network.topology},
        {"nodes_per_leaf", cluster.network.nodes_per_leaf},
        {"oversubscription", cluster.network.oversubscription}}},
      {"collective",
       {{"algorithm", cluster.collective.algorithm},
        {"bw_efficiency_max", cluster.collective.bw_efficiency_max},
        {"bw_half_bytes", cluster.collective.bw_half_bytes}}},
  };
  if (gpu.peak_fp8_flops > 0) json["gpu"]["peak_fp8_tflops"] = gpu.peak_fp8_flops / kTera;
  if (cluster.node.nvlink_topology == NvlinkTopology::kDirect) json["node"]["nvlink_topology"] = "direct";
  if (!cluster.collective.lines.empty() || !cluster.collective.p2p_lines.empty()) {
    nlohmann::json lines = nlohmann::json::object();
    const auto add = [&lines](const std::string& name, const std::vector<CollectiveLine>& list) {
      for (const CollectiveLine& line : list) lines[name].push_back(to_json(line));
    };
    for (const auto& [kind, list] : cluster.collective.lines) add(graph::to_string(kind), list);
    add("p2p", cluster.collective.p2p_lines);
    json["collective"]["lines"] = lines;
  }
  json["attention"] = parallel::to_string(cluster.attention);
  if (!cluster.calibration.is_null()) json["calibration"] = cluster.calibration;
  return json;
}

double nvlink_group_bandwidth(const NodeSpec& node, int members) {
  if (node.nvlink_topology == NvlinkTopology::kSwitch || node.gpus <= 1)
    return node.nvlink_bandwidth_bytes_per_s;
  const int peers = std::clamp(members, 2, node.gpus) - 1;
  return node.nvlink_bandwidth_bytes_per_s * peers / (node.gpus - 1);
}

bool supports_precision(const GpuSpec& gpu, parallel::Precision precision) {
  return precision == parallel::Precision::kBf16 || gpu.peak_fp8_flops > 0;
}

void require_precision(const GpuSpec& gpu, const std::string& cluster_name, parallel::Precision precision) {
  require_input(supports_precision(gpu, precision),
                fmt::format("--precision {}: the {} of cluster {} has no FP8 tensor cores (its file gives no "
                            "peak_fp8_tflops); use --precision bf16, or a cluster of H100, H200 or later",
                            parallel::to_string(precision), gpu.name, cluster_name));
}

}  // namespace calo::sim
