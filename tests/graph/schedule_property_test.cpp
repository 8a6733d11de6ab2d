// Property test: every valid layout of a few models over a grid of pipeline shapes builds a graph that passes
// every checker (collectives, p2p, deadlock, FLOPs, volumes): m = pp and m = 2 pp, uneven --layers-per-stage,
// vpp > 1 under the interleaved schedule, ep > 1, and a 16384-GPU layout (issue 13 item 2: interleaved with m
// = pp deadlocked).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "graph/check.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/schedule.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

/// Checks one layout; returns false (and counts nothing) when the layout is invalid for the model.
bool check_layout(const model::ModelSpec& model, parallel::Layout layout, const std::string& label,
                  int& checked) {
  parallel::Layout resolved;
  try {
    resolved = parallel::resolve_layout(model, layout);
  } catch (const InputError&) {
    return false;  // not a valid layout of this model (e.g. pp does not divide the layers for vpp)
  }
  const Graph graph = build_graph(model, resolved);
  const auto scope = resolved.world_size() <= 64 ? DeadlockScope::kAllRanks : DeadlockScope::kRepresentative;
  const auto problems = check_graph(graph, scope);
  EXPECT_TRUE(problems.empty()) << label << "\n" << to_text(problems);
  checked += 1;
  return true;
}

