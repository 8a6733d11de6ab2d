#include "calibrate/kineto_input.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/output_file.h"
#include "core/statistics.h"
#include "sim/cost_model.h"
#include "store/run_store.h"

namespace calo::calibrate {

namespace {

std::optional<graph::CollectiveKind> collective_kind(analyze::KernelCategory category) {
  switch (category) {
    case analyze::KernelCategory::kAllReduce:
      return graph::CollectiveKind::kAllReduce;
    case analyze::KernelCategory::kAllGather:
      return graph::CollectiveKind::kAllGather;
    case analyze::KernelCategory::kReduceScatter:
      return graph::CollectiveKind::kReduceScatter;
    case analyze::KernelCategory::kAllToAll:
      return graph::CollectiveKind::kAllToAll;
    default:
      return std::nullopt;
  }
}

/// The global ranks of a kernel's group, sorted: as recorded, else the first `group_size` ranks.
std::vector<std::int32_t> group_ranks(const analyze::TraceData& data, const analyze::TraceKernel& kernel) {
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(kernel.group_size));
  if (kernel.group >= 0) {
    ranks = data.groups[static_cast<std::size_t>(kernel.group)];
    std::sort(ranks.begin(), ranks.end());
  } else {
    for (int rank = 0; rank < kernel.group_size; ++rank) ranks[static_cast<std::size_t>(rank)] = rank;
  }
  return ranks;
}

/// Bytes of one element of a profiler "Input type" ("c10::BFloat16", "float", ...); 0 if not a tensor type.
double element_bytes(const std::string& type) {
  static const std::map<std::string, double> kSizes = {
      {"c10::BFloat16", 2},      {"c10::Half", 2},        {"float", 4},    {"double", 8},
      {"c10::Float8_e4m3fn", 1}, {"c10::Float8_e5m2", 1}, {"long int", 8}, {"int", 4}};
  const auto found = kSizes.find(type);
  return found == kSizes.end() ? 0 : found->second;
}

double numel(const std::vector<int64_t>& dims) {
  double count = 1;
  for (int64_t dim : dims) count *= static_cast<double>(dim);
  return count;
}

const std::string& input_type(const analyze::TraceOp& op, std::size_t index) {
  static const std::string kNone;
  return index < op.input_types.size() ? op.input_types[index] : kNone;
}

/// GEMM of aten::mm / addmm ([m,k] x [k,n]) or bmm / baddbmm ([b,m,k] x [b,k,n], taken as m*b rows).
std::optional<KernelOp> gemm_op(const analyze::TraceOp& traced) {
  const bool batched = traced.name == "aten::bmm" || traced.name == "aten::baddbmm";
  const std::size_t first = traced.name == "aten::addmm" || traced.name == "aten::baddbmm" ? 1 : 0;
  if (traced.input_dims.size() < first + 2) return std::nullopt;
  const auto& a = traced.input_dims[first];
  const auto& b = traced.input_dims[first + 1];
  const std::size_t rank = batched ? 3 : 2;
  if (a.size() != rank || b.size() != rank || a[rank - 1] != b[rank - 2]) return std::nullopt;
  const double element = element_bytes(input_type(traced, first));
  if (element <= 0) return std::nullopt;
  KernelOp result;
  graph::Op& op = result.timing.op;
  op.kind = graph::OpKind::kGemm;
  op.gemm.m = a[rank - 2] * (batched ? a[0] : 1);
  op.gemm.k = a[rank - 1];
  op.gemm.n = b[rank - 1];
  op.gemm.dtype = element >= 4 ? graph::DType::kFp32 : graph::DType::kBf16;
  const double m = static_cast<double>(op.gemm.m), n = static_cast<double>(op.gemm.n),
               k = static_cast<double>(op.gemm.k);
  op.flops = 2 * m * n * k;
  op.bytes = element * (m * k + k * n + m * n);
  result.shape =
      fmt::format("m={} n={} k={} {}", op.gemm.m, op.gemm.n, op.gemm.k, graph::to_string(op.gemm.dtype));
  return result;
}

/// Fused attention ops whose inputs say their shape and mask: index of q, whether q is [b, h, s, d] (else
/// [b, s, h, d]), index of is_causal among the concrete inputs, backward.
struct AttentionSignature {
  const char* name;
  std::size_t q_index;
  bool heads_before_seq;
  std::size_t causal_index;
  bool backward;
};

std::optional<KernelOp> attention_op(const analyze::TraceOp& traced) {
  static const AttentionSignature kSignatures[] = {{"aten::_cudnn_attention_forward", 0, true, 10, false},
                                                   {"aten::_cudnn_attention_backward", 1, true, 14, true},
                                                   {"aten::_flash_attention_forward", 0, false, 8, false},
                                                   {"aten::_flash_attention_backward", 1, false, 11, true}};
  const AttentionSignature* signature = nullptr;
  for (const auto& candidate : kSignatures) {
    if (traced.name == candidate.name) signature = &candidate;
  }
  if (signature == nullptr || traced.input_dims.size() < signature->q_index + 2 ||
      traced.concrete_inputs.size() <= signature->causal_index)
    return std::nullopt;
  const auto& q = traced.input_dims[signature->q_index];
  const auto& k = traced.input_dims[signature->q_index + 1];
  const std::string& causal = traced.concrete_inputs[signature->causal_index];
  if (q.size() != 4 || k.size() != 4 || (causal != "True" && causal != "False")) return std::nullopt;
  const std::size_t heads_at = signature->heads_before_seq ? 1 : 2,
                    seq_at = signature->heads_before_seq ? 2 : 1;
  KernelOp result;
  graph::Op& op = result.timing.op;
  op.kind = graph::OpKind::kAttention;
  graph::AttentionShape& shape = op.attention;
  shape.batch = static_cast<std::int32_t>(q[0]);
  shape.heads = static_cast<std::int32_t>(q[heads_at]);
  shape.kv_heads = static_cast<std::int32_t>(k[heads_at]);
  shape.seq = static_cast<std::int32_t>(q[seq_at]);
  shape.head_dim = static_cast<std::int32_t>(q[3]);
  shape.causal = causal == "True";
  shape.backward = signature->backward;
  // FLOPs and traffic as the execution graph counts them (graph.cpp, attention()).
  const double forward_flops = 4.0 * shape.batch * static_cast<double>(shape.seq) * shape.seq * shape.heads *
                               shape.head_dim * (shape.causal ? 0.5 : 1.0);
  op.flops = shape.backward ? 2 * forward_flops : forward_flops;
  const double qkvo = element_bytes(input_type(traced, signature->q_index)) * shape.batch * shape.seq *
                      shape.head_dim * (2.0 * shape.heads + 2.0 * shape.kv_heads);
  op.bytes = shape.backward ? 2 * qkvo : qkvo;
  result.shape =
      fmt::format("{} b={} h={} kv={} s={} d={}{}", shape.backward ? "bwd" : "fwd", shape.batch, shape.heads,
                  shape.kv_heads, shape.seq, shape.head_dim, shape.causal ? " causal" : "");
  return result;
}

/// Norm, activation and residual-add ops: memory-bound, bytes = every tensor input + an output the size of
/// the largest input.
std::optional<KernelOp> elementwise_op(const analyze::TraceOp& traced) {
  static const std::map<std::string, graph::ElementwiseKind> kKinds = {
      {"aten::native_layer_norm", graph::ElementwiseKind::kNorm},
      {"aten::native_layer_norm_backward", graph::ElementwiseKind::kNorm},
      {"aten::_fused_rms_norm", graph::ElementwiseKind::kNorm},
      {"aten::_fused_rms_norm_backward", graph::ElementwiseKind::kNorm},
      {"aten::gelu", graph::ElementwiseKind::kActivation},
      {"aten::gelu_backward", graph::ElementwiseKind::kActivation},
      {"aten::silu", graph::ElementwiseKind::kActivation},
      {"aten::silu_backward", graph::ElementwiseKind::kActivation},
      {"aten::add", graph::ElementwiseKind::kResidualAdd},
      {"aten::add_", graph::ElementwiseKind::kResidualAdd}};
  const auto kind = kKinds.find(traced.name);
  if (kind == kKinds.end()) return std::nullopt;
  double bytes = 0, largest = 0;
  for (std::size_t index = 0; index < traced.input_dims.size(); ++index) {
    const double element = element_bytes(input_type(traced, index));
    if (element <= 0 || traced.input_dims[index].empty()) continue;
    const double tensor_bytes = element * numel(traced.input_dims[index]);
    bytes += tensor_bytes;
    largest = std::max(largest, tensor_bytes);
  }
  if (largest <= 0) return std::nullopt;
  KernelOp result;
  graph::Op& op = result.timing.op;
  op.kind = graph::OpKind::kElementwise;
  op.elementwise = kind->second;
  op.bytes = bytes + largest;
  result.shape = fmt::format("bytes={:.0f}", op.bytes);
  return result;
}

/// Per distinct (op, shape): measured and modeled mean time and the achieved fraction of peak (FLOP/s for
/// GEMM and attention at the assumed clock, HBM bandwidth for memory-bound ops).
std::vector<nlohmann::json> op_residuals(const std::vector<KernelOp>& ops, const sim::GpuSpec& gpu) {
  std::map<std::pair<std::string, std::string>, std::vector<const KernelOp*>> groups;
  for (const KernelOp& op : ops) groups[{op.aten, op.shape}].push_back(&op);
  std::vector<nlohmann::json> rows;
  for (const auto& [key, members] : groups) {
    double measured_s = 0, modeled_s = 0;
    for (const KernelOp* op : members) {
      measured_s += op->timing.duration_s;
      modeled_s += modeled_op_s(gpu, op->timing);
    }
    measured_s /= static_cast<double>(members.size());
    modeled_s /= static_cast<double>(members.size());
    const OpTiming& timing = members.front()->timing;
    nlohmann::json row = {{"op", key.first},
                          {"shape", key.second},
                          {"count", members.size()},
                          {"measured_us", measured_s * 1e6},
                          {"modeled_us", modeled_s * 1e6},
                          {"error", (modeled_s - measured_s) / measured_s}};
    if (timing.op.kind == graph::OpKind::kElementwise) {
      row["achieved_hbm_fraction"] = timing.op.bytes / measured_s / gpu.hbm_bandwidth_bytes_per_s;
    } else {
      const double peak_flops =
          (timing.op.kind == graph::OpKind::kGemm && timing.op.gemm.dtype == graph::DType::kFp32
               ? gpu.peak_fp32_flops
               : gpu.peak_bf16_flops) *
          std::min(1.0, timing.clock_mhz / gpu.max_sm_mhz);
      row["achieved_peak_fraction"] = timing.op.flops / measured_s / peak_flops;
    }
    rows.push_back(row);
  }
  return rows;
}

/// Per op class: relative error of the summed modeled time against the summed kernel time.
nlohmann::json class_residuals(const std::vector<KernelOp>& ops, const sim::GpuSpec& gpu) {
  std::map<std::string, std::pair<double, double>> by_class;  // class -> (measured, modeled)
  for (const KernelOp& op : ops) {
    auto& [measured, modeled] = by_class[graph::to_string(op.timing.op.kind)];
    measured += op.timing.duration_s;
    modeled += modeled_op_s(gpu, op.timing);
  }
  nlohmann::json residual = nlohmann::json::object();
  for (const auto& [name, sums] : by_class)
    residual[name + "_time"] = (sums.second - sums.first) / sums.first;
  return residual;
}

void replace_kept(std::vector<std::string>& kept, const std::string& key, const std::string& replacement) {
  for (std::string& entry : kept) {
    if (entry == key) entry = replacement;
  }
}

/// The compute part of fit_kineto(): fits the curves when no run did, else checks the runs' fit against the
/// kernels.
void fit_kernels(const std::vector<KernelOp>& ops, const std::string& label, FitResult& fit) {
  std::vector<OpTiming> timings;
  for (const KernelOp& op : ops) timings.push_back(op.timing);
  auto compute = std::find_if(fit.stages.begin(), fit.stages.end(),
                              [](const StageFit& stage) { return stage.stage == "compute"; });
  const bool runs_fitted = compute != fit.stages.end() && !compute->parameters.empty();
  StageFit stage{runs_fitted ? "kernels" : "compute", {}, {}, ""};
  if (timings.empty()) {
    stage.note =
        "no GEMM, attention, norm or activation kernel whose aten op recorded its shapes "
        "(profile with record_shapes=True)";
  } else if (runs_fitted) {
    stage.note = "compute fitted from the runs' op spans; the traces' kernels check it";
  } else {
    const sim::ComputeEfficiency base = fit.cluster.gpu.efficiency;
    const std::vector<std::string> fixed = undetermined_fields(timings);
    fit.cluster.gpu.efficiency = fit_op_curves(timings, fit.cluster.gpu, fixed);
    stage.parameters = efficiency_parameters(base, fit.cluster.gpu.efficiency, "compute", fixed);
    std::erase_if(fit.kept, [&](const std::string& key) {
      return std::any_of(stage.parameters.begin(), stage.parameters.end(),
                         [&](const ParameterFit& parameter) { return parameter.key == key; });
    });
  }
  if (!timings.empty()) stage.residuals.emplace_back(label, class_residuals(ops, fit.cluster.gpu));
  if (!runs_fitted && compute != fit.stages.end()) {
    *compute = stage;
  } else {
    fit.stages.push_back(stage);
  }
}

}  // namespace

