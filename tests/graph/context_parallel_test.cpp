// Context parallelism in the execution graph: the ring's op structure, hand-counted bytes and FLOPs, the
// checkers' closed forms, per-rank shapes, and that the ring's chunk shapes add up to exact causal attention.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "graph/check.h"
#include "graph/graph.h"
#include "model/accounting.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

Graph build_cp(const char* model_name, int tp, int cp, int dp = 1, int pp = 1,
               model::Recompute recompute = model::Recompute::kNone,
               parallel::CpComm comm = parallel::CpComm::kP2p) {
  const model::ModelSpec model = model::load_model(model_name);
  parallel::Layout layout;
  layout.tp = tp;
  layout.cp = cp;
  layout.cp_comm = comm;
  layout.dp = dp;
  layout.pp = pp;
  layout.recompute = recompute;
  layout.global_batch = dp * pp;
  return build_graph(model, parallel::resolve_layout(model, layout));
}

std::vector<RankOp> layer_ops(const Graph& graph, int rank, int layer, Phase phase) {
  std::vector<RankOp> ops;
  for (const RankOp& op : materialize(graph, rank))
    if (op.op.layer == layer && op.op.phase == phase) ops.push_back(op);
  return ops;
}

TEST(ContextParallel, ForwardRingHasCpStepsAndCpMinusOneExchanges) {
  // tiny-dense, cp 2: 64 of the 128 tokens per rank; head_dim 32, 4 kv heads: K and V of one rank are
  // 2 x 64 x 128 x 2 B = 32768 B.
  const Graph graph = build_cp("tiny-dense", 1, 2);
  const auto ops = layer_ops(graph, 0, 0, Phase::kForward);
  std::vector<RankOp> attention, sends, receives;
  for (const RankOp& op : ops) {
    if (op.op.kind == OpKind::kAttention) attention.push_back(op);
    if (op.op.kind == OpKind::kSend) sends.push_back(op);
    if (op.op.kind == OpKind::kRecv) receives.push_back(op);
  }
  ASSERT_EQ(attention.size(), 2u);
  ASSERT_EQ(sends.size(), 1u);
  ASSERT_EQ(receives.size(), 1u);
  // Step 0: the local causal block of 2 chunks (64 x 64); step 1: rank 0's late chunk (32 queries) against
  // both chunks of rank 1 (64 keys), no mask.
  EXPECT_EQ(attention[0].op.attention.cp_step, 0);
  EXPECT_TRUE(attention[0].op.attention.causal);
  EXPECT_EQ(attention[0].op.attention.seq, 64);
  EXPECT_EQ(attention[0].op.attention.keys(), 64);
  EXPECT_EQ(attention[1].op.attention.cp_step, 1);
  EXPECT_FALSE(attention[1].op.attention.causal);
  EXPECT_EQ(attention[1].op.attention.seq, 32);
  EXPECT_EQ(attention[1].op.attention.keys(), 64);
  // Equal FLOPs per step: 4 b h d x 2 c^2 with c = 32.
  const double step_flops = 4.0 * 8 * 32 * 2 * 32 * 32;
  EXPECT_DOUBLE_EQ(attention[0].op.flops, step_flops);
  EXPECT_DOUBLE_EQ(attention[1].op.flops, step_flops);
  // The exchange runs on the cp stream to the ring neighbour (rank 1 both ways for cp 2) and carries K, V.
  EXPECT_EQ(sends[0].op.stream, Stream::kCpComm);
  EXPECT_EQ(sends[0].op.group, GroupKind::kCp);
  EXPECT_DOUBLE_EQ(sends[0].op.bytes, 32768.0);
  EXPECT_EQ(sends[0].peer_rank, 1);
  EXPECT_EQ(receives[0].peer_rank, 1);
  EXPECT_EQ(sends[0].op.p2p_batch, receives[0].op.p2p_batch);
  // Step 1 computes on the received K/V: its attention waits for the receive.
  const auto& deps = attention[1].deps;
  const auto all = materialize(graph, 0);
  bool waits_for_receive = false;
  for (std::int32_t dep : deps) waits_for_receive = waits_for_receive || all[dep].op.kind == OpKind::kRecv;
  EXPECT_TRUE(waits_for_receive);
}

