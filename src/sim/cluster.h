// Cluster description for the simulator: GPU, node and network, loaded from YAML (data/clusters/*.yaml).
// Every model parameter the simulator uses lives here so calibration can fit it (docs/SIMULATOR.md).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/layout.h"

namespace calo::sim {

/// Op classes that draw different active power (docs/SIMULATOR.md, "Power"); kGemmFp8 is an FP8 GEMM (its
/// power defaults to the bf16 GEMM's where the cluster file gives none).
enum class PowerClass { kGemm, kAttention, kElementwise, kOptimizer, kCommunication, kGemmFp8 };
/// Number of PowerClass values.
inline constexpr int kNumPowerClasses = 6;
/// Names: "gemm", "attention", "elementwise", "optimizer", "communication", "gemm_fp8".
const char* to_string(PowerClass power_class);

/// Shape-dependent efficiency curves of the compute cost model (fractions of peak).
struct ComputeEfficiency {
  double gemm_max = 0.8;      ///< best achievable fraction of peak FLOP/s for large GEMMs
  double gemm_half_dim = 96;  ///< a GEMM dimension of this size halves that dimension's factor
  /// Best achievable fraction of the FP8 peak for large FP8 GEMMs, one scale per tensor (same dimension
  /// curve); 0 = gemm_max.
  double gemm_fp8_max = 0;
  /// The same for rowwise-scaled FP8 GEMMs (a scale per row and column); 0 = gemm_fp8_max.
  double gemm_fp8_rowwise_max = 0;
  double attention_max = 0.6;       ///< best fraction of peak for the fused attention core
  double attention_half_seq = 256;  ///< sequence length at which attention reaches half its best
  /// Query rows over the whole grid (batch x heads x seq) at which attention fills half the GPU: small
  /// micro-batches launch too few tiles to occupy every SM (0 = no such factor, the uncalibrated default).
  double attention_half_rows = 0;
  /// Efficiency of the attention backward as a fraction of the forward's (flash attention's backward runs
  /// its FLOPs slower than its forward; 1 = the same efficiency, the uncalibrated default).
  double attention_backward_fraction = 1.0;
  double memory_max = 0.85;          ///< best fraction of HBM bandwidth for memory-bound ops
  double memory_half_bytes = 4.0e6;  ///< op size (bytes moved) at which memory ops reach half their best
  double kernel_overhead_s = 4e-6;   ///< fixed launch + tail cost per compute op
  /// Per kernel kind (graph::span_name of a non-GEMM op, e.g. "elementwise.cross_entropy"): multiplier on the
  /// curves' duration, fitted from per-op spans where a kernel is slower or faster than its bound predicts.
  std::map<std::string, double> op_time_scale;
};

/// Thermal RC model parameters of one GPU (two nodes: die and heat sink).
struct ThermalSpec {
  double r_die_k_per_w = 0.025;    ///< die-to-sink thermal resistance
  double r_sink_k_per_w = 0.011;   ///< sink-to-inlet-air thermal resistance
  double tau_die_s = 0.2;          ///< die time constant
  double tau_sink_s = 4.0;         ///< heat-sink time constant
  double slowdown_c = 87.0;        ///< software thermal slowdown starts above this die temperature
  double slowdown_mhz_per_c = 60;  ///< clock reduction per degree above slowdown_c
  double hw_slowdown_c = 95.0;     ///< hardware slowdown: clock drops to min_sm_mhz at or above this
  double leakage_w_per_c = 0;      ///< extra static (leakage) power per degree the die is above leakage_ref_c
  double leakage_ref_c = 60;  ///< die temperature the active power figures hold at (no extra leakage below)
  /// Cooling that answers heat (fans ramping): at full response R_sink is cut by this fraction (0: passive).
  double cooling_cut_max = 0;
  double cooling_start_c = 60;  ///< die temperature the cooling response starts at
  double cooling_span_c = 10;   ///< degrees above cooling_start_c at which the response is full
  double cooling_tau_s = 30;    ///< time constant of the cooling response
};

/// Power-cap controller dynamics and how the driver samples power (docs/SIMULATOR.md, "Power dynamics").
struct PowerControlSpec {
  double response_s =
      0.05;  ///< controller time constant: the clock moves by (cap - P)/cap * f_max per response_s
  double sample_window_s =
      0.02;              ///< each power sample is the mean over this window (the driver's 20 ms samples)
  double average_s = 0;  ///< the controller acts on power averaged with this time constant (0: each tick's)
  double raise_response_s =
      0;  ///< time constant while the seen power is under the cap, raising the clock (0: response_s)
};

/// The response (ms) the controller raises the clock with: raise_response_s, or response_s where that is 0.
inline double raise_response_ms(const PowerControlSpec& control) {
  return (control.raise_response_s > 0 ? control.raise_response_s : control.response_s) * 1e3;
}

/// One GPU model.
struct GpuSpec {
  std::string name;                      ///< product name, e.g. "NVIDIA H200 SXM"
  double peak_bf16_flops = 0;            ///< dense bf16 FLOP/s at max_sm_mhz
  double peak_fp32_flops = 0;            ///< fp32 (non-tensor) FLOP/s at max_sm_mhz
  double peak_fp8_flops = 0;             ///< dense FP8 tensor FLOP/s at max_sm_mhz; 0 = no FP8 tensor cores
  double hbm_bandwidth_bytes_per_s = 0;  ///< HBM bandwidth
  double memory_bytes = 0;               ///< HBM capacity
  double power_limit_w = 0;              ///< enforced power cap
  double idle_power_w = 0;               ///< power with nothing running (clocks up)
  /// Power above idle while the GPU waits inside a step with no compute op running: a pipeline bubble, a
  /// peer that is late, an exposed collective (NCCL kernels spin, clocks stay up). 0 = idle power.
  double wait_power_w = 0;
  /// Time constant (s) over which a waiting GPU's power above idle decays from wait_power_w towards idle; 0
  /// = no decay (every wait at wait_power_w). Short waits stay hot, long bubbles cool.
  double wait_power_decay_s = 0;
  double max_sm_mhz = 0;               ///< highest SM clock
  double min_sm_mhz = 0;               ///< lowest SM clock the controllers use
  double clock_step_mhz = 15;          ///< clock bin size of the DVFS controller
  double clock_power_exponent = 1.25;  ///< active power scales with (f / max)^exponent
  double active_power_w[kNumPowerClasses] = {0, 0, 0, 0, 0, 0};  ///< active power at max clock, full use
  ComputeEfficiency efficiency;                                  ///< compute cost curves
  ThermalSpec thermal;                                           ///< heat model
  PowerControlSpec power_control;                                ///< power-cap controller dynamics
};

/// How a node's GPUs join over NVLink: through NVSwitch chips (every GPU reaches every other over all its
/// links) or directly (a full mesh without switches, each GPU's links split evenly among its peers, as on the
/// HGX H100 4-GPU board: 18 links a GPU, 6 a pair). docs/SIMULATOR.md "NVLink topology".
enum class NvlinkTopology { kSwitch, kDirect };

/// One node (host): GPUs, their NVLink/NVSwitch fabric, and air cooling by slot.
struct NodeSpec {
  int gpus = 8;  ///< GPUs per node
  /// Per-GPU unidirectional NVLink bandwidth over all the GPU's links (through the switch, or summed over the
  /// pairs of a direct mesh: a group reaches the share nvlink_group_bandwidth gives it).
  double nvlink_bandwidth_bytes_per_s = 0;
  NvlinkTopology nvlink_topology = NvlinkTopology::kSwitch;  ///< switch, or a direct full mesh
  double nvlink_latency_s = 3e-6;                            ///< per-hop latency inside the node
  double pcie_bandwidth_bytes_per_s = 0;    ///< per-GPU PCIe bandwidth (host transfers; informational)
  double inlet_c = 25.0;                    ///< air inlet temperature of the chassis
  std::vector<double> slot_inlet_offset_c;  ///< per slot (airflow order): inlet rise seen by that GPU
  std::vector<double> slot_r_scale;         ///< per slot: multiplier on the GPU's thermal resistance
};

/// Scale-out network.
struct NetworkSpec {
  int nics_per_node = 8;                             ///< NICs per node (rails)
  double nic_bandwidth_bytes_per_s = 0;              ///< per-NIC unidirectional bandwidth
  double latency_s = 5e-6;                           ///< per-hop latency (NIC + switch)
  std::string topology = "rail-optimized-fat-tree";  ///< only this topology is modeled
  int nodes_per_leaf = 32;                           ///< nodes whose same-rail NICs share one leaf switch
  double oversubscription = 1.0;  ///< leaf-to-spine oversubscription (>= 1): divides cross-leaf bandwidth
};

/// One regime of a collective kind's time against its size, as NCCL's protocols make them (LL for small
/// messages: low latency, a fraction of the bandwidth; Simple for large ones): the link's bandwidth and
/// per-hop latency, each scaled; fitted over two group sizes, also a latency paid once per call and a
/// bandwidth that grows with the members. docs/SIMULATOR.md "Collective lines".
struct CollectiveLine {
  std::string name;               ///< a label for tables ("small", "large")
  double bandwidth_scale = 1.0;   ///< multiplies the link's bandwidth (> 0)
  double latency_scale = 1.0;     ///< multiplies the link's per-hop latency (>= 0)
  double call_latency_scale = 0;  ///< link latencies paid once per call, whatever the members (>= 0)
  /// Members at which a group reaches half the line's bandwidth: n members get bandwidth_scale · n / (n +
  /// members_half) of the link (>= 0; 0 = every group size the full scale).
  double members_half = 0;
  /// The group sizes (GPUs of one node) the line was fitted over, smallest and largest; 0 = not recorded. A
  /// group outside them extrapolates (collective_line_warnings).
  int fitted_members_min = 0;
  int fitted_members_max = 0;  ///< largest fitted group size (see fitted_members_min)
};

/// Collective algorithm selection and bandwidth efficiency curve.
struct CollectiveSpec {
  std::string algorithm = "auto";  ///< ring | tree | auto (the faster of both per call)
  double bw_efficiency_max = 0.9;  ///< best fraction of link bandwidth a collective achieves
  double bw_half_bytes = 1.0e6;    ///< message size at which efficiency is half its best
  /// Per collective kind, its lines: a call takes the fastest (`calo calibrate` fits them to a size sweep). A
  /// kind without lines runs at the link's bandwidth and latency as they are (one line at scale 1).
  std::map<graph::CollectiveKind, std::vector<CollectiveLine>> lines;
  /// Point-to-point messages' lines (pipeline send/recv, the context-parallel ring; YAML `lines.p2p`): the
  /// fastest per message; none = one line at scale 1 on the efficiency curve.
  std::vector<CollectiveLine> p2p_lines;
};

/// A cluster: GPU, node, network, collectives.
struct ClusterSpec {
  std::string name;           ///< preset or file name
  std::string description;    ///< one line
  GpuSpec gpu;                ///< every GPU is this model
  NodeSpec node;              ///< every node is this
  NetworkSpec network;        ///< the scale-out fabric
  CollectiveSpec collective;  ///< collective algorithms
  /// Attention core the trainings on this cluster run (`attention: fused|unfused`); a layout's --attention
  /// overrides it.
  parallel::AttentionImpl attention = parallel::AttentionImpl::kFused;
  nlohmann::json calibration;  ///< provenance of fitted parameters (`calo calibrate`); null for presets