TEST(ScheduleProperty, EveryValidLayoutOfTheGridPassesEveryChecker) {
  int checked = 0;
  for (const char* name : {"tiny-dense", "tiny-moe", "llama3-8b"}) {
    const model::ModelSpec model = model::load_model(name);
    for (const auto schedule :
         {parallel::Schedule::k1F1B, parallel::Schedule::kInterleaved, parallel::Schedule::kGpipe,
          parallel::Schedule::kZbH1, parallel::Schedule::kZbV}) {
      for (int pp : {2, 4}) {
        for (int vpp : {1, 2}) {
          if (parallel::schedule_entry(schedule).chunked != (vpp > 1)) continue;
          for (int factor : {1, 2, 3}) {  // m = pp, 2 pp, 3 pp
            for (int ep : {1, 2}) {
              if (ep > 1 && !model.is_moe()) continue;
              for (bool uneven : {false, true}) {
                parallel::Layout layout;
                layout.pp = pp;
                layout.dp = ep;
                layout.ep = ep;
                layout.schedule = schedule;
                layout.virtual_stages = vpp;
                layout.micro_batch = 1;
                layout.global_batch = factor * pp * layout.dp;
                layout.seq_length = 128;
                if (uneven) {
                  // One layer moves from the last virtual stage to the first (a thermal-aware split).
                  const int stages = pp * vpp;
                  if (model.num_layers % stages != 0 || model.num_layers / stages < 2) continue;
                  layout.layers_per_stage.assign(stages, model.num_layers / stages);
                  layout.layers_per_stage.front() += 1;
                  layout.layers_per_stage.back() -= 1;
                }
                check_layout(model, layout,
                             fmt::format("{} pp{} vpp{} m={} ep{} {} {}", name, pp, vpp, factor * pp, ep,
                                         parallel::to_string(schedule), uneven ? "uneven" : "uniform"),
                             checked);
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 60) << "the grid must actually check layouts";
  // At scale: GPT3-175B on 16384 GPUs, interleaved with m = pp and m = 2 pp.
  const model::ModelSpec gpt = model::load_model("gpt3-175b");
  for (int factor : {1, 2}) {
    parallel::Layout layout;
    layout.tp = 8;
    layout.pp = 16;
    layout.dp = 128;
    layout.schedule = parallel::Schedule::kInterleaved;
    layout.virtual_stages = 2;
    layout.global_batch = factor * 16 * 128;
    EXPECT_TRUE(check_layout(gpt, layout, fmt::format("gpt3-175b 16384 GPUs m={}", factor * 16), checked));
  }
}

// ZeRO 1/2/3 and hybrid sharding (S = 1, 2, dp) with and without resharding after forward, over every
// schedule, with and without overlap, on dense and MoE models.
TEST(ScheduleProperty, EveryShardingOfTheGridPassesEveryChecker) {
  struct Sharding {
    int zero_stage;
    int shard_size;
    bool reshard;
  };
  const Sharding shardings[] = {{1, 0, true}, {2, 0, true}, {3, 0, true}, {3, 0, false},
                                {3, 1, true}, {3, 2, true}, {3, 2, false}};
  int checked = 0;
  for (const char* name : {"tiny-dense", "tiny-moe"}) {
    const model::ModelSpec model = model::load_model(name);
    for (const auto schedule :
         {parallel::Schedule::k1F1B, parallel::Schedule::kInterleaved, parallel::Schedule::kGpipe}) {
      for (int pp : {1, 2}) {
        const int vpp = schedule == parallel::Schedule::kInterleaved ? 2 : 1;
        if (schedule == parallel::Schedule::kInterleaved && pp == 1) continue;
        for (const Sharding& sharding : shardings) {
          for (bool overlap : {false, true}) {
            parallel::Layout layout;
            layout.pp = pp;
            layout.dp = 4;
            layout.ep = model.is_moe() ? 2 : 1;
            layout.schedule = schedule;
            layout.virtual_stages = vpp;
            layout.global_batch = 2 * pp * layout.dp;
            layout.seq_length = 128;
            layout.zero_stage = sharding.zero_stage;
            layout.fsdp_shard_size = sharding.shard_size;
            layout.reshard_after_forward = sharding.reshard;
            layout.overlap_grad_reduce = layout.overlap_param_gather = overlap;
            EXPECT_TRUE(check_layout(model, layout,
                                     fmt::format("{} pp{} {} zero{} S{} reshard {} overlap {}", name, pp,
                                                 parallel::to_string(schedule), sharding.zero_stage,
                                                 sharding.shard_size, sharding.reshard, overlap),
                                     checked));
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 5 * 7 * 2);
}

}  // namespace
TEST(ScheduleProperty, EveryValidContextParallelLayoutOfTheGridPassesEveryChecker) {
  // cp 2 and 4 against tp, pp (1F1B and interleaved), dp, recompute, ZeRO and overlap: the ring's sends and
  // receives must match, never deadlock, keep the attention FLOPs of cp = 1 and the closed-form cp volume.
  int checked = 0;
  for (const char* name : {"tiny-dense", "llama3-8b"}) {
    const model::ModelSpec model = model::load_model(name);
    for (int cp : {2, 4}) {
      for (int tp : {1, 2}) {
        for (int pp : {1, 2}) {
          for (int dp : {1, 2}) {
            for (const auto recompute :
                 {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
              for (int zero : {0, 1, 3}) {
                for (bool interleaved : {false, true}) {
                  if (interleaved && pp == 1) continue;
                  parallel::Layout layout;
                  layout.tp = tp;
                  layout.cp = cp;
                  // Alternate the K/V exchange so both variants cover the grid.
                  layout.cp_comm =
                      (zero + tp + pp) % 2 == 0 ? parallel::CpComm::kP2p : parallel::CpComm::kAllGather;
                  layout.pp = pp;
                  layout.dp = dp;
                  layout.recompute = recompute;
                  layout.zero_stage = zero;
                  layout.overlap_grad_reduce = zero != 0;
                  layout.overlap_tp_comm = zero == 1;
                  layout.schedule =
                      interleaved ? parallel::Schedule::kInterleaved : parallel::Schedule::k1F1B;
                  layout.virtual_stages = interleaved ? 2 : 1;
                  layout.global_batch = 2 * pp * dp;
                  layout.seq_length = 128;
                  check_layout(
                      model, layout,
                      fmt::format("{} tp{} cp{} pp{} dp{} recompute {} zero{}{}", name, tp, cp, pp, dp,
                                  parallel::to_string(recompute), zero, interleaved ? " interleaved" : ""),
                      checked);
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 300) << "the grid must actually check layouts";
}

}  // namespace calo::graph
