// The evaluation step of a training graph: the forward passes of every micro-batch in the training schedule's
// order, without backward, recompute, optimizer, gradient reduction or the data-parallel parameter gathers
// that follow an optimizer step (ZeRO-1/2). FSDP's per-unit gathers stay: a sharded model gathers them for
// every forward. What evaluation in Megatron/NeMo and torchtitan runs between training steps
// (docs/SIMULATOR.md "Evaluation steps").
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace calo::graph {

namespace {

/// Whether `op` belongs to an evaluation step of a graph whose layout shards at ZeRO stage `zero_stage`.
bool kept_in_evaluation(const Op& op, int zero_stage) {
  if (op.phase != Phase::kForward) return false;
  // ZeRO-1/2 gather the updated parameters after the optimizer (overlapped with the next forward); an
  // evaluation between training steps has no update to gather. FSDP (stage 3) gathers every unit per pass.
  return !(op.stream == Stream::kDpComm && zero_stage < 3);
}

/// `program` with only the ops kept in evaluation; dependencies on dropped ops are dropped too (nothing of a
/// forward pass waits for a backward one's data), indices renumbered.
RankProgram evaluation_program(const RankProgram& program, int zero_stage) {
  RankProgram out;
  out.stage = program.stage;
  out.ep_index = program.ep_index;
  std::vector<std::int32_t> new_index(program.ops.size(), -1);
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const Op& op = program.ops[index];
    if (!kept_in_evaluation(op, zero_stage)) continue;
    Op kept = op;
    kept.dep_begin = static_cast<std::uint32_t>(out.deps.size());
    for (std::int32_t dep : program.deps_of(index))
      if (new_index[dep] >= 0) out.deps.push_back(new_index[dep]);
    kept.dep_count = static_cast<std::uint32_t>(out.deps.size()) - kept.dep_begin;
    new_index[index] = static_cast<std::int32_t>(out.ops.size());
    out.ops.push_back(kept);
  }
  return out;
}

}  // namespace

Graph evaluation_graph(Graph training) {
  for (RankProgram& program : training.programs)
    program = evaluation_program(program, training.layout.zero_stage);
  return training;
}

}  // namespace calo::graph
