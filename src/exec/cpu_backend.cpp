// CPU backend: OpenBLAS sgemm, attention as GEMMs + softmax, elementwise ops moving the op's bytes, AdamW,
// and MPI collectives / send-recv. One host thread per graph stream; MPI calls are serialized through
// mpi_mutex() and progress by polling non-blocking requests, so streams overlap without MPI_THREAD_MULTIPLE.
// This file is the Backend (streams, events, launch, communicators, buffers); each op kind's prepare / run /
// verify is a unit in its own file (cpu_internal.h), found through kUnits.
#include "exec/cpu_backend.h"

#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/table.h"
#include "core/time.h"
#include "exec/bench_bounds.h"
#include "exec/cpu_internal.h"
#include "exec/mpi_env.h"
#include "exec/op_units.h"

namespace calo::exec {
namespace cpu {

namespace {

/// Bytes of a buffer of max(1, elements) fp32 values.
double buffer_bytes(std::int64_t elements) {
  return static_cast<double>(std::max<std::int64_t>(1, elements)) * sizeof(float);
}

}  // namespace

std::shared_ptr<std::vector<float>> CpuContext::owned(std::int64_t elements, std::uint64_t seed,
                                                      float scale) {
  if (counting != nullptr) {
    counting->footprint.bytes_by_kind[static_cast<size_t>(counting->kind)] += buffer_bytes(elements);
    return std::make_shared<std::vector<float>>();
  }
  auto buffer =
      std::make_shared<std::vector<float>>(static_cast<size_t>(std::max<std::int64_t>(1, elements)));
  fill_random(*buffer, seed, scale);
  allocated_bytes += static_cast<std::int64_t>(buffer->size() * sizeof(float));
  return buffer;
}

std::shared_ptr<std::vector<float>> CpuContext::shared(const std::string& role, std::int64_t elements,
                                                       std::uint64_t seed) {
  if (counting != nullptr) {
    if (counting->shared_counted.emplace(role, elements).second)
      counting->footprint.bytes_by_kind[static_cast<size_t>(counting->kind)] += buffer_bytes(elements);
    return std::make_shared<std::vector<float>>();
  }
  auto& slot = scratch[{role, elements}];
  if (!slot) slot = owned(elements, seed);
  return slot;
}

}  // namespace cpu

namespace {

using cpu::CpuContext;
using cpu::CpuOp;
using cpu::CpuOpUnit;
using graph::OpKind;

/// A host thread executing tasks in order (one per graph stream).
class CpuStream final : public Stream {
 public:
  CpuStream(graph::Stream kind, std::function<void(const std::string&)> on_error)
      : kind_(kind), on_error_(std::move(on_error)) {
    thread_ = std::thread([this] { run(); });
  }
  ~CpuStream() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  graph::Stream kind() const override { return kind_; }
  void enqueue(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
      ++pending_;
    }
    wake_.notify_all();
  }
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      try {
        task();
      } catch (const std::exception& error) {
        on_error_(error.what());
      }
      {
        std::lock_guard lock(mutex_);
        --pending_;
      }
      idle_.notify_all();
    }
  }

  graph::Stream kind_;
  std::function<void(const std::string&)> on_error_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> tasks_;
  std::int64_t pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

/// Host memory held through Backend::hold: pages touched so they exist; the total held and its peak.
class HostHolds {
 public:
  void hold(std::int32_t slot, std::int64_t bytes, const std::string& what) {
    std::unique_ptr<std::byte[]> block(new (std::nothrow) std::byte[static_cast<size_t>(bytes)]);
    if (!block) {
      throw InputError(
          fmt::format("out of host memory holding {} for {} (--memory real): give a smaller "
                      "--mbs or --seq, or --memory model (operand buffers only)",
                      core::format_bytes(static_cast<double>(bytes)), what));
    }
    std::memset(block.get(), 0, static_cast<size_t>(bytes));
    std::lock_guard lock(mutex_);
    if (static_cast<size_t>(slot) >= blocks_.size()) blocks_.resize(static_cast<size_t>(slot) + 1);
    blocks_[static_cast<size_t>(slot)] = {std::move(block), bytes};
    held_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, held_bytes_);
  }
  void release(std::int32_t slot) {
    std::lock_guard lock(mutex_);
    if (static_cast<size_t>(slot) >= blocks_.size()) return;
    held_bytes_ -= blocks_[static_cast<size_t>(slot)].second;
    blocks_[static_cast<size_t>(slot)] = {};
  }
  std::int64_t peak_bytes() {
    std::lock_guard lock(mutex_);
    return peak_bytes_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::unique_ptr<std::byte[]>, std::int64_t>> blocks_;
  std::int64_t held_bytes_ = 0;
  std::int64_t peak_bytes_ = 0;
};