bool is_trace_file(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return std::filesystem::is_regular_file(path) && (name.ends_with(".json") || name.ends_with(".json.gz"));
}

std::vector<std::filesystem::path> ingested_trace_files(const std::filesystem::path& run_dir) {
  if (!std::filesystem::is_directory(run_dir)) return {};
  store::RunReader reader(run_dir);
  const store::RunInfo info = reader.run();
  if (info.kind != store::RunKind::kIngest) return {};
  const nlohmann::json config = nlohmann::json::parse(info.config_json, nullptr, false);
  std::vector<std::filesystem::path> files;
  if (config.is_object() && config.contains("traces") && config["traces"].is_array()) {
    for (const auto& trace : config["traces"]) {
      if (trace.is_string()) files.emplace_back(trace.get<std::string>());
    }
  }
  require_input(!files.empty(), fmt::format("{} is an ingest run that names no trace files; give the Kineto "
                                            "traces to calo calibrate directly",
                                            run_dir.string()));
  for (const auto& file : files) {
    require_input(
        std::filesystem::is_regular_file(file),
        fmt::format("{} was ingested from {}, which is not there any more (kernel shapes and NCCL "
                    "sizes live only in the trace); give the trace files to calo calibrate directly",
                    run_dir.string(), file.string()));
  }
  return files;
}

