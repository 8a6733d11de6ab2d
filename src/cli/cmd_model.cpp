// `calo model NAME|FILE [layout flags] [--json] [--list]`: architecture, parameters, FLOPs and memory per
// GPU.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/layout_flags.h"
#include "core/config.h"
#include "core/json_fields.h"
#include "core/table.h"
#include "model/accounting.h"
#include "parallel/memory.h"

namespace calo::model {

CALO_JSON_FIELDS(ParameterCounts, total, active_per_token, embedding, output, per_layer_attention,
                 per_layer_mlp, per_layer_router, per_layer_norm, final_norm, positions, per_expert)

}  // namespace calo::model

namespace calo::cli {
namespace {

struct ModelFlags {
  LayoutFlags layout;
  bool json = false;
  bool list = false;
};

std::string architecture_line(const model::ModelSpec& spec) {
  std::string kind = spec.is_moe() ? fmt::format("MoE, {} experts, top-{}", spec.num_experts, spec.moe_top_k)
                                   : std::string("dense");
  return fmt::format("{} layers, hidden {}, FFN {}{}, {} heads ({} KV, head dim {}), vocab {}, seq {}; {}",
                     spec.num_layers, spec.hidden_size, spec.ffn_hidden_size,
                     spec.is_moe() ? " per expert" : "", spec.num_attention_heads, spec.num_kv_heads,
                     spec.head_dim, spec.vocab_size, spec.seq_length, kind);
}

std::string components_line(const model::ModelSpec& spec) {
  return fmt::format("{}, {}, {} positions, {} output, {}{}", model::activation_label(spec.activation),
                     spec.norm == model::NormKind::kRmsNorm ? "RMSNorm" : "LayerNorm",
                     spec.position_embedding == model::PositionEmbedding::kRope ? "rotary" : "learned",
                     spec.tied_embeddings ? "tied" : "untied", spec.linear_bias ? "biases" : "no biases",
                     spec.dropout > 0 ? fmt::format(", dropout {}", spec.dropout) : std::string());
}

nlohmann::json parameters_json(const model::ParameterCounts& counts) {
  nlohmann::json json = counts;
  json["per_layer"] = counts.per_layer();
  return json;
}

int list_presets(bool json) {
  nlohmann::json presets = nlohmann::json::array();
  core::TextTable table({"preset", "layers", "hidden", "experts", "parameters", "active"});
  for (const std::string& name : core::preset_names("models")) {
    const model::ModelSpec spec = model::load_model(name);
    const model::ParameterCounts counts = model::count_parameters(spec);
    presets.push_back({{"name", name},
                       {"num_layers", spec.num_layers},
                       {"hidden_size", spec.hidden_size},
                       {"num_experts", spec.num_experts},
                       {"parameters", counts.total},
                       {"active_parameters", counts.active_per_token}});
    table.add_row({name, std::to_string(spec.num_layers), std::to_string(spec.hidden_size),
                   spec.is_moe() ? fmt::format("{} top-{}", spec.num_experts, spec.moe_top_k) : "-",
                   core::format_count(counts.total), core::format_count(counts.active_per_token)});
  }
  if (json) {
    print_json(presets);
  } else {
    fmt::print("{}", table.render());
  }
  return 0;
}

/// What `calo model` shows of a model under a layout.
struct ModelFigures {
  model::ParameterCounts counts;
  model::FlopsPerToken flops;                     ///< per token
  double recompute_flops = 0;                     ///< per token, under the layout's recomputation
  double tokens_per_iteration = 0;                ///< global batch x sequence length
  std::vector<parallel::MemoryBreakdown> stages;  ///< memory per GPU of each pipeline stage
  parallel::MemoryBreakdown most_loaded;          ///< memory per GPU of the most loaded stage
};

/// Counts, FLOPs and memory of `spec` under `layout`.
ModelFigures model_figures(const model::ModelSpec& spec, const parallel::Layout& layout) {
  const int seq = layout.seq_length;
  ModelFigures figures;
  figures.tokens_per_iteration = static_cast<double>(layout.global_batch) * seq;
  figures.counts = model::count_parameters(spec);
  figures.flops = model::flops_per_token(spec, seq);
  figures.recompute_flops = model::recompute_flops_per_token(spec, seq, layout.recompute);
  for (int stage = 0; stage < layout.pp; ++stage)
    figures.stages.push_back(parallel::memory_for_stage(spec, layout, stage));
  figures.most_loaded = parallel::memory_per_gpu(spec, layout);
  return figures;
}

/// Activation bytes per layer of one micro-batch on one tp rank under recomputation `mode`.
/// fp8-delayed's linears save their inputs in FP8 (docs/METRICS.md "FP8 training").
double activation_bytes(const model::ModelSpec& spec, const parallel::Layout& layout, model::Recompute mode) {
  double bytes = 0;
  for (const model::ActivationTerm& term : model::layer_activation_terms(
           spec, layout.seq_length / layout.cp, layout.micro_batch, layout.tp, layout.sequence_parallel, mode,
           parallel::is_fused(layout.attention), layout.precision == parallel::Precision::kFp8Delayed))
    bytes += term.bytes;
  return bytes;
}

/// Prints everything `calo model` shows as one JSON object.
void print_model_json(const model::ModelSpec& spec, const parallel::Layout& layout,
                      const ModelFigures& figures) {
  const model::FlopsPerToken& flops = figures.flops;
  const double recompute_flops = figures.recompute_flops;
  const double tokens_per_iteration = figures.tokens_per_iteration;
  auto activations = [&](model::Recompute mode) { return activation_bytes(spec, layout, mode); };
  nlohmann::json stage_list = nlohmann::json::array();
  for (const auto& memory : figures.stages) stage_list.push_back(parallel::to_json(memory));
  print_json(
      {{"model", model::to_json(spec)},
       {"layout", parallel::to_json(layout)},
       {"parameters", parameters_json(figures.counts)},
       {"flops_per_token",
        {{"forward", flops.forward},
         {"backward", flops.backward},
         {"attention_forward", flops.attention_forward},
         {"logits_forward", flops.logits_forward},
         {"recompute", recompute_flops},
         {"model_total", flops.total()},
         {"hardware_total", flops.total() + recompute_flops}}},
       {"tokens_per_iteration", tokens_per_iteration},
       {"flops_per_iteration",
        {{"model_total", flops.total() * tokens_per_iteration},
         {"hardware_total", (flops.total() + recompute_flops) * tokens_per_iteration}}},
       {"activation_bytes_per_layer",
        {{"none", activations(model::Recompute::kNone)},
         {"selective", activations(model::Recompute::kSelective)},
         {"full", activations(model::Recompute::kFull)},
         {"op", spec.is_moe() ? nlohmann::json(nullptr) : nlohmann::json(activations(model::Recompute::kOp))},
         {"selected", activations(layout.recompute)}}},
       {"memory_per_gpu", parallel::to_json(figures.most_loaded)},
       {"memory_per_stage", stage_list}});
}

/// Prints the header lines: architecture, components and layout.
void print_model_header(const model::ModelSpec& spec, const parallel::Layout& layout) {
  fmt::print("# model {}: {}\n", spec.name, architecture_line(spec));
  fmt::print("# {}\n", components_line(spec));
  fmt::print(
      "# layout {}: {} GPUs, {} micro-batches of {} x {} tokens, sequence parallel {}, ZeRO {}, "
      "recompute {}\n\n",
      parallel::describe(layout), layout.world_size(), layout.num_microbatches(), layout.micro_batch,
      layout.seq_length, layout.sequence_parallel ? "on" : "off", layout.zero_stage,
      parallel::to_string(layout.recompute));
}

/// Prints the parameter counts table.
void print_parameter_table(const model::ModelSpec& spec, const model::ParameterCounts& counts) {
  core::TextTable params({"parameters", "count"});
  params.add_row({"total", core::format_count(counts.total)});
  if (spec.is_moe()) params.add_row({"active per token", core::format_count(counts.active_per_token)});
  params.add_row({"embedding", core::format_count(counts.embedding)});
  params.add_row({"output", spec.tied_embeddings ? "tied" : core::format_count(counts.output)});
  params.add_row({"per layer", core::format_count(counts.per_layer())});
  params.add_row({"  attention", core::format_count(counts.per_layer_attention)});
  params.add_row({spec.is_moe() ? "  experts" : "  FFN", core::format_count(counts.per_layer_mlp)});
  if (spec.is_moe()) params.add_row({"  router", core::format_count(counts.per_layer_router)});
  params.add_row({"  norms", core::format_count(counts.per_layer_norm)});
  fmt::print("{}\n", params.render());
}

/// Prints the FLOPs table: per token and per iteration.
void print_flops_table(const parallel::Layout& layout, const ModelFigures& figures) {
  const model::FlopsPerToken& flops = figures.flops;
  core::TextTable compute({"FLOPs", "per token", "per iteration"});
  auto flops_row = [&](const std::string& name, double per_token) {
    compute.add_row(
        {name, core::format_flops(per_token), core::format_flops(per_token * figures.tokens_per_iteration)});
  };
  flops_row("forward", flops.forward);
  flops_row("  attention core", flops.attention_forward);
  flops_row("  logits", flops.logits_forward);
  flops_row("backward", flops.backward);
  flops_row("recompute (" + parallel::to_string(layout.recompute) + ")", figures.recompute_flops);
  flops_row("model (fwd+bwd)", flops.total());
  flops_row("hardware (+recompute)", flops.total() + figures.recompute_flops);
  fmt::print("{}\n", compute.render());
}

/// Prints the activation bytes per layer under each recomputation mode (the layout's starred).
void print_activation_table(const model::ModelSpec& spec, const parallel::Layout& layout) {
  core::TextTable activation_table({"activations per layer", "bytes"});
  for (model::Recompute mode : {model::Recompute::kNone, model::Recompute::kSelective,
                                model::Recompute::kFull, model::Recompute::kOp}) {
    if (mode == model::Recompute::kOp && spec.is_moe()) continue;  // op-level checkpointing: dense models
    activation_table.add_row(
        {"recompute " + parallel::to_string(mode) + (mode == layout.recompute ? " *" : ""),
         core::format_bytes(activation_bytes(spec, layout, mode))});
  }
  fmt::print(
      "{}(per micro-batch of {} on one tp rank; {} attention, {})\n\n", activation_table.render(),
      layout.micro_batch, parallel::is_fused(layout.attention) ? "flash" : "unfused (softmax kept)",
      layout.precision == parallel::Precision::kFp8Delayed ? "bf16, the linears' inputs in FP8" : "bf16");
}

/// Prints the most loaded stage's activations at its peak by kind (docs/METRICS.md "Activations by kind").
void print_activation_kinds(const parallel::MemoryBreakdown& memory) {
  if (memory.activations_by_kind.empty()) return;
  core::TextTable table({"activations at the peak, by kind", "bytes", "share"});
  for (const model::ActivationTerm& term : memory.activations_by_kind) {
    table.add_row({term.kind, core::format_bytes(term.bytes),
                   fmt::format("{:.1f} %", 100 * term.bytes / memory.activations_bytes)});
  }
  fmt::print("{}(stage {}: {} layer-micro-batches alive, each layer's terms × that count)\n", table.render(),
             memory.stage, memory.layer_microbatches);
}

/// Prints the memory per GPU of each pipeline stage and the most loaded one.
void print_memory_table(const ModelFigures& figures) {
  // A transient's column only where a stage's peak has one (the pytorch trainer's loss backward, a recomputed
  // layer), named by what it is ("transient" when stages differ).
  std::set<std::string> transients;
  for (const auto& memory : figures.stages)
    if (memory.temporaries_bytes > 0) transients.insert(parallel::temporaries_label(memory));
  const bool temporaries = !transients.empty();
  // fp8-delayed's FP8 weight copies and amax history (docs/METRICS.md "FP8 training"), where there are any.
  const bool fp8_weights = std::any_of(figures.stages.begin(), figures.stages.end(),
                                       [](const auto& memory) { return memory.fp8_weights_bytes > 0; });
  std::vector<std::string> header = {"stage", "weights", "gradients", "optimizer", "activations"};
  if (fp8_weights) header.push_back("FP8 weights");
  if (temporaries) header.push_back(transients.size() == 1 ? *transients.begin() : "transient");
  header.insert(header.end(), {"total", "in-flight"});
  core::TextTable memory_table(header);
  for (const auto& memory : figures.stages) {
    std::vector<std::string> row = {std::to_string(memory.stage), core::format_bytes(memory.weights_bytes),
                                    core::format_bytes(memory.gradients_bytes),
                                    core::format_bytes(memory.optimizer_bytes),
                                    core::format_bytes(memory.activations_bytes)};
    if (fp8_weights) row.push_back(core::format_bytes(memory.fp8_weights_bytes));
    if (temporaries) row.push_back(core::format_bytes(memory.temporaries_bytes));
    row.insert(row.end(),
               {core::format_bytes(memory.total_bytes()), std::to_string(memory.inflight_microbatches)});
    memory_table.add_row(row);
  }
  fmt::print("memory per GPU by pipeline stage\n{}", memory_table.render());
  fmt::print("most loaded: stage {}, {} per GPU{}\n", figures.most_loaded.stage,
             core::format_bytes(figures.most_loaded.total_bytes()),
             figures.most_loaded.at_backward_end
                 ? ", at the end of backward (every gradient shard complete, activations freed)"
                 : "");
  print_activation_kinds(figures.most_loaded);
  fmt::print(
      "fits a GPU when the total is at most device × (1 − {:.0f} % allocator fragmentation) − {} "
      "(CUDA context, libraries, NCCL): `calo sim --cluster` and `calo plan` apply it\n",
      parallel::kFragmentationFraction * 100, core::format_bytes(parallel::kRuntimeReserveBytes));
}

int show_model(const ModelFlags& flags) {
  const auto [spec, layout] = resolve(flags.layout);
  const ModelFigures figures = model_figures(spec, layout);
  if (flags.json) {
    print_model_json(spec, layout, figures);
    return 0;
  }
  print_model_header(spec, layout);
  print_parameter_table(spec, figures.counts);
  print_flops_table(layout, figures);
  print_activation_table(spec, layout);
  print_memory_table(figures);
  return 0;
}

const CommandRegistration kModel(
    "model", "architecture, parameters, FLOPs per token and memory per GPU of a model under a layout", 10,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<ModelFlags>();
      add_layout_flags(app, flags->layout, /*model_positional=*/true);
      app.add_flag("--json", flags->json, "Print everything as JSON");
      app.add_flag("--list", flags->list, "List the model presets with their parameter counts");
      return [flags] { return flags->list ? list_presets(flags->json) : show_model(*flags); };
    });

}  // namespace
}  // namespace calo::cli
