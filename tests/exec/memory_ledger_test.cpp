// `calo bench --memory real`'s ledger (exec/memory_ledger.h): every allocation is freed within the step, its
// replayed peak is the memory model's figure where their lifetimes agree (1F1B, interleaved, recompute),
// FSDP's gathered units live until their pass is done, and the executor holds the ledger on the CPU backend
// with the peak it replays.
#include "exec/memory_ledger.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/bench_memory.h"
#include "exec/bootstrap.h"
#include "exec/executor.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/memory.h"
#include "parallel/validate.h"

namespace calo::exec {
namespace {

struct Built {
  model::ModelSpec model;
  parallel::Layout layout;
  graph::Graph graph;
};

Built build(parallel::Layout layout, const std::string& model_name = "tiny-dense") {
  Built built;
  built.model = model::load_model(model_name);
  built.layout = parallel::resolve_layout(built.model, layout);
  built.graph = graph::build_graph(built.model, built.layout);
  return built;
}

MemoryLedger ledger_of(const Built& built, int rank) {
  return build_memory_ledger(graph::materialize(built.graph, rank), built.model, built.layout,
                             built.graph.program(rank).stage);
}

// Each slot is held once and freed once, the free after the hold in launch order.
void expect_balanced(const MemoryLedger& ledger) {
  std::map<std::int32_t, std::pair<int, int>> seen;  // slot -> (hold position, free position)
  for (size_t i = 0; i < ledger.actions.size(); ++i) {
    const LedgerAction& action = ledger.actions[i];
    auto& [held_at, freed_at] = seen.try_emplace(action.slot, -1, -1).first->second;
    if (action.hold) {
      EXPECT_EQ(held_at, -1) << "slot " << action.slot << " held twice";
      held_at = static_cast<int>(i);
      EXPECT_GT(action.bytes, 0) << action.what;
    } else {
      EXPECT_EQ(freed_at, -1) << "slot " << action.slot << " freed twice";
      freed_at = static_cast<int>(i);
    }
  }
  EXPECT_EQ(static_cast<std::int32_t>(seen.size()), ledger.slots);
  for (const auto& [slot, positions] : seen) {
    EXPECT_GE(positions.first, 0) << "slot " << slot << " freed but never held";
    EXPECT_GT(positions.second, positions.first) << "slot " << slot << " not freed after its hold";
  }
}

int count_holds(const MemoryLedger& ledger, const std::string& what_prefix) {
  int count = 0;
  for (const LedgerAction& action : ledger.actions)
    count += action.hold && action.what.rfind(what_prefix, 0) == 0 ? 1 : 0;
  return count;
}

TEST(MemoryLedger, EveryStagesReplayedPeakIsTheModelsUnderOneFOneBAndInterleaved) {
  parallel::Layout one_f_one_b;
  one_f_one_b.pp = 2;
  one_f_one_b.global_batch = 8;
  parallel::Layout interleaved = one_f_one_b;
  interleaved.schedule = parallel::Schedule::kInterleaved;
  interleaved.virtual_stages = 2;
  for (const parallel::Layout& layout : {one_f_one_b, interleaved}) {
    const Built built = build(layout);
    for (int rank = 0; rank < built.layout.world_size(); ++rank) {
      const MemoryLedger ledger = ledger_of(built, rank);
      expect_balanced(ledger);
      const int stage = built.graph.program(rank).stage;
      const double model_bytes = parallel::memory_for_stage(built.model, built.layout, stage).total_bytes();
      EXPECT_NEAR(static_cast<double>(ledger.serial_peak_bytes), model_bytes, 2.0)
          << parallel::describe(built.layout) << " stage " << stage;
      // One hold per layer and micro-batch, freed as backward passes the layer.
      std::set<int> layers;
      for (const graph::RankOp& op : graph::materialize(built.graph, rank))
        if (op.op.layer >= 0) layers.insert(op.op.layer);
      EXPECT_EQ(count_holds(ledger, "activations of layer"),
                static_cast<int>(layers.size()) * built.layout.num_microbatches());
    }
  }
}

TEST(MemoryLedger, BackwardFreesEachLayersActivationsAsItPassesTheLastLayerFirst) {
  // As autograd does: a micro-batch's activations leave layer by layer during its backward, not all at its
  // end.
  parallel::Layout layout;
  layout.global_batch = 1;
  const Built built = build(layout);
  const auto ops = graph::materialize(built.graph, 0);
  const MemoryLedger ledger = ledger_of(built, 0);
  expect_balanced(ledger);
  std::map<std::int32_t, int> layer_of_slot;
  std::vector<int> freed_layers;
  std::vector<std::int32_t> freed_at;
  for (const LedgerAction& action : ledger.actions) {
    if (action.hold && action.what.rfind("activations of layer", 0) == 0)
      layer_of_slot[action.slot] = ops[static_cast<size_t>(action.op_index)].op.layer;
    if (action.hold || !layer_of_slot.count(action.slot)) continue;
    freed_layers.push_back(layer_of_slot[action.slot]);
    freed_at.push_back(action.op_index);
  }
  ASSERT_EQ(static_cast<int>(freed_layers.size()), built.model.num_layers);
  for (size_t i = 1; i < freed_layers.size(); ++i) {
    EXPECT_LT(freed_layers[i], freed_layers[i - 1]) << "the last layer's backward runs first";
    EXPECT_GT(freed_at[i], freed_at[i - 1]) << "each at its own layer's last backward op";
  }
  // The peak is still the model's: every layer is held when backward begins.
  EXPECT_NEAR(static_cast<double>(ledger.serial_peak_bytes),
              parallel::memory_for_stage(built.model, built.layout, 0).total_bytes(), 2.0);
}

TEST(MemoryLedger, FullRecomputeHoldsOneLayersRebuiltActivationsDuringItsBackward) {
  parallel::Layout layout;
  layout.global_batch = 2;
  layout.recompute = model::Recompute::kFull;
  const Built built = build(layout);
  const MemoryLedger ledger = ledger_of(built, 0);
  expect_balanced(ledger);
  const parallel::StageHoldings holdings = parallel::holdings_for_stage(built.model, built.layout, 0);
  ASSERT_GT(holdings.recompute_transient_bytes, 0);
  EXPECT_EQ(count_holds(ledger, "recomputed activations of layer"), built.model.num_layers * 2);
  for (const LedgerAction& action : ledger.actions) {
    if (action.hold && action.what.rfind("recomputed", 0) == 0) {
      EXPECT_EQ(action.bytes, static_cast<std::int64_t>(holdings.recompute_transient_bytes));
    }
  }
  // The model counts the same transient at the moment the ledger reaches it (the stack plus one layer).
  EXPECT_NEAR(static_cast<double>(ledger.serial_peak_bytes),
              parallel::memory_for_stage(built.model, built.layout, 0).total_bytes(), 2.0);
}

TEST(MemoryLedger, FsdpGathersLiveUntilThePassIsDoneOrWithoutReshardingUntilBackward) {
  parallel::Layout layout;
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.global_batch = 4;
  for (const bool reshard : {true, false}) {
    layout.reshard_after_forward = reshard;
    const Built built = build(layout);
    const auto ops = graph::materialize(built.graph, 0);
    const MemoryLedger ledger = ledger_of(built, 0);
    expect_balanced(ledger);
    ASSERT_GT(count_holds(ledger, "gathered parameters"), 0);
    std::map<std::int32_t, const LedgerAction*> holds;
    int forward_gathers_freed_in_backward = 0;
    for (const LedgerAction& action : ledger.actions) {
      if (action.hold && action.what.rfind("gathered", 0) == 0) holds[action.slot] = &action;
      if (action.hold || !holds.count(action.slot)) continue;
      const graph::Op& gather = ops[static_cast<size_t>(holds[action.slot]->op_index)].op;
      const graph::Op& last_use = ops[static_cast<size_t>(action.op_index)].op;
      EXPECT_EQ(last_use.layer, gather.layer) << holds[action.slot]->what;
      if (gather.phase == graph::Phase::kForward && last_use.phase != graph::Phase::kForward)
        ++forward_gathers_freed_in_backward;
    }
    if (reshard) {
      EXPECT_EQ(forward_gathers_freed_in_backward, 0);
    } else {
      EXPECT_GT(forward_gathers_freed_in_backward, 0);
    }
  }
}

TEST(MemoryLedger, Fp8DelayedStateAndFp8SavedInputsReplayToTheModelsPeak) {
  // Transformer Engine's FP8 weight copies are held from prepare to the end, its FP8-saved inputs shrink
  // each layer's activations: the replayed peak is still the model's, and above bf16's state.
  parallel::Layout layout;
  layout.pp = 2;
  layout.global_batch = 8;
  layout.precision = parallel::Precision::kFp8Delayed;
  const Built built = build(layout);
  parallel::Layout bf16_layout = layout;
  bf16_layout.precision = parallel::Precision::kBf16;
  const Built bf16 = build(bf16_layout);
  for (int rank = 0; rank < built.layout.world_size(); ++rank) {
    const MemoryLedger ledger = ledger_of(built, rank);
    expect_balanced(ledger);
    const int stage = built.graph.program(rank).stage;
    const parallel::MemoryBreakdown model = parallel::memory_for_stage(built.model, built.layout, stage);
    EXPECT_GT(model.fp8_weights_bytes, 0);
    EXPECT_NEAR(static_cast<double>(ledger.serial_peak_bytes), model.total_bytes(), 2.0) << "stage " << stage;
    EXPECT_NEAR(static_cast<double>(ledger.state_bytes - ledger_of(bf16, rank).state_bytes),
                model.fp8_weights_bytes, 1.0);
  }
}

TEST(MemoryLedger, Fp8AllGatherHoldsTheGatheredUnitAtItsFp8Bytes) {
  // tiny-dense's layer: 725,504 parameters, 724,992 of them FP8 linears' matrices: 726,016 bytes gathered.
  parallel::Layout layout;
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.global_batch = 4;
  layout.precision = parallel::Precision::kFp8Tensorwise;
  layout.fp8_all_gather = true;
  const Built built = build(layout);
  const MemoryLedger ledger = ledger_of(built, 0);
  expect_balanced(ledger);
  int layer_holds = 0;
  for (const LedgerAction& action : ledger.actions) {
    if (!action.hold || action.what.rfind("gathered parameters of unit", 0) != 0) continue;
    if (action.what.rfind("gathered parameters of unit -", 0) == 0) continue;  // embedding and head: bf16
    EXPECT_EQ(action.bytes, 726'016) << action.what;
    ++layer_holds;
  }
  EXPECT_EQ(layer_holds, 4 * 2 * 2);  // 4 layers, forward and backward, 2 micro-batches
}

TEST(MemoryLedger, TheTorchtitanTrainerIsRefusedNamingTheTrainersItReplays) {
  parallel::Layout layout;
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.trainer = parallel::Trainer::kTorchtitan;
  const Built built = build(layout);
  try {
    ledger_of(built, 0);
    FAIL() << "the torchtitan trainer was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--trainer default or pytorch"), std::string::npos)
        << error.what();
  }
}

TEST(MemoryLedger, TheExecutorHoldsItOnTheCpuBackendAndReachesTheReplayedPeak) {
  parallel::Layout layout;
  layout.global_batch = 2;
  layout.recompute = model::Recompute::kFull;
  const Built built = build(layout);
  auto backend = BackendRegistry::instance().select("cpu").create(BackendConfig{});
  LaunchInfo launch;
  auto bootstrap = make_bootstrap(launch);
  backend->connect(built.graph, 0, *bootstrap);
  Executor executor(*backend, built.graph, 0);
  const std::int64_t allocated_before = backend->allocated_bytes();
  executor.use_memory_ledger(ledger_of(built, 0));
  executor.prepare();
  for (int step = 0; step < 2; ++step) executor.run_step(*bootstrap);
  const HeldMemory held = backend->held_memory();
  // Every op of world size 1 runs on the compute stream: holds happen in the replay's order exactly.
  EXPECT_EQ(held.held_peak_bytes + executor.state_in_operands_bytes(),
            executor.memory_ledger().serial_peak_bytes);
  EXPECT_GT(executor.state_in_operands_bytes(), 0);
  EXPECT_EQ(executor.operands_carved_bytes(), 0);  // a tiny model on a host of GiBs: nothing to carve
  EXPECT_GE(held.device_used_bytes, held.held_peak_bytes + allocated_before);
}

TEST(MemoryLedger, ALedgerBeyondTheDeviceIsRefusedBeforeAnythingIsHeld) {
  // Exit 2 before the first step, naming --memory model, instead of running out of memory mid-run.
  const Built built = build(parallel::Layout{});
  auto backend = BackendRegistry::instance().select("cpu").create(BackendConfig{});
  LaunchInfo launch;
  auto bootstrap = make_bootstrap(launch);
  backend->connect(built.graph, 0, *bootstrap);
  Executor executor(*backend, built.graph, 0);
  MemoryLedger ledger;
  ledger.state_bytes = 1;
  ledger.serial_peak_bytes = static_cast<std::int64_t>(backend->device().memory_bytes) + 1;
  executor.use_memory_ledger(ledger);
  try {
    executor.prepare();
    FAIL() << "a ledger larger than the device was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--memory model"), std::string::npos) << error.what();
  }
  EXPECT_EQ(backend->held_memory().held_peak_bytes, 0);
}