/// Completes when its stream reaches it; keeps the host time it completed at.
class CpuEvent final : public Event {
 public:
  std::uint64_t arm() {
    std::lock_guard lock(mutex_);
    return ++recorded_;
  }
  void complete(std::uint64_t generation) {
    {
      std::lock_guard lock(mutex_);
      completed_ = std::max(completed_, generation);
      t_ns_ = core::monotonic_ns();
    }
    done_.notify_all();
  }
  void wait_for(std::uint64_t generation) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return completed_ >= generation; });
  }
  std::int64_t t_ns() {
    std::lock_guard lock(mutex_);
    return t_ns_;
  }
  std::uint64_t recorded() {
    std::lock_guard lock(mutex_);
    return recorded_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::uint64_t recorded_ = 0;
  std::uint64_t completed_ = 0;
  std::int64_t t_ns_ = 0;
};

std::string read_cpu_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "CPU";
}

/// Host memory one of `ranks` local ranks may use: its share of the host's, or what the address-space limit
/// (RLIMIT_AS) leaves this process when that is less (so that the memory plan refuses what would not fit).
double rank_memory_bytes(int ranks) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  const double host_bytes =
      pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0.0;
  return std::min(host_bytes / std::max(1, ranks), address_space_headroom_bytes());
}

/// The refusal when the operand buffers of `rank_op` (a layer op of `layout`) cannot be allocated after
/// `allocated_bytes` of them: the memory plan counts training's state and activations, not these buffers.
InputError operands_do_not_fit(const graph::RankOp& rank_op, int op_index, const parallel::Layout& layout,
                               int rank, double allocated_bytes) {
  return InputError(fmt::format(
      "rank {}: out of host memory allocating the operands of op {} ({}) after {} of them: --mbs {} x --seq "
      "{} "
      "make operands larger than the host or its address-space limit allows (the memory plan counts "
      "training's state, not these buffers); give a smaller --mbs or --seq, more --tp, or --backend cuda",
      rank, op_index, graph::to_string(rank_op.op.kind), core::format_bytes(allocated_bytes),
      layout.micro_batch, layout.seq_length));
}

/// Tokens per expert of `graph`: m of the expert fc1 forward GEMMs of every program.
std::map<int, std::int64_t> expert_tokens_of(const graph::Graph& graph) {
  std::map<int, std::int64_t> tokens;
  for (const graph::RankProgram& program : graph.programs) {
    for (const graph::Op& op : program.ops) {
      if (op.kind == OpKind::kGemm && op.gemm.weight == graph::GemmWeight::kExpertFc1 &&
          op.gemm.pass == graph::GemmPass::kForward && op.gemm.expert >= 0) {
        tokens.emplace(op.gemm.expert, op.gemm.m);
      }
    }
  }
  return tokens;
}