TEST(ContextParallel, BackwardRingCarriesKvAndDkvTwiceTheForwardBytes) {
  const Graph graph = build_cp("tiny-dense", 1, 4);
  double forward = 0, backward = 0;
  int forward_steps = 0, backward_steps = 0;
  for (const RankOp& op : materialize(graph, 1)) {
    if (op.op.layer != 2) continue;
    if (op.op.kind == OpKind::kSend) (op.op.phase == Phase::kForward ? forward : backward) += op.op.bytes;
    if (op.op.kind == OpKind::kAttention) ++(op.op.attention.backward ? backward_steps : forward_steps);
    if (op.op.kind == OpKind::kSend) {
      // Forward passes K/V to cp index + 1, backward runs the ring the other way (TransformerEngine).
      const int next = op.op.phase == Phase::kForward ? 2 : 0;  // rank 1 = cp index 1, tp 1
      EXPECT_EQ(op.peer_rank, next);
    }
  }
  // 32 tokens per rank: K, V = 2 x 32 x 128 x 2 B = 16384 B; (cp-1) = 3 sends forward, 6 K/V units backward.
  EXPECT_EQ(forward_steps, 4);
  EXPECT_EQ(backward_steps, 4);
  EXPECT_DOUBLE_EQ(forward, 3 * 16384.0);
  EXPECT_DOUBLE_EQ(backward, 6 * 16384.0);
  const model::ModelSpec model = model::load_model("tiny-dense");
  EXPECT_DOUBLE_EQ(expected_cp_bytes_per_layer(model, graph.layout), 9 * 16384.0);
}

TEST(ContextParallel, PerRankAttentionFlopsAreTheCpOneFlopsDividedByCp) {
  const model::ModelSpec model = model::load_model("llama3-8b");
  const Graph reference = build_cp("llama3-8b", 2, 1);
  double reference_flops = 0;
  for (const RankOp& op : layer_ops(reference, 0, 3, Phase::kForward))
    if (op.op.kind == OpKind::kAttention) reference_flops += op.op.flops;
  for (int cp : {2, 4, 8}) {
    const Graph graph = build_cp("llama3-8b", 2, cp);
    for (int rank = 0; rank < graph.world_size(); ++rank) {
      double forward = 0, backward = 0;
      for (const RankOp& op : materialize(graph, rank)) {
        if (op.op.kind != OpKind::kAttention || op.op.layer != 3) continue;
        (op.op.attention.backward ? backward : forward) += op.op.flops;
      }
      EXPECT_NEAR(forward, reference_flops / cp, 1e-9 * reference_flops) << "cp " << cp << " rank " << rank;
      EXPECT_DOUBLE_EQ(forward, expected_cp_attention_flops_per_rank(model, graph.layout, false));
      EXPECT_DOUBLE_EQ(backward, expected_cp_attention_flops_per_rank(model, graph.layout, true));
    }
  }
}

TEST(ContextParallel, MaterializeGivesEachRankItsStepShape) {
  // cp 2, forward step 1: rank 0 gets K/V of cp index 1 (later chunks 1, 2 of 0..3): its late chunk only,
  // 32 x 64; rank 1 gets cp index 0's K/V (chunks 0 and 3): both its chunks against chunk 0, 64 x 32.
  const Graph graph = build_cp("tiny-dense", 1, 2);
  auto step_one = [&](int rank, bool backward) {
    for (const RankOp& op : materialize(graph, rank))
      if (op.op.kind == OpKind::kAttention && op.op.attention.cp_step == 1 &&
          op.op.attention.backward == backward)
        return op.op.attention;
    return AttentionShape{};
  };
  EXPECT_EQ(step_one(0, false).seq, 32);
  EXPECT_EQ(step_one(0, false).keys(), 64);
  EXPECT_EQ(step_one(1, false).seq, 64);
  EXPECT_EQ(step_one(1, false).keys(), 32);
  // Backward runs the ring the other way: for cp 2 the source is the same neighbour.
  EXPECT_EQ(step_one(0, true).seq, 32);
  EXPECT_EQ(step_one(1, true).seq, 64);
}