// What a ledger holds after the actions of each point of the program (op index, before the op or after it),
// the state included.
std::map<std::pair<std::int32_t, bool>, std::int64_t> held_at_each_point(const MemoryLedger& ledger) {
  std::map<std::int32_t, std::int64_t> live;
  std::map<std::pair<std::int32_t, bool>, std::int64_t> held;
  std::int64_t total = ledger.state_bytes;
  for (const LedgerAction& action : ledger.actions) {
    if (action.hold) {
      EXPECT_EQ(live.count(action.slot), 0u) << "slot " << action.slot << " held while live";
      live[action.slot] = action.bytes;
      total += action.bytes;
    } else {
      EXPECT_EQ(live.count(action.slot), 1u) << "slot " << action.slot << " freed while not held";
      total -= live[action.slot];
      live.erase(action.slot);
    }
    held[{action.op_index, !action.before_op}] = total;
  }
  EXPECT_TRUE(live.empty()) << live.size() << " slots still held at the end of the step";
  return held;
}

TEST(MemoryLedger, ACarvedLedgerHoldsWhatTheLedgerHoldsLessTheCarveAtEveryPoint) {
  // --memory real near the device's limit: the bench's operand buffers stand in for held bytes. The pipeline
  // frees micro-batches first in, first out, so a free gives its carved share back to holds still live, which
  // must be freed and held again smaller for the carve to stay in use.
  parallel::Layout layout;
  layout.pp = 2;
  layout.global_batch = 8;
  const Built built = build(layout);
  const MemoryLedger ledger = ledger_of(built, 0);
  const auto original = held_at_each_point(ledger);
  std::int64_t live_peak = 0;
  for (const auto& [point, held] : original) live_peak = std::max(live_peak, held - ledger.state_bytes);
  ASSERT_GT(ledger.state_bytes, 0);
  int migrations = 0;
  for (const std::int64_t carve :
       {std::int64_t{0}, ledger.state_bytes / 2, ledger.state_bytes + live_peak / 3,
        ledger.state_bytes + live_peak / 2, ledger.serial_peak_bytes}) {
    SCOPED_TRACE(carve);
    const MemoryLedger carved = carve_ledger(ledger, carve);
    const std::int64_t state = std::max<std::int64_t>(0, ledger.state_bytes - carve);
    EXPECT_EQ(carved.state_bytes, state);
    EXPECT_EQ(carved.slots, ledger.slots);
    EXPECT_EQ(carved.serial_peak_bytes, std::max(state, ledger.serial_peak_bytes - carve));
    const auto held = held_at_each_point(carved);
    for (const auto& [point, bytes] : original) {
      const auto found = held.find(point);
      if (found == held.end()) continue;  // every action there carved whole
      EXPECT_EQ(found->second, std::max(state, bytes - carve)) << "op " << point.first;
    }
    std::map<std::int32_t, int> holds_per_slot;
    for (const LedgerAction& action : carved.actions) holds_per_slot[action.slot] += action.hold ? 1 : 0;
    for (const auto& [slot, holds] : holds_per_slot) migrations += holds > 1 ? 1 : 0;
    if (carve == 0) {
      EXPECT_EQ(carved.actions.size(), ledger.actions.size());
    }
    if (carve == ledger.serial_peak_bytes) {
      EXPECT_TRUE(carved.actions.empty());
    }
  }
  EXPECT_GT(migrations, 0) << "no free gave its share back to a live hold";
}

