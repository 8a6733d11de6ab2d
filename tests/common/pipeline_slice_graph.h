// A small pipelined training graph shared by the evaluation-step suites (graph and sim): Llama3-8B sliced to
// 4 layers at seq 1024 on 8 ranks, TP2 x interleaved PP2 (2 chunks) x DP2, four micro-batches per replica,
// every communication overlapped.
#pragma once

#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::testing {

/// The graph above at ZeRO stage `zero_stage`.
inline graph::Graph pipeline_slice_graph(int zero_stage) {
  const model::ModelSpec model = model::slice_model(model::load_model("llama3-8b"), 4);
  parallel::Layout layout;
  layout.tp = layout.pp = layout.dp = 2;
  layout.virtual_stages = 2;
  layout.schedule = parallel::Schedule::kInterleaved;
  layout.zero_stage = zero_stage;
  layout.micro_batch = 1;
  layout.global_batch = 8;
  layout.seq_length = 1024;
  layout.overlap_tp_comm = layout.overlap_grad_reduce = layout.overlap_param_gather = true;
  return graph::build_graph(model, parallel::resolve_layout(model, layout));
}

}  // namespace calo::testing