KinetoInput load_kineto_input(const std::vector<std::filesystem::path>& files, const std::string& label,
                              const sim::GpuSpec& base_gpu) {
  KinetoInput input;
  input.files = files;
  input.label = label;
  input.data = analyze::ingest_traces(files, /*keep_op_shapes=*/true);
  const std::string base_token = gpu_model_token(base_gpu.name);
  for (const auto& file : files) {
    const std::string source = file.string();
    bool has_kernels = false;
    for (const analyze::TraceKernel& kernel : input.data.kernels) {
      const analyze::TraceLane& lane = input.data.lanes[static_cast<std::size_t>(kernel.lane)];
      has_kernels = has_kernels || lane.source_file == source;
    }
    require_input(has_kernels,
                  fmt::format("{} has no GPU kernels; profile with activities=[ProfilerActivity.CPU, "
                              "ProfilerActivity.CUDA] and export the trace of steps that ran on the GPU",
                              source));
    for (const analyze::TraceLane& lane : input.data.lanes) {
      if (lane.source_file != source || lane.device_name.empty()) continue;
      const std::string token = gpu_model_token(lane.device_name);
      require_input(
          token == base_token,
          fmt::format("{} was traced on {} but the --cluster GPU is {}; give a --cluster whose "
                      "GPU is a {}",
                      source, lane.device_name, base_gpu.name, token.empty() ? lane.device_name : token));
      input.gpu_name = lane.device_name;
    }
  }
  return input;
}