TEST(MemoryLedger, OperandsAreCarvedOnlyAsFarAsTheDeviceNeedsAndBeyondThatTheLayoutIsRefused) {
  constexpr std::int64_t kGiB = std::int64_t{1} << 30;
  const double device = 80.0 * static_cast<double>(kGiB);
  // Fits beside 22 GiB in use with the headroom to spare: nothing carved.
  EXPECT_EQ(operands_to_carve(22 * kGiB, 50 * kGiB, 20 * kGiB, device, 0), 0);
  // 5 GiB short of the headroom: 5 GiB of the 20 GiB of operands stand in for held bytes.
  EXPECT_EQ(operands_to_carve(22 * kGiB, 62 * kGiB, 20 * kGiB, device, 0), 5 * kGiB);
  EXPECT_EQ(operands_to_carve(22 * kGiB, 77 * kGiB, 20 * kGiB, device, 0), 20 * kGiB);
  try {
    operands_to_carve(22 * kGiB, 78 * kGiB, 20 * kGiB, device, 3);
    FAIL() << "a ledger beyond the device even with every operand carved was accepted";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 3"), std::string::npos) << message;
    EXPECT_NE(message.find("--memory model"), std::string::npos) << message;
    EXPECT_NE(message.find("20.00 GiB of calo's operand buffers"), std::string::npos) << message;
  }
}