/// The unit of each op kind.
constexpr OpUnits<CpuOpUnit> kUnits(cpu::kGemmUnit, cpu::kAttentionUnit, cpu::kElementwiseUnit,
                                    cpu::kCollectiveUnit, cpu::kPointToPointUnit, cpu::kOptimizerUnit);

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendConfig& config) {
    context_.config = config;
    openblas_set_num_threads(1);
    device_.backend = "cpu";
    device_.name = read_cpu_name();
    device_.local_index = config.local_rank;
    device_.memory_bytes = rank_memory_bytes(config.local_world_size);
    device_.peak_flops = measure_sgemm_peak_flops(384, 0.05);
    device_.peak_flops_source = "measured: one-thread OpenBLAS sgemm 384^3 at startup";
    device_.gemm_dtype = "fp32";
    const char* fault = std::getenv("CALO_CPU_INJECT_FAULT");
    context_.inject_fault = fault != nullptr ? fault : "";
    for (auto& counter : executed_) counter.store(0);
    if (config.world_size > 1 && !mpi_active()) {
      throw RuntimeFailure(fmt::format(
          "the cpu backend needs MPI for {} ranks; run under mpirun or use calo bench --nproc N{}",
          config.world_size, mpi_built() ? "" : " with a calo built with MPI (libopenmpi-dev)"));
    }
  }
  ~CpuBackend() override {
    streams_alive_.clear();
#ifdef CALO_EXEC_HAVE_MPI
    if (mpi_active()) {
      std::lock_guard lock(mpi_mutex());
      for (auto& [group_id, comm] : context_.comms) MPI_Comm_free(&comm);
      if (context_.p2p_comm != MPI_COMM_NULL) MPI_Comm_free(&context_.p2p_comm);
      if (context_.ring_comm != MPI_COMM_NULL) MPI_Comm_free(&context_.ring_comm);
    }
#endif
  }

  const DeviceDescription& device() const override {
    return device_;
  }

  void connect(const graph::Graph& graph, int rank, Bootstrap& /*bootstrap*/) override {
    context_.graph = &graph;
    context_.rank = rank;
#ifdef CALO_EXEC_HAVE_MPI
    if (mpi_active()) {
      std::lock_guard lock(mpi_mutex());
      for (int kind = 0; kind < graph::kNumGroupKinds; ++kind) {
        const int group_id = graph.group_id(rank, static_cast<graph::GroupKind>(kind));
        MPI_Comm comm = MPI_COMM_NULL;
        MPI_Comm_split(MPI_COMM_WORLD, group_id >= 0 ? group_id : MPI_UNDEFINED, rank, &comm);
        if (group_id < 0) continue;
        int size = 0;
        MPI_Comm_size(comm, &size);
        if (size != static_cast<int>(graph.groups[static_cast<size_t>(group_id)].ranks.size())) {
          throw RuntimeFailure(fmt::format("rank {}: MPI communicator of group {} has {} ranks, the graph {}",
                                           rank, group_id, size,
                                           graph.groups[static_cast<size_t>(group_id)].ranks.size()));
        }
        context_.comms[group_id] = comm;
      }
      MPI_Comm_dup(MPI_COMM_WORLD, &context_.p2p_comm);
      MPI_Comm_dup(MPI_COMM_WORLD, &context_.ring_comm);  // context-parallel ring: own tag space
      int* tag_upper_bound = nullptr;
      int found = 0;
      MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_upper_bound, &found);
      if (found != 0 && tag_upper_bound != nullptr) context_.tag_upper_bound = *tag_upper_bound;
    }
#endif
    context_.expert_tokens = expert_tokens_of(graph);
  }

  std::unique_ptr<Stream> create_stream(graph::Stream kind) override {
    auto stream = std::make_unique<CpuStream>(kind, [this](const std::string& message) { fail(message); });
    streams_alive_.push_back(stream.get());
    return stream;
  }

  std::unique_ptr<Event> create_event(bool /*timing*/) override {
    return std::make_unique<CpuEvent>();
  }

  std::unique_ptr<PreparedOp> prepare(const graph::RankOp& rank_op, int op_index) override {
    if (context_.graph == nullptr) throw std::logic_error("CpuBackend::prepare before connect");
    try {
      return kUnits.prepare<CpuOp>(context_, rank_op, op_index);
    } catch (const std::bad_alloc&) {
      throw operands_do_not_fit(rank_op, op_index, context_.graph->layout, context_.config.rank,
                                static_cast<double>(context_.allocated_bytes.load()));
    }
  }

  void launch(PreparedOp& op, Stream& stream) override {
    auto& cpu_op = static_cast<CpuOp&>(op);
    static_cast<CpuStream&>(stream).enqueue([this, &cpu_op] {
      if (failed_.load()) return;
      cpu_op.unit->run(context_, cpu_op);
      if (context_.config.check) cpu_op.unit->verify(context_, cpu_op);
      ++executed_[static_cast<size_t>(cpu_op.rank_op.op.kind)];
    });
  }

  void record(Event& event, Stream& stream) override {
    auto& cpu_event = static_cast<CpuEvent&>(event);
    const std::uint64_t generation = cpu_event.arm();
    static_cast<CpuStream&>(stream).enqueue([&cpu_event, generation] { cpu_event.complete(generation); });
  }

  void wait(Stream& stream, Event& event) override {
    auto& cpu_event = static_cast<CpuEvent&>(event);
    const std::uint64_t generation = cpu_event.recorded();
    static_cast<CpuStream&>(stream).enqueue([&cpu_event, generation] { cpu_event.wait_for(generation); });
  }

  void synchronize() override {
    for (CpuStream* stream : streams_seen()) stream->drain();
    std::lock_guard lock(error_mutex_);
    if (!first_error_.empty()) throw RuntimeFailure(first_error_);
  }

  std::int64_t elapsed_ns(Event& from, Event& to) override {
    return static_cast<CpuEvent&>(to).t_ns() - static_cast<CpuEvent&>(from).t_ns();
  }

  OpCounts executed_op_counts() const override {
    OpCounts counts{};
    for (size_t kind = 0; kind < counts.size(); ++kind) counts[kind] = executed_[kind].load();
    return counts;
  }

  CheckReport check_report() const override {
    return context_.checks.report();
  }

  std::int64_t allocated_bytes() const override {
    return context_.allocated_bytes.load();
  }

  void hold(std::int32_t slot, std::int64_t bytes, const std::string& what, Stream& stream) override {
    static_cast<CpuStream&>(stream).enqueue([this, slot, bytes, what] {
      if (!failed_.load()) holds_.hold(slot, bytes, what);
    });
  }

  void release(std::int32_t slot, Stream& stream) override {
    static_cast<CpuStream&>(stream).enqueue([this, slot] { holds_.release(slot); });
  }

  HeldMemory held_memory() override {
    const std::int64_t peak = holds_.peak_bytes();
    return {peak, context_.allocated_bytes.load() + peak};
  }

 private:
  // Streams created here (owned by the executor, which outlives no backend call after its own death).
  std::vector<CpuStream*> streams_seen() {
    return streams_alive_;
  }

  void fail(const std::string& message) {
    failed_.store(true);
    std::lock_guard lock(error_mutex_);
    if (first_error_.empty()) first_error_ = fmt::format("rank {}: {}", context_.rank, message);
  }

  CpuContext context_;  // what the op units share: config, graph, buffers, communicators, --check tally
  DeviceDescription device_;
  std::array<std::atomic<std::int64_t>, graph::kNumOpKinds> executed_{};
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::string first_error_;
  std::vector<CpuStream*> streams_alive_;
  HostHolds holds_;  // --memory real
};

}  // namespace