std::vector<CollectiveSample> collective_samples(const analyze::TraceData& data,
                                                 const sim::ClusterSpec& cluster) {
  constexpr int kP2pFamily = -1;
  // (kind, group ranks, bytes) -> per lane, the kernel durations in time order. Groups of equal size on
  // different ranks are different samples: they may span different nodes.
  std::map<std::tuple<int, std::vector<std::int32_t>, double>, std::map<int32_t, std::vector<double>>>
      by_shape;
  for (const analyze::TraceKernel& kernel : data.kernels) {
    // A send of a 2-rank group is a p2p sample (family -1; a larger group's metadata does not name the peer),
    // timed by the sender's kernel alone: a receiver that arrives late finds the message already in NCCL's
    // buffers, so its kernel (and the minimum over both) can be shorter than the transfer (H200: 32 MiB in
    // 60 us, beyond NVLink's 450 GB/s).
    const bool p2p = kernel.category == analyze::KernelCategory::kSendRecv && kernel.group_size == 2;
    if (p2p && !kernel.p2p_send) continue;
    const auto kind = collective_kind(kernel.category);
    if (!(kind || p2p) || kernel.message_bytes <= 0 || kernel.group_size < 2) continue;
    const int family = p2p ? kP2pFamily : static_cast<int>(*kind);
    by_shape[{family, group_ranks(data, kernel), kernel.message_bytes}][kernel.lane].push_back(
        static_cast<double>(kernel.t_end_ns - kernel.t_begin_ns) * 1e-9);
  }
  std::vector<CollectiveSample> samples;
  for (const auto& [key, lanes] : by_shape) {
    std::size_t instances = SIZE_MAX;
    for (const auto& [lane, durations] : lanes) instances = std::min(instances, durations.size());
    std::vector<double> last_arrival_s;
    for (std::size_t index = 0; index < instances; ++index) {
      double fastest_s = INFINITY;
      for (const auto& [lane, durations] : lanes) fastest_s = std::min(fastest_s, durations[index]);
      last_arrival_s.push_back(fastest_s);
    }
    CollectiveSample sample;
    sample.p2p = std::get<0>(key) == kP2pFamily;
    if (!sample.p2p) sample.kind = static_cast<graph::CollectiveKind>(std::get<0>(key));
    sample.ranks = std::get<1>(key);
    sample.group_size = static_cast<int>(sample.ranks.size());
    sample.bytes = std::get<2>(key);
    sample.instances = static_cast<int>(instances);
    sample.measured_s = core::midpoint_median(last_arrival_s);
    sample.nodes = sim::place_group(cluster, sample.ranks).nodes;
    sample.fitted = sample.nodes == 1 && sample.measured_s > 0;
    samples.push_back(sample);
  }
  return samples;
}

