// The CPU backend's operand buffers counted before any is allocated (cpu_operand_footprint, the op units' own
// prepare in counting mode) are exactly what Executor::prepare then allocates, and check_operands_fit refuses
// a rank whose count exceeds the usable share of its memory, naming the figure and the flags.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/bench_bounds.h"
#include "exec/bootstrap.h"
#include "exec/cpu_backend.h"
#include "exec/executor.h"
#include "exec/plan.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::exec {
namespace {

/// One world-size-1 layout of `model_name`, its count and what preparing its ops allocated.
struct Counted {
  OperandFootprint counted;
  std::int64_t allocated_bytes = 0;
};

/// The graph of `model_name` under `layout` (resolved).
graph::Graph graph_of(const std::string& model_name, const parallel::Layout& layout) {
  const model::ModelSpec spec = model::load_model(model_name);
  return graph::build_graph(spec, parallel::resolve_layout(spec, layout));
}

Counted count_and_prepare(const std::string& model_name, const parallel::Layout& layout) {
  const graph::Graph graph = graph_of(model_name, layout);
  Counted result;
  result.counted = cpu_operand_footprint(graph, 0);
  auto backend = BackendRegistry::instance().select("cpu").create(BackendConfig{});
  LaunchInfo launch;
  auto bootstrap = make_bootstrap(launch);
  backend->connect(graph, 0, *bootstrap);
  Executor executor(*backend, graph, 0, ExecutorOptions{});
  executor.prepare();
  result.allocated_bytes = backend->allocated_bytes();
  return result;
}

TEST(OperandFootprint, TheCountIsWhatPrepareAllocates) {
  parallel::Layout longer;
  longer.micro_batch = 2;
  longer.global_batch = 4;
  longer.seq_length = 256;
  parallel::Layout recomputed;
  recomputed.recompute = parallel::Recompute::kFull;
  for (const auto& [model_name, layout] :
       {std::pair{"tiny-dense", parallel::Layout{}}, std::pair{"tiny-dense", longer},
        std::pair{"tiny-dense", recomputed}, std::pair{"tiny-moe", parallel::Layout{}}}) {
    const Counted result = count_and_prepare(model_name, layout);
    EXPECT_GT(result.allocated_bytes, 0) << model_name;
    EXPECT_EQ(result.counted.total_bytes(), static_cast<double>(result.allocated_bytes))
        << model_name << " mbs " << layout.micro_batch << " seq " << layout.seq_length;
    EXPECT_GT(result.counted.bytes_by_kind[static_cast<size_t>(graph::OpKind::kGemm)], 0);
    EXPECT_GT(result.counted.bytes_by_kind[static_cast<size_t>(graph::OpKind::kOptimizer)], 0);
  }
}

TEST(OperandFootprint, ARankWhoseOperandsExceedItsMemoryIsRefusedNamingTheFigureAndFlags) {
  parallel::Layout layout;
  layout.micro_batch = 4;
  layout.global_batch = 4;
  layout.seq_length = 512;
  const graph::Graph graph = graph_of("tiny-dense", layout);
  const BackendFactory& factory = BackendRegistry::instance().select("cpu");
  const double operand_bytes = cpu_operand_footprint(graph, 0).total_bytes();
  DeviceDescription device;
  device.backend = "cpu";
  device.memory_bytes = operand_bytes / kUsableMemoryFraction * 1.01;  // just fits
  EXPECT_NO_THROW(check_operands_fit(factory, graph, {0}, device));
  device.memory_bytes = operand_bytes / kUsableMemoryFraction * 0.99;  // just does not
  try {
    check_operands_fit(factory, graph, {0}, device);
    ADD_FAILURE() << "operands beyond the rank's memory were not refused";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("--mbs 4 --seq 512: rank 0's operand buffers on the cpu backend come to"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("counted before allocating any"), std::string::npos) << message;
    EXPECT_NE(message.find("give a smaller --mbs or --seq"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace calo::exec
