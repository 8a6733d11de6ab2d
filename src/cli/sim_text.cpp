#include "cli/sim_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/device_names.h"
#include "core/table.h"
#include "sim/cluster_trust.h"
#include "sim/cost_model.h"

namespace calo::cli {
namespace {

/// Every step's figures (ten rows at most, the last step always) of a simulation of more than one step;
/// `gpu` is the device noun ("GPU" or "rank").
void print_steps(const sim::SimResult& result, const std::string& gpu) {
  if (result.steps <= 1) return;
  core::TextTable steps(
      {"step", "iteration", "mean power", "highest " + gpu, "max die", "min clock", "throttled"});
  steps.set_units({"", "s", "W/" + gpu, "mean W", "C", "MHz", gpu + "s"});
  const int stride = std::max(1, result.steps / 10);
  for (int step = 0; step < result.steps; ++step) {
    if (step % stride != 0 && step + 1 != result.steps) continue;
    const auto& item = result.step_results[step];
    steps.add_row({std::to_string(step), fmt::format("{:.4f}", item.iteration_s),
                   fmt::format("{:.1f}", item.mean_power_w), fmt::format("{:.1f}", item.max_power_w),
                   fmt::format("{:.1f}", item.max_die_c), fmt::format("{:.0f}", item.min_clock_mhz),
                   std::to_string(item.throttled_gpus)});
  }
  fmt::print("{}", steps.render());
}

/// The result as a table; `card_limit_w` is the card's own power limit (a lower one is a --power-cap).
/// `cpu_host`: the devices are the CPU backend's MPI ranks, whose power and heat are placeholders; `fp8`: the
/// linears ran in FP8 (MFU then says it is against the bf16 peak).
void print_summary(const sim::SimResult& result, const nlohmann::json& json, double card_limit_w,
                   bool cpu_host, bool fp8) {
  const std::string gpu = cpu_host ? "rank" : "GPU";  // the device noun of every row
  fmt::print("# calo sim: {} on {} x {} ({})\n", result.model, result.world, result.cluster, result.layout);
  fmt::print("# {} step(s), {} engine op events, {:.3f} s simulation wall time\n", result.steps,
             result.op_events, result.wall_s);
  core::TextTable table({"figure", "value", "unit"});
  auto row = [&table](const std::string& figure, double value, const std::string& unit, int digits = 3) {
    table.add_row({figure, fmt::format("{:.{}f}", value, digits), unit});
  };
  row("iteration time", result.iteration_s, "s", 4);
  row("tokens/s", sim::tokens_per_s(result), "tokens/s", 0);
  const double model_tflops = sim::model_flops_per_gpu(result) / 1e12;
  if (model_tflops < 0.1) {  // a CPU core: GFLOP/s, not "0.0 TFLOP/s"
    row(fmt::format("model GFLOP/s per {}", gpu), model_tflops * 1e3, "GFLOP/s", 1);
  } else {
    row(fmt::format("model TFLOP/s per {}", gpu), model_tflops, "TFLOP/s", 1);
  }
  row(fp8 ? "MFU (against the bf16 peak)" : "MFU", 100.0 * sim::mfu(result), "%", 1);
  // Energy and the whole job's power with an SI prefix (2.23 MJ, 3.11 MW): the figures a person plans by.
  auto si_row = [&table](const std::string& figure, double value, const std::string& unit) {
    const std::string shown = core::format_si(value, unit);
    const std::size_t space = shown.find(' ');
    table.add_row({figure, shown.substr(0, space), shown.substr(space + 1)});
  };
  const double energy_per_step_j = json["energy_per_step_j"].get<double>();
  si_row(fmt::format("energy per step (all {0}s; {0}s only)", gpu), energy_per_step_j, "J");
  table.add_row({fmt::format("energy per token (all {}s)", gpu),
                 core::format_significant(energy_per_step_j / result.tokens_per_step, 4), "J"});
  si_row(fmt::format("power of all {} {}s (energy / time)", result.world, gpu),
         json["mean_power_w"].get<double>() * result.world, "W");
  row(fmt::format("mean power per {} (energy / time)", gpu), json["mean_power_w"].get<double>(), "W", 1);
  row(fmt::format("peak power, highest driver sample (any {})", gpu), json["peak_power_w"].get<double>(), "W",
      1);
  const bool uniform = std::all_of(result.gpus.begin(), result.gpus.end(), [&](const sim::GpuResult& item) {
    return item.power_limit_w == result.power_limit_w;
  });
  row(!uniform                              ? fmt::format("power cap, highest {}", gpu)
      : result.power_limit_w < card_limit_w ? std::string("power cap (--power-cap; a ~1 s average)")
      : cpu_host                            ? std::string("power limit (placeholder)")
                                            : std::string("power limit (the card's; a ~1 s average)"),
      result.power_limit_w, "W", 0);
  row("hottest die", json["max_die_c"].get<double>(), "C", 1);
  row(fmt::format("power-cap throttle per {} (all steps)", gpu), json["throttle_power_cap_s"].get<double>(),
      "s", 3);
  row(fmt::format("thermal throttle per {} (all steps)", gpu), json["throttle_thermal_s"].get<double>(), "s",
      3);
  row(fmt::format("compute busy per {} (last step)", gpu), result.compute_busy_s, "s", 4);
  for (int klass = 0; klass < sim::kNumCommClasses; ++klass) {
    if (result.comm_transfer_s[klass] <= 0) continue;
    table.add_row({fmt::format("exposed {} comm (of {:.4f} s)", sim::comm_class_name(klass),
                               result.comm_transfer_s[klass]),
                   fmt::format("{:.4f}", result.exposed_comm_s[klass]), "s"});
  }
  row("bubble + straggler wait (last step)", result.wait_s, "s", 4);
  fmt::print("{}", table.render());
  if (cpu_host) {
    fmt::print(
        "# a CPU host: its ranks' power, heat and throttling above are cpu-host's placeholder per-core "
        "figures "
        "(no CPU power is measured); time and throughput are what calibration fits\n");
  }
  print_steps(result, gpu);
}

}  // namespace

void print_sim_text(const plan::SimRequest& request, const plan::SimRun& run) {
  const nlohmann::json& json = run.json;
  const bool cpu_host = core::is_cpu_host_device(request.cluster.gpu.name);
  if (!request.twin.run_dir.empty())
    fmt::print("# {}\n", plan::describe_twin(request.twin, request.warmup, request.steps));
  if (request.eval)
    fmt::print(
        "# evaluation step: the forward passes of the global batch; no backward, recompute, optimizer "
        "or gradient communication\n");
  print_summary(run.result, json, request.cluster.gpu.power_limit_w, cpu_host, request.layout.fp8());
  if (const std::string cap = sim::power_cap_trust(request.cluster, run.result.power_limit_w); !cap.empty())
    fmt::print("# {}\n", cap);
  const parallel::MemoryBreakdown& memory = run.memory;
  fmt::print("# memory per {} (model, stage {}): {} of {} usable ({}; {} micro-batch(es) in flight)\n",
             cpu_host ? "rank" : "GPU", memory.stage, core::format_bytes(memory.total_bytes()),
             core::format_bytes(parallel::usable_memory_bytes(request.cluster.gpu.memory_bytes)),
             parallel::describe_terms(memory), memory.inflight_microbatches);
  fmt::print("{}", run.cost_text);
  for (const std::string& warning : run.warnings) fmt::print("# WARNING: {}\n", warning);
  if (!run.stored.empty()) fmt::print("# stored as run (kind sim): {}\n", run.stored);
  if (!request.timeline.empty()) fmt::print("# timeline (Perfetto/Chrome trace): {}\n", request.timeline);
}

}  // namespace calo::cli