std::vector<KernelOp> kernel_ops(const analyze::TraceData& data, double clock_mhz) {
  std::map<int32_t, double> op_time_s;  // op index -> summed kernel time
  for (const analyze::TraceKernel& kernel : data.kernels) {
    if (kernel.op < 0 || analyze::is_comm(kernel.category)) continue;
    op_time_s[kernel.op] += static_cast<double>(kernel.t_end_ns - kernel.t_begin_ns) * 1e-9;
  }
  std::vector<KernelOp> ops;
  for (const auto& [index, time_s] : op_time_s) {
    const analyze::TraceOp& traced = data.ops[static_cast<std::size_t>(index)];
    std::optional<KernelOp> op = gemm_op(traced);
    if (!op) op = attention_op(traced);
    if (!op) op = elementwise_op(traced);
    if (!op || time_s <= 0) continue;
    op->aten = traced.name;
    op->timing.duration_s = time_s;
    op->timing.clock_mhz = clock_mhz;
    ops.push_back(std::move(*op));
  }
  return ops;
}

KinetoFit fit_kineto(const std::vector<KinetoInput>& inputs, double clock_mhz,
                     const std::string& clock_source, FitResult& fit) {
  KinetoFit kineto;
  kineto.clock_mhz = clock_mhz;
  kineto.clock_source = clock_source;
  for (const KinetoInput& input : inputs) {
    kineto.labels.push_back(input.label);
    const auto samples = collective_samples(input.data, fit.cluster);
    kineto.collectives.insert(kineto.collectives.end(), samples.begin(), samples.end());
    auto ops = kernel_ops(input.data, clock_mhz);
    std::move(ops.begin(), ops.end(), std::back_inserter(kineto.ops));
  }
  const std::string label = fmt::format("{}", fmt::join(kineto.labels, "+"));
  StageFit collective = fit_collective_stage(kineto.collectives, fit.cluster, label, kineto.lines);
  if (!collective.parameters.empty()) {
    replace_kept(fit.kept, "node (NVLink, slots)", "node (slots)");
    replace_kept(fit.kept, "collective", "collective (algorithm, bw_efficiency_max, bw_half_bytes)");
  }
  fit.stages.push_back(collective);
  fit_kernels(kineto.ops, label, fit);
  kineto.op_residuals = op_residuals(kineto.ops, fit.cluster.gpu);
  return kineto;
}