TEST(ContextParallel, GradientsAreReducedOverTheDataParallelGroupWithContextParallel) {
  // tp 2 cp 2 dp 2: rank 1's gradient all-reduce spans ranks {1, 3, 5, 7} (dp x cp), as Megatron-LM's
  // dp-cp group; the ring is {1, 3}.
  const Graph graph = build_cp("tiny-dense", 2, 2, 2);
  bool found = false;
  for (const RankOp& op : materialize(graph, 1)) {
    if (op.op.kind != OpKind::kCollective || op.op.stream != Stream::kDpComm) continue;
    EXPECT_EQ(op.op.group, GroupKind::kDpCp);
    EXPECT_EQ(graph.groups[op.group_id].ranks, (std::vector<std::int32_t>{1, 3, 5, 7}));
    found = true;
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(graph.groups[graph.group_id(1, GroupKind::kCp)].ranks, (std::vector<std::int32_t>{1, 3}));
  // Even with dp 1 the cp ranks hold replicas: their gradients are reduced over the cp group.
  const Graph no_dp = build_cp("tiny-dense", 1, 2, 1);
  int reductions = 0;
  for (const RankOp& op : materialize(no_dp, 0))
    reductions += op.op.kind == OpKind::kCollective && op.op.group == GroupKind::kDpCp;
  EXPECT_GT(reductions, 0);
}

TEST(ContextParallel, EveryCheckerPassesAndVolumesMatchTheClosedForms) {
  for (auto recompute : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    const Graph graph = build_cp("tiny-dense", 2, 4, 2, 2, recompute);
    const auto problems = check_graph(graph, DeadlockScope::kAllRanks);
    EXPECT_TRUE(problems.empty()) << to_text(problems);
    const CommVolumes volumes = comm_volumes(graph);
    EXPECT_GT(volumes.cp_bytes, 0);
    // t c d = 16 ranks per stage x 4 layers x 2 micro-batches, each (cp-1)(3 + R) K/V units of
    // 2 x 32 tokens x (128 / tp) x 2 B.
    const double kv = 2.0 * 32 * 64 * 2;
    const double passes = recompute == model::Recompute::kNone ? 3.0 : 4.0;
    EXPECT_DOUBLE_EQ(volumes.cp_bytes, 16 * 4 * 2 * 3 * passes * kv);
  }
}

TEST(ContextParallel, CheckersCatchABrokenRing) {
  Graph graph = expand_programs(build_cp("tiny-dense", 1, 2));
  // Drop one ring receive from rank 1: its peer's send is unmatched and the ring deadlocks.
  auto& ops = graph.programs[1].ops;
  for (auto& op : ops) {
    if (op.kind == OpKind::kRecv && op.group == GroupKind::kCp) {
      op.tag += 100000;
      break;
    }
  }
  const auto p2p = check_point_to_point(graph);
  EXPECT_FALSE(p2p.empty());
  EXPECT_FALSE(check_deadlock(graph, DeadlockScope::kAllRanks).empty());
}

/// Attention of query rows `queries` against key rows `keys` (global positions), causal by position;
/// returns per query the unnormalized output, the row max and the row sum (flash-style partial result).
struct Partial {
  std::vector<double> out;  // rows x d, already divided by sum
  std::vector<double> lse;  // log-sum-exp per row (-inf when no key is visible)
};

Partial attend(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
               const std::vector<int>& queries, const std::vector<int>& keys, int d, bool masked) {
  Partial partial;
  partial.out.assign(queries.size() * d, 0.0);
  partial.lse.assign(queries.size(), -INFINITY);
  for (size_t row = 0; row < queries.size(); ++row) {
    std::vector<double> scores;
    double max_score = -INFINITY;
    for (int key : keys) {
      double dot = 0;
      for (int x = 0; x < d; ++x) dot += q[queries[row] * d + x] * k[key * d + x];
      const bool visible = !masked || key <= queries[row];
      scores.push_back(visible ? dot / std::sqrt(static_cast<double>(d)) : -INFINITY);
      max_score = std::max(max_score, scores.back());
    }
    if (max_score == -INFINITY) continue;
    double sum = 0;
    for (size_t col = 0; col < keys.size(); ++col) {
      const double p = std::exp(scores[col] - max_score);
      sum += p;
      for (int x = 0; x < d; ++x) partial.out[row * d + x] += p * v[keys[col] * d + x];
    }
    for (int x = 0; x < d; ++x) partial.out[row * d + x] /= sum;
    partial.lse[row] = max_score + std::log(sum);
  }
  return partial;
}

TEST(ContextParallel, RingChunkShapesComposeToExactCausalAttention) {
  // For every rank and ring step, resolve_ring_step's shape picks the query and key chunks (2c x c: both my
  // chunks against the source's first; c x 2c: my late chunk against both of the source's); merging the
  // steps' partial results by log-sum-exp must reproduce causal attention over the whole sequence. Steps
  // > 0 run without a mask, so this also proves no masked pair is ever computed there.
  const int d = 4;
  for (int cp : {2, 3, 4}) {
    for (bool backward : {false, true}) {
      const int c = 3;
      const int s = 2 * cp * c;
      std::mt19937 random(7 + cp);
      std::normal_distribution<double> normal;
      std::vector<double> q(s * d), k(s * d), v(s * d);
      for (auto* data : {&q, &k, &v})
        for (double& value : *data) value = normal(random);
      std::vector<int> all(s);
      for (int position = 0; position < s; ++position) all[position] = position;
      const Partial full = attend(q, k, v, all, all, d, true);
      auto chunk = [&](int index) {
        std::vector<int> positions;
        for (int at = 0; at < c; ++at) positions.push_back(index * c + at);
        return positions;
      };
      auto both = [&](int rank) {
        std::vector<int> positions = chunk(rank);
        for (int position : chunk(2 * cp - 1 - rank)) positions.push_back(position);
        return positions;
      };
      for (int rank = 0; rank < cp; ++rank) {
        const std::vector<int> mine = both(rank);
        std::vector<double> out(mine.size() * d, 0.0);
        std::vector<double> lse(mine.size(), -INFINITY);
        auto merge = [&](const Partial& part, const std::vector<int>& rows) {
          for (size_t row = 0; row < rows.size(); ++row) {
            const size_t at = std::find(mine.begin(), mine.end(), rows[row]) - mine.begin();
            if (part.lse[row] == -INFINITY) continue;
            const double merged = std::max(lse[at], part.lse[row]) +
                                  std::log(std::exp(lse[at] - std::max(lse[at], part.lse[row])) +
                                           std::exp(part.lse[row] - std::max(lse[at], part.lse[row])));
            for (int x = 0; x < d; ++x)
              out[at * d + x] = out[at * d + x] * std::exp(lse[at] - merged) +
                                part.out[row * d + x] * std::exp(part.lse[row] - merged);
            lse[at] = merged;
          }
        };
        merge(attend(q, k, v, mine, mine, d, true), mine);  // step 0: the diagonal, causal
        for (int step = 1; step < cp; ++step) {
          AttentionShape shape;
          shape.seq = c;
          shape.kv_seq = 2 * c;
          shape.cp_step = step;
          shape.backward = backward;
          resolve_ring_step(shape, rank, cp);
          const int source = backward ? (rank + step) % cp : (rank - step + cp) % cp;
          std::vector<int> queries, keys;
          if (shape.seq == 2 * c) {
            queries = mine;
            keys = chunk(source);
          } else {
            queries = chunk(2 * cp - 1 - rank);
            keys = both(source);
          }
          EXPECT_EQ(static_cast<int>(queries.size()) * static_cast<int>(keys.size()), 2 * c * c);
          merge(attend(q, k, v, queries, keys, d, false), queries);
        }
        for (size_t row = 0; row < mine.size(); ++row)
          for (int x = 0; x < d; ++x)
            EXPECT_NEAR(out[row * d + x], full.out[mine[row] * d + x], 1e-12)
                << "cp " << cp << " rank " << rank << " position " << mine[row];
      }
    }
  }
}

TEST(ContextParallel, AllGatherVariantGathersKvAndScattersTheirGradients) {
  // tiny-dense, cp 4, all-gather: per layer forward one all-gather of the 4 ranks' K/V (4 x 16384 B) and two
  // attention chunks; backward gathers again, runs both chunks and reduce-scatters dK/dV.
  const Graph graph =
      build_cp("tiny-dense", 1, 4, 1, 1, model::Recompute::kNone, parallel::CpComm::kAllGather);
  for (int rank = 0; rank < 4; ++rank) {
    int gathers = 0, scatters = 0, chunks = 0;
    double forward = 0, backward = 0;
    for (const RankOp& op : materialize(graph, rank)) {
      if (op.op.layer != 1) continue;
      if (op.op.kind == OpKind::kCollective && op.op.group == GroupKind::kCp) {
        EXPECT_DOUBLE_EQ(op.op.bytes, 4 * 16384.0);
        EXPECT_EQ(op.op.stream, Stream::kCpComm);
        gathers += op.op.collective == CollectiveKind::kAllGather;
        scatters += op.op.collective == CollectiveKind::kReduceScatter;
      }
      if (op.op.kind == OpKind::kAttention) {
        ++chunks;
        const AttentionShape& shape = op.op.attention;
        EXPECT_TRUE(shape.causal);
        EXPECT_EQ(shape.seq, 16);  // one chunk: 128 / 8
        // Rank i: the early chunk sees chunks 0..i, the late one 0..7-i.
        EXPECT_EQ(shape.keys(), shape.cp_gathered == 1 ? 16 * (rank + 1) : 16 * (8 - rank));
        (shape.backward ? backward : forward) += op.op.flops;
        // The op's cost is its own key range's, not cp index 0's: rank 3's late chunk is 16 queries against
        // 80 keys, 16 (80 - 16) + 16^2 / 2 pairs x 4 x 8 heads x 32 (cp index 0's would be 16 x 128 keys).
        if (rank == 3 && shape.cp_gathered == 2 && !shape.backward) {
          EXPECT_DOUBLE_EQ(op.op.flops, 4.0 * (16 * 64 + 0.5 * 16 * 16) * 8 * 32) << describe(op.op);
        }
        EXPECT_DOUBLE_EQ(op.op.flops, attention_flops(shape)) << describe(op.op);
        EXPECT_DOUBLE_EQ(op.op.bytes, attention_bytes(shape)) << describe(op.op);
      }
    }
    EXPECT_EQ(gathers, 2);
    EXPECT_EQ(scatters, 1);
    EXPECT_EQ(chunks, 4);
    const model::ModelSpec model = model::load_model("tiny-dense");
    EXPECT_DOUBLE_EQ(forward, expected_cp_attention_flops_per_rank(model, graph.layout, false));
    EXPECT_DOUBLE_EQ(backward, expected_cp_attention_flops_per_rank(model, graph.layout, true));
  }
  EXPECT_DOUBLE_EQ(expected_cp_bytes_per_layer(model::load_model("tiny-dense"), graph.layout),
                   3 * 4 * 16384.0);
  for (auto recompute : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    const Graph checked = build_cp("tiny-dense", 2, 2, 2, 2, recompute, parallel::CpComm::kAllGather);
    const auto problems = check_graph(checked, DeadlockScope::kAllRanks);
    EXPECT_TRUE(problems.empty()) << to_text(problems);
  }
}

TEST(ContextParallel, GatheredChunkShapesAreExactCausalAttention) {
  // resolve_ring_step's key range for the all-gather chunks, with the bottom-right causal mask (the queries
  // are the last rows of the key range), gives exactly the rows of causal attention over the sequence.
  const int d = 4;
  for (int cp : {2, 3, 4}) {
    const int c = 3;
    const int s = 2 * cp * c;
    std::mt19937 random(11 + cp);
    std::normal_distribution<double> normal;
    std::vector<double> q(s * d), k(s * d), v(s * d);
    for (auto* data : {&q, &k, &v})
      for (double& value : *data) value = normal(random);
    std::vector<int> all(s);
    for (int position = 0; position < s; ++position) all[position] = position;
    const Partial full = attend(q, k, v, all, all, d, true);
    for (int rank = 0; rank < cp; ++rank) {
      for (int which : {1, 2}) {
        AttentionShape shape;
        shape.seq = c;
        shape.kv_seq = which == 1 ? c : 2 * cp * c;
        shape.cp_gathered = static_cast<std::int8_t>(which);
        resolve_ring_step(shape, rank, cp);
        std::vector<int> keys(shape.keys());
        for (int position = 0; position < shape.keys(); ++position) keys[position] = position;
        std::vector<int> queries;
        for (int row = 0; row < c; ++row) queries.push_back(shape.keys() - c + row);  // bottom-right rows
        const int chunk = which == 1 ? rank : 2 * cp - 1 - rank;
        EXPECT_EQ(queries.front(), chunk * c) << "cp " << cp << " rank " << rank;
        const Partial part = attend(q, k, v, queries, keys, d, true);
        for (int row = 0; row < c; ++row)
          for (int x = 0; x < d; ++x)
            EXPECT_NEAR(part.out[row * d + x], full.out[queries[row] * d + x], 1e-12);
      }
    }
  }
}

TEST(ContextParallel, TorchVariantGathersQueryHeadKvAndMergesInFp32) {
  // tiny-dense, cp 4, torch: 32 tokens per rank, 8 heads x 32 = 256 query values per token, E = 8192.
  // Per layer forward: one all-gather of the 4 ranks' K and V at the query heads (4 x 2 x 2 B x E), waited
  // for by step 1 only; 4 steps, each followed by its fp32 merge. Backward: the gather again, and after each
  // step's accumulation the dK/dV (fp32, query heads: 2 x 4 B x E) sent to cp index + 1.
  const Graph graph = build_cp("tiny-dense", 1, 4, 1, 1, model::Recompute::kNone, parallel::CpComm::kTorch);
  const double values = 32.0 * 256.0;
  const std::vector<double> forward_merge = {14 * values, 46 * values, 46 * values, 44 * values};
  const std::vector<double> backward_merge = {66 * values, 60 * values, 60 * values, 70 * values};
  for (int rank = 0; rank < 4; ++rank) {
    const auto ops = materialize(graph, rank);
    double cp_bytes = 0, forward_flops = 0, backward_flops = 0;
    int gathers = 0, sends = 0, gather_index = -1, steps_seen = 0;
    std::vector<double> forward_merges, backward_merges;
    for (int index = 0; index < static_cast<int>(ops.size()); ++index) {
      const Op& op = ops[index].op;
      if (op.layer != 1) continue;
      const bool backward = op.phase == Phase::kBackward;
      if (op.kind == OpKind::kCollective && op.group == GroupKind::kCp) {
        EXPECT_EQ(op.collective, CollectiveKind::kAllGather);
        EXPECT_EQ(op.stream, Stream::kCpComm);
        EXPECT_DOUBLE_EQ(op.bytes, 4 * 2 * 2 * values);
        cp_bytes += op.bytes;
        ++gathers;
        gather_index = index;
        steps_seen = 0;
      }
      if (op.kind == OpKind::kSend) {
        EXPECT_TRUE(backward);
        EXPECT_EQ(op.peer_offset, 1);
        EXPECT_DOUBLE_EQ(op.bytes, 2 * 4 * values);
        cp_bytes += op.bytes;
        ++sends;
      }
      if (op.kind == OpKind::kAttention) {
        const auto& deps = ops[index].deps;
        const bool waits_gather = std::find(deps.begin(), deps.end(), gather_index) != deps.end();
        EXPECT_EQ(waits_gather, steps_seen == 1) << describe(op);
        ++steps_seen;
        (backward ? backward_flops : forward_flops) += op.flops;
      }
      if (op.kind == OpKind::kElementwise && op.elementwise == ElementwiseKind::kCpMerge)
        (backward ? backward_merges : forward_merges).push_back(op.bytes);
    }
    EXPECT_EQ(gathers, 2);
    EXPECT_EQ(sends, 4);
    EXPECT_EQ(forward_merges, forward_merge);
    EXPECT_EQ(backward_merges, backward_merge);
    const model::ModelSpec model = model::load_model("tiny-dense");
    EXPECT_DOUBLE_EQ(forward_flops, expected_cp_attention_flops_per_rank(model, graph.layout, false));
    EXPECT_DOUBLE_EQ(backward_flops, expected_cp_attention_flops_per_rank(model, graph.layout, true));
    EXPECT_DOUBLE_EQ(cp_bytes, expected_cp_bytes_per_layer(model, graph.layout));
  }
  for (auto recompute : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    const Graph checked = build_cp("tiny-dense", 2, 2, 2, 2, recompute, parallel::CpComm::kTorch);
    const auto problems = check_graph(checked, DeadlockScope::kAllRanks);
    EXPECT_TRUE(problems.empty()) << to_text(problems);
  }
}

}  // namespace
}  // namespace calo::graph