double measure_sgemm_peak_flops(int size, double min_seconds) {
  openblas_set_num_threads(1);
  std::vector<float> a(static_cast<size_t>(size) * size);
  std::vector<float> b(a.size());
  std::vector<float> c(a.size());
  cpu::fill_random(a, 1);
  cpu::fill_random(b, 2);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.0f, a.data(), size, b.data(),
                size, 0.0f, c.data(), size);
  };
  run();  // warm-up
  double best_flops = 0;
  const std::int64_t begin_ns = core::monotonic_ns();
  do {
    const std::int64_t start_ns = core::monotonic_ns();
    run();
    const double seconds = static_cast<double>(core::monotonic_ns() - start_ns) / 1e9;
    best_flops =
        std::max(best_flops, 2.0 * size * static_cast<double>(size) * size / std::max(seconds, 1e-9));
  } while (static_cast<double>(core::monotonic_ns() - begin_ns) / 1e9 < min_seconds);
  return best_flops;
}

OperandFootprint cpu_operand_footprint(const graph::Graph& graph, int rank) {
  CpuContext context;  // as connect() leaves it, without communicators: prepare reads no more
  context.config.rank = rank;
  context.config.world_size = graph.layout.world_size();
  context.graph = &graph;
  context.rank = rank;
  context.expert_tokens = expert_tokens_of(graph);
  cpu::OperandTally tally;
  context.counting = &tally;
  const std::vector<graph::RankOp> ops = graph::materialize(graph, rank);
  for (size_t index = 0; index < ops.size(); ++index) {
    tally.kind = ops[index].op.kind;
    kUnits.prepare<CpuOp>(context, ops[index], static_cast<int>(index));
  }
  return tally.footprint;
}

void register_cpu_backend(BackendRegistry& registry) {
  BackendFactory factory;
  factory.name = "cpu";
  factory.auto_priority = 0;
  factory.context_parallel = true;
  factory.unavailable_reason = [] { return std::string(); };
  factory.create = [](const BackendConfig& config) -> std::unique_ptr<Backend> {
    return std::make_unique<CpuBackend>(config);
  };
  factory.describe = [](int local_index, int local_world_size) {
    DeviceDescription device;
    device.backend = "cpu";
    device.name = read_cpu_name();
    device.local_index = local_index;
    device.memory_bytes = rank_memory_bytes(local_world_size);
    device.gemm_dtype = "fp32";
    device.peak_flops_source = "measured by each rank at startup";
    return device;
  };
  factory.operand_footprint = cpu_operand_footprint;
  registry.add(std::move(factory));
}

}  // namespace calo::exec
