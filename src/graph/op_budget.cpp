#include "graph/op_budget.h"

#include <fmt/format.h>


#include "core/error.h"
#include "graph/builder_internal.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

/// Ops of the graph of the first `layers` layers at `microbatches` micro-batches on one pipeline stage, and
/// its programs (one, or one per expert-parallel index when their experts' loads differ).
struct ProxyCount {
  std::int64_t ops = 0;
  std::int64_t programs = 0;
};

ProxyCount proxy_ops(const model::ModelSpec& model, const parallel::Layout& layout, int layers,
                     int microbatches, const GraphOptions& options) {
  parallel::Layout proxy = layout;
  proxy.pp = 1;
  proxy.virtual_stages = 1;
  proxy.schedule = parallel::Schedule::k1F1B;
  proxy.layers_per_stage.clear();
  proxy.stage_gpus.clear();
  proxy.global_batch = microbatches * layout.micro_batch * layout.dp;
  const model::ModelSpec sliced = model::slice_model(model, layers);
  const Graph graph =
      detail::build_graph_unchecked(sliced, parallel::resolve_layout(sliced, proxy, true), options);
  ProxyCount count;
  count.programs = static_cast<std::int64_t>(graph.programs.size());
  for (const RankProgram& program : graph.programs)
    count.ops += static_cast<std::int64_t>(program.ops.size());
  return count;
}

}  // namespace

std::int64_t estimated_op_count(const model::ModelSpec& model, const parallel::Layout& layout,
                                const GraphOptions& options) {
  // ops(L, m) = fixed + per_layer L + per_microbatch m + per_layer_microbatch L m on one stage.
  const ProxyCount first = proxy_ops(model, layout, 1, 1, options);
  const std::int64_t one_one = first.ops;
  const std::int64_t one_two = proxy_ops(model, layout, 1, 2, options).ops;
  std::int64_t both = 0, per_layer = 0;
  if (model.num_layers >= 2) {
    const std::int64_t two_one = proxy_ops(model, layout, 2, 1, options).ops;
    const std::int64_t two_two = proxy_ops(model, layout, 2, 2, options).ops;
    both = two_two - two_one - one_two + one_one;
    per_layer = two_one - one_one - both;
  }
  const std::int64_t per_microbatch = one_two - one_one - both;
  const std::int64_t fixed = one_one - per_layer - per_microbatch - both;
  const std::int64_t layers = model.num_layers;
  const std::int64_t microbatches = layout.num_microbatches();
  // Each stage holds the fixed ops (an upper estimate: the embedding's are on the first and last only); each
  // chunk of a stage sends and receives an activation and a gradient per micro-batch (plus an all-gather each
  // way under pipeline scatter/gather).
  const std::int64_t pipeline_ops_per_chunk = layout.scatter_gather_in_effect() ? 6 : 4;
  const std::int64_t pipeline_ops = layout.pp > 1 ? first.programs * pipeline_ops_per_chunk * microbatches *
                                                        layout.virtual_stages * layout.pp
                                                  : 0;
  return fixed * layout.pp + per_layer * layers + per_microbatch * microbatches +
         both * layers * microbatches + pipeline_ops;
}

std::int64_t check_op_budget(const model::ModelSpec& model, const parallel::Layout& layout,
                             const GraphOptions& options) {
  const std::int64_t ops = estimated_op_count(model, layout, options);
  if (ops <= kMaxGraphOps) return ops;
  throw InputError(fmt::format(
      "{} of {} ({} layers, {} micro-batches per step) is a graph of about {:.0f} M ops, beyond the {:.0f} M "
      "one simulation may build (~{:.1f} GB at about {:.1f} KB per op with the engine and the stored op "
      "spans); "
      "fewer micro-batches fit: raise --mbs or lower --gbs (or use fewer layers)",
      parallel::describe(layout), model.name, model.num_layers, layout.num_microbatches(), ops / 1e6,
      kMaxGraphOps / 1e6, ops * kStoredBytesPerOp / 1e9, kStoredBytesPerOp / 1e3));
}

}  // namespace calo::graph
