#include "exec/bench_bounds.h"

#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/table.h"
#include "exec/plan.h"
#include "graph/op_budget.h"
#include "parallel/memory.h"

namespace calo::exec {
namespace {

/// Cores this process may run on (its affinity mask), at least 1.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

/// A value in kB of /proc/meminfo's line `key` ("MemAvailable:"), in bytes; < 0 when absent.
double meminfo_bytes(const std::string& key) {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  double kilobytes = 0;
  std::string unit;
  while (meminfo >> name >> kilobytes) {
    std::getline(meminfo, unit);
    if (name == key) return kilobytes * 1024.0;
  }
  return -1;
}

/// Bytes of address space this process maps now (/proc/self/statm's first field); 0 when unknown.
double mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  if (!(statm >> pages)) return 0;
  return pages * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

/// The flags that shrink the operand buffers of op kind `kind` the most.
const char* operand_fix(graph::OpKind kind) {
  switch (kind) {
    case graph::OpKind::kOptimizer:
      return "a slice of fewer layers (--layers N), more --tp or --pp, or --zero 1 to shard the optimizer "
             "over --dp";
    case graph::OpKind::kCollective:
      return "a smaller --mbs or --seq, more --tp or --pp, or a slice of fewer layers (--layers N)";
    default:
      return "a smaller --mbs or --seq, or more --tp";
  }
}

/// What `device`'s memory_bytes is, in words for a refusal.
std::string memory_origin(const DeviceDescription& device) {
  if (device.backend != "cpu") return fmt::format("the memory of {}", device.name);
  if (address_space_headroom_bytes() <= device.memory_bytes * 1.001)
    return "what the address-space limit (RLIMIT_AS, ulimit -v) leaves this process";
  return "the host's memory shared by its local ranks";
}

}  // namespace

void check_operands_fit(const BackendFactory& factory, const graph::Graph& graph,
                        const std::vector<int>& ranks, const DeviceDescription& device) {
  if (!factory.operand_footprint) return;
  int worst_rank = -1;
  OperandFootprint worst;
  for (const int rank : ranks) {
    const OperandFootprint footprint = factory.operand_footprint(graph, rank);
    if (worst_rank < 0 || footprint.total_bytes() > worst.total_bytes()) {
      worst_rank = rank;
      worst = footprint;
    }
  }
  const double usable_bytes = device.memory_bytes * kUsableMemoryFraction;
  if (worst_rank < 0 || worst.total_bytes() <= usable_bytes) return;
  std::vector<int> kinds(graph::kNumOpKinds);
  std::iota(kinds.begin(), kinds.end(), 0);
  std::sort(kinds.begin(), kinds.end(), [&worst](int left, int right) {
    return worst.bytes_by_kind[static_cast<size_t>(left)] > worst.bytes_by_kind[static_cast<size_t>(right)];
  });
  std::string parts;
  for (const int kind : kinds) {
    const double bytes = worst.bytes_by_kind[static_cast<size_t>(kind)];
    if (bytes <= 0) continue;
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ",
                         graph::to_string(static_cast<graph::OpKind>(kind)), core::format_bytes(bytes));
  }
  const parallel::Layout& layout = graph.layout;
  throw InputError(fmt::format(
      "--mbs {} --seq {}: rank {}'s operand buffers on the {} backend come to {} ({}; counted before "
      "allocating any), more than the {} it may use ({:.0f} % of {}, {}); give {}{}",
      layout.micro_batch, layout.seq_length, worst_rank, device.backend,
      core::format_bytes(worst.total_bytes()), parts, core::format_bytes(usable_bytes),
      kUsableMemoryFraction * 100, core::format_bytes(device.memory_bytes), memory_origin(device),
      operand_fix(static_cast<graph::OpKind>(kinds.front())),
      device.backend == "cpu" ? ", or --backend cuda" : ""));
}

void check_launch_operands(const BackendFactory& factory, const BenchOptions& options, int nproc) {
  if (nproc <= 1 || !factory.describe || !factory.operand_footprint) return;
  const graph::Graph graph = graph::build_graph(options.model, options.layout);
  std::vector<int> ranks(static_cast<size_t>(nproc));
  std::iota(ranks.begin(), ranks.end(), 0);
  check_operands_fit(factory, graph, ranks, factory.describe(0, nproc));
}

double address_space_headroom_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<double>::infinity();
  return std::max(0.0, static_cast<double>(limit.rlim_cur) - mapped_bytes());
}

double available_host_bytes() {
  const double available = meminfo_bytes("MemAvailable:");
  if (available >= 0) return available;
  const long pages = sysconf(_SC_PHYS_PAGES);
  return static_cast<double>(std::max(0L, pages)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

void check_bench_steps(const BenchOptions& options) {
  require_input(options.steps >= 1, fmt::format("--steps {}: give at least 1 measured step", options.steps));
  require_input(options.warmup >= 0,
                fmt::format("--warmup {}: give 0 or more warm-up steps", options.warmup));
  const std::int64_t total_steps = std::int64_t{options.steps} + options.warmup;
  require_input(total_steps <= kMaxBenchSteps,
                fmt::format("--steps {} with --warmup {} is {} steps, beyond the {} one bench runs (each "
                            "keeps every rank's timings); give fewer steps, or run several benches",
                            options.steps, options.warmup, total_steps, kMaxBenchSteps));
  if (!options.trace_ops) return;
  const std::int64_t spans = graph::estimated_op_count(options.model, options.layout) * total_steps;
  require_input(spans <= kMaxBenchTracedSpans,
                fmt::format("--trace-ops over {} steps keeps ~{:.3g} M op spans ({} ops a step), beyond the "
                            "{:.0f} M one run stores (~90 bytes each); give fewer --steps/--warmup or leave "
                            "--trace-ops out",
                            total_steps, static_cast<double>(spans) / 1e6, spans / total_steps,
                            static_cast<double>(kMaxBenchTracedSpans) / 1e6));
}

void check_cpu_ranks(const BenchOptions& options, int nproc, bool oversubscribe) {
  if (oversubscribe || nproc <= 1) return;
  const int cores = usable_cores();
  require_input(nproc <= kMaxCpuRanksPerCore * cores,
                fmt::format("--nproc {} (the layout's ranks, --dp/--tp/--pp): {} CPU ranks on {} core(s) is "
                            "more than {} per core, each a process with its own BLAS thread; give a layout "
                            "of at most {} ranks, or --oversubscribe to start them anyway",
                            nproc, nproc, cores, kMaxCpuRanksPerCore, kMaxCpuRanksPerCore * cores));
  const double model_bytes = parallel::memory_per_gpu(options.model, options.layout).total_bytes();
  const double rank_bytes = kCpuRankBaseBytes + model_bytes;
  const double available_bytes = available_host_bytes();
  require_input(rank_bytes * nproc <= available_bytes,
                fmt::format("--nproc {}: {} CPU ranks of ~{} each ({} for calo, {} for the model's state "
                            "and activations) need ~{}, more than the {} this host has available; give a "
                            "layout of fewer ranks, a smaller --mbs/--seq or --layers, or --oversubscribe to "
                            "start them anyway",
                            nproc, nproc, core::format_bytes(rank_bytes),
                            core::format_bytes(kCpuRankBaseBytes), core::format_bytes(model_bytes),
                            core::format_bytes(rank_bytes * nproc), core::format_bytes(available_bytes)));
}

}  // namespace calo::exec