TEST(MemoryLedger, TheSummarySaysHowMuchOfTheBenchsOperandsWasCountedAsHeld) {
  // Rank 0 of `calo bench --model llama3-8b --layers 11 --seq 8192 --gbs 4 --memory real` on one H100
  // (docs/measurements/memory-real-h100-2026-12-06c/call2): 9.95 GiB of operands carved, held = the model.
  nlohmann::json rank = {{"rank", 0},
                         {"memory_real",
                          {{"stage", 0},
                           {"held_peak_bytes", 72096350208},
                           {"state_in_optimizer_operands_bytes", 4294967296},
                           {"operands_carved_bytes", 10687348736},
                           {"device_used_bytes", 84040024064},
                           {"ledger_serial_peak_bytes", 72096350208},
                           {"backend_buffers_bytes", 21355471104},
                           {"model_bytes", 72096350208.0}}}};
  const nlohmann::json report = memory_real_report({rank});
  const std::string text = memory_real_text(report);
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("held 67.14 GiB at peak, the model 67.14 GiB (+0.0 %)"), std::string::npos) << text;
  EXPECT_NE(text.find("9.95 GiB of the bench's operand buffers counted as held"), std::string::npos) << text;
  rank["memory_real"]["operands_carved_bytes"] = 0;
  EXPECT_EQ(memory_real_text(memory_real_report({rank})).find("counted as held"), std::string::npos);
}

}  // namespace
}  // namespace calo::exec
