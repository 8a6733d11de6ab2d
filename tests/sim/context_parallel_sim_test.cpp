// Context parallelism in the simulator: cp halves each rank's attention time and adds ring traffic
// (overlapped with the attention chunks), the ring is costed on the link its peers actually share (Megatron
// rank order tp-cp-ep-dp-pp), and a 128K-token Llama 3 70B layout that only fits with cp simulates.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../common/run_calo.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

/// Attention-core busy time of `rank` in the recorded last step.
double attention_s(const graph::Graph& graph, const SimResult& result, int rank) {
  double total = 0;
  for (const OpSpan& span : result.timeline[rank])
    if (graph.program(rank).ops[span.op].kind == graph::OpKind::kAttention)
      total += span.end_s - span.begin_s;
  return total;
}

parallel::Layout long_context(int tp, int cp, int dp) {
  parallel::Layout layout;
  layout.tp = tp;
  layout.cp = cp;
  layout.dp = dp;
  layout.seq_length = 16384;
  layout.global_batch = dp;
  return layout;
}

SimOptions quiet_options() {
  SimOptions options;
  options.power_cap = false;
  options.thermal = false;
  options.record_timeline = true;
  return options;
}

TEST(ContextParallelSim, CpTwoHalvesAttentionTimeAndAddsOverlappedRingTraffic) {
  const ClusterSpec cluster = load_cluster("h100-hgx");
  // Two GPUs either way: dp 2 (each rank attends over 16384 tokens) or cp 2 (each over its 8192).
  const graph::Graph without = testing::make_graph("llama3-8b-4layers", long_context(1, 1, 2));
  const graph::Graph with = testing::make_graph("llama3-8b-4layers", long_context(1, 2, 1));
  const SimResult base = simulate(without, cluster, quiet_options());
  const SimResult ring = simulate(with, cluster, quiet_options());
  const double ratio = attention_s(with, ring, 0) / attention_s(without, base, 0);
  EXPECT_GT(ratio, 0.4);
  EXPECT_LT(ratio, 0.6);
  const int cp_class = static_cast<int>(graph::GroupKind::kCp);
  EXPECT_EQ(base.comm_transfer_s[cp_class], 0.0);
  EXPECT_GT(ring.comm_transfer_s[cp_class], 0.0);
  // The K/V exchange runs beside the previous attention chunk: most of it is hidden.
  EXPECT_LT(ring.exposed_comm_s[cp_class], 0.5 * ring.comm_transfer_s[cp_class]);
  EXPECT_LT(ring.iteration_s, base.iteration_s);  // half the attention per rank (same GEMM work per rank)
}

TEST(ContextParallelSim, RingMessagesCrossNodesWhenTpFillsTheNode) {
  // tp 8 cp 2 on 8-GPU nodes: rank = tp + 8 cp, so the ring neighbour of rank 0 is rank 8 on the next node;
  // with tp 4 it is rank 4 on the same node.
  const ClusterSpec cluster = load_cluster("h100-hgx");
  for (int tp : {4, 8}) {
    const graph::Graph graph = testing::make_graph("llama3-8b-4layers", long_context(tp, 2, 1));
    const SimResult result = simulate(graph, cluster, quiet_options());
    const int peer = tp;  // cp index 1, tp index 0
    bool seen = false;
    std::map<int, double> send_begin_of_batch;
    for (const OpSpan& span : result.timeline[0]) {
      const graph::Op& op = graph.program(0).ops[span.op];
      if (op.group != graph::GroupKind::kCp) continue;
      if (op.kind == graph::OpKind::kSend) {
        EXPECT_NEAR(span.end_s - span.begin_s, p2p_time_s(cluster, op.bytes, 0, peer), 1e-12);
        send_begin_of_batch[op.p2p_batch] = span.begin_s;
        seen = true;
      } else if (op.kind == graph::OpKind::kRecv) {
        // Full duplex: the exchange's receive runs beside its send (the ranks are symmetric).
        ASSERT_TRUE(send_begin_of_batch.contains(op.p2p_batch));
        EXPECT_NEAR(span.begin_s, send_begin_of_batch[op.p2p_batch], 1e-12);
      }
    }
    EXPECT_TRUE(seen);
    const bool same_node = 0 / cluster.node.gpus == peer / cluster.node.gpus;
    EXPECT_EQ(same_node, tp == 4);
  }
}

TEST(ContextParallelSim, Llama70bAt128kTokensFitsOnlyWithContextParallel) {
  // 1024 H100: TP8 CP8 PP4 DP4 fits and simulates; TP8 PP4 DP32 (cp 1) is refused by the memory check, and
  // the refusal suggests context-parallel layouts.
  const std::string common =
      "sim --model llama3-70b --cluster h100-hgx --tp 8 --pp 4 --seq 131072 --gbs 128 --recompute selective "
      "--zero 1 --steps 1 --no-store";
  const calo::testing::Outcome fits = calo::testing::run_calo(common + " --cp 8 --dp 4 --json");
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  const auto json = nlohmann::json::parse(fits.output.substr(fits.output.find('{')));
  EXPECT_EQ(json["gpus"], 1024);
  EXPECT_GT(json["iteration_s"].get<double>(), 0);
  EXPECT_GT(json["mfu"].get<double>(), 0.2);
  const calo::testing::Outcome refused = calo::testing::run_calo(common + " --dp 32");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("per GPU"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--cp "), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace calo::sim