nlohmann::json kineto_provenance(const std::vector<KinetoInput>& inputs, const KinetoFit& kineto) {
  nlohmann::json traces = nlohmann::json::array();
  for (const KinetoInput& input : inputs) {
    std::vector<std::string> files;
    for (const auto& file : input.files) files.push_back(core::provenance_path(file));
    traces.push_back({{"label", input.label},
                      {"files", files},
                      {"gpu", input.gpu_name},
                      {"ranks", input.data.lanes.size()},
                      {"kernels", input.data.kernels.size()}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveSample& sample : kineto.collectives) {
    collectives.push_back({{"collective", collective_name(sample)},
                           {"group_size", sample.group_size},
                           {"ranks", sample.ranks},
                           {"nodes", sample.nodes},
                           {"bytes", sample.bytes},
                           {"instances", sample.instances},
                           {"measured_us", sample.measured_s * 1e6},
                           {"modeled_us", sample.modeled_s * 1e6},
                           {"error", (sample.modeled_s - sample.measured_s) / sample.measured_s},
                           {"fitted", sample.fitted}});
  }
  nlohmann::json lines = nlohmann::json::array();
  for (const CollectiveLineFit& fitted : kineto.lines) {
    nlohmann::json kind_lines = nlohmann::json::array();
    for (const sim::CollectiveLine& line : fitted.lines) kind_lines.push_back(sim::to_json(line));
    lines.push_back({{"collective", fitted.name},
                     {"sizes", fitted.sizes},
                     {"smallest_bytes", fitted.smallest_bytes},
                     {"largest_bytes", fitted.largest_bytes},
                     {"split_bytes", fitted.split_bytes},
                     {"lines", kind_lines},
                     {"max_error", fitted.max_error},
                     {"max_held_out_error", fitted.max_held_out_error},
                     {"rms_error", fitted.rms_error},
                     {"rms_held_out_error", fitted.rms_held_out_error},
                     {"held_out_worst_bytes", fitted.held_out_worst_bytes},
                     {"single_line_max_error", fitted.single_line_max_error}});
  }
  return {
      {"traces", traces},           {"clock_mhz", kineto.clock_mhz}, {"clock_source", kineto.clock_source},
      {"collectives", collectives}, {"collective_lines", lines},     {"ops", kineto.op_residuals}};
}

}  // namespace calo::calibrate