  /// Inlet air temperature of the GPU in `slot` (0 .. gpus-1).
  double slot_inlet_c(int slot) const;
  /// Thermal resistance multiplier of the GPU in `slot`.
  double slot_r_scale(int slot) const;
  /// Per-GPU share of the node's NIC bandwidth (nics * bw / gpus).
  double nic_bandwidth_per_gpu() const;
};

/// Parses and validates a cluster from its YAML/JSON object; `origin` names the source. Throws InputError
/// naming the key and a valid range.
ClusterSpec parse_cluster(const nlohmann::json& object, const std::string& origin);

/// Loads a preset (data/clusters/NAME.yaml, embedded) or a YAML file by path. Throws InputError.
ClusterSpec load_cluster(const std::string& name_or_path);

/// Why `cap_w` cannot be a power cap of `gpu` (it must lie above the idle power and at most the card's limit:
/// a cap only lowers the limit), or "" when it can. Callers put the input's name in front.
std::string power_cap_refusal(const GpuSpec& gpu, double cap_w);

/// The cluster as JSON (for the run store's config and --json).
nlohmann::json to_json(const ClusterSpec& cluster);

/// One collective line as the cluster file and the calibration's provenance write it: {name, bandwidth_scale,
/// latency_scale, call_latency_scale, members_half[, fitted_members: [min, max]]}.
nlohmann::json to_json(const CollectiveLine& line);

/// Per-GPU unidirectional NVLink bandwidth a group of `members` GPUs of one node reaches (bytes/s): through a
/// switch all of nvlink_bandwidth_bytes_per_s; on a direct mesh the links to its fellow members only,
/// (members - 1) / (gpus - 1) of it (a pair: one pair's links).
double nvlink_group_bandwidth(const NodeSpec& node, int members);

/// Whether `gpu` runs the linears at `precision` (FP8 needs FP8 tensor cores: peak_fp8_tflops > 0).
bool supports_precision(const GpuSpec& gpu, parallel::Precision precision);
/// InputError naming the card, the cluster and the flag unless `gpu` supports `precision`.
void require_precision(const GpuSpec& gpu, const std::string& cluster_name, parallel::Precision precision);

}  // namespace calo::sim
