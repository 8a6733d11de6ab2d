// CPU backend: OpenBLAS sgemm, attention as GEMMs + softmax, elementwise ops moving the op's bytes, AdamW,
// and MPI collectives / send-recv. One host thread per graph stream; MPI calls are serialized through
// mpi_mutex() and progress by polling non-blocking requests, so streams overlap without MPI_THREAD_MULTIPLE.
#include "exec/cpu_backend.h"

#include <cblas.h>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/time.h"
#include "exec/all_to_all.h"
#include "exec/mpi_env.h"
#include "exec/verify.h"

#ifdef CALO_EXEC_HAVE_MPI
#include <mpi.h>
#endif

namespace calo::exec {
namespace {

// Query rows per attention block on the CPU (a causal block of rows [r0, r1) needs keys [0, r1) only).
constexpr std::int64_t kAttentionBlockRows = 64;

using graph::CollectiveKind;
using graph::OpKind;

/// xorshift64* generator: fast, deterministic per (seed, rank, op).
struct Random {
  std::uint64_t state;
  explicit Random(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {
    if (state == 0) state = 1;
  }
  std::uint64_t next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 2685821657736338717ull;
  }
  /// Uniform in [0.5, 1.5) with a random sign: never zero.
  float nonzero() {
    const float magnitude = 0.5f + static_cast<float>(next() >> 40) / static_cast<float>(1ull << 24);
    return (next() & 1) != 0 ? magnitude : -magnitude;
  }
};

void fill_random(std::vector<float>& data, std::uint64_t seed, float scale = 1.0f) {
  Random random(seed);
  for (float& value : data) value = random.nonzero() * scale;
}

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

/// A prepared op: the graph op plus its host buffers.
struct CpuOp final : PreparedOp {
  graph::RankOp rank_op;
  int index = 0;
  std::vector<std::shared_ptr<std::vector<float>>> buffers;  // role-specific, see prepare()
  std::int64_t group_size = 1;
  std::int64_t group_index = 0;
  std::vector<std::int32_t> group_ranks;
  std::vector<int> send_counts;  // all-to-all (elements per peer)
  std::vector<int> recv_counts;
  std::vector<int> send_offsets;
  std::vector<int> recv_offsets;
  std::vector<std::int64_t> peer_send_offset_to_me;  // all-to-all check: where my block sits in each sender
  std::int64_t elements = 0;                         // main element count (see prepare)
  bool last_of_batch = true;  // send/recv: completes its p2p batch (context-parallel ring ops are batched)
#ifdef CALO_EXEC_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
#endif
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

double read_host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0.0;
}

/// The (batch, head) of an attention op that check_attention recomputes in double: the last one, its shape
/// and the reference values of its rows.
struct AttentionReference {
  /// Takes the shape and buffers of `op` (kept by reference).
  explicit AttentionReference(const CpuOp& op)
      : prepared(op),
        shape(op.rank_op.op.attention),
        sq(shape.seq),
        sk(shape.keys()),
        shift(shape.causal ? sk - sq : 0),
        d(shape.head_dim),
        group(std::max(1, shape.heads / std::max(1, shape.kv_heads))),
        batch(shape.batch - 1),
        head(shape.heads - 1),
        kv_head(head / group),
        scale(1.0 / std::sqrt(static_cast<double>(d))) {}

  /// Row 0 of query head `query_head` of the checked batch in a query-shaped buffer (Q, O, dO, dQ).
  const float* query_rows(int buffer, std::int64_t query_head) const {
    return prepared.buffers[buffer]->data() + ((batch * shape.heads + query_head) * sq * d);
  }

  /// Row 0 of the checked kv head in a key-shaped buffer (K, V, dK, dV).
  const float* key_rows(int buffer) const {
    return prepared.buffers[buffer]->data() + ((batch * shape.kv_heads + kv_head) * sk * d);
  }

  /// Softmax probabilities of query row `row` of `queries` over all sk keys (0 where masked).
  std::vector<double> probabilities(const float* queries, std::int64_t row) const {
    const float* k = key_rows(1);
    std::vector<double> p(static_cast<size_t>(sk), 0.0);
    const std::int64_t visible = shape.causal ? shift + row + 1 : sk;
    double max_score = -INFINITY;
    for (std::int64_t col = 0; col < visible; ++col) {
      double dot = 0;
      for (std::int64_t x = 0; x < d; ++x) dot += static_cast<double>(queries[row * d + x]) * k[col * d + x];
      p[static_cast<size_t>(col)] = dot * scale;
      max_score = std::max(max_score, p[static_cast<size_t>(col)]);
    }
    double sum = 0;
    for (std::int64_t col = 0; col < visible; ++col)
      sum += (p[static_cast<size_t>(col)] = std::exp(p[static_cast<size_t>(col)] - max_score));
    for (auto& value : p) value /= sum;
    return p;
  }

  /// Forward: the expected O row `row` = P V.
  std::vector<double> output_row(std::int64_t row) const {
    const auto p = probabilities(query_rows(0, head), row);
    const float* v = key_rows(2);
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    for (std::int64_t col = 0; col < sk; ++col)
      for (std::int64_t x = 0; x < d; ++x)
        want[static_cast<size_t>(x)] += p[static_cast<size_t>(col)] * v[col * d + x];
    return want;
  }

  /// Backward: the expected dQ row `row` = dS K with dS = P (dO V^T - rowsum(dO o O)) * scale.
  std::vector<double> d_query_row(std::int64_t row) const {
    const auto p = probabilities(query_rows(0, head), row);
    const float* k = key_rows(1);
    const float* v = key_rows(2);
    const float* o = query_rows(3, head);
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    const float* d_out = query_rows(6, head);
    double row_dot = 0;
    for (std::int64_t x = 0; x < d; ++x) row_dot += static_cast<double>(d_out[row * d + x]) * o[row * d + x];
    for (std::int64_t col = 0; col < sk; ++col) {
      double dp = 0;
      for (std::int64_t x = 0; x < d; ++x) dp += static_cast<double>(d_out[row * d + x]) * v[col * d + x];
      const double ds = p[static_cast<size_t>(col)] * (dp - row_dot) * scale;
      for (std::int64_t x = 0; x < d; ++x) want[static_cast<size_t>(x)] += ds * k[col * d + x];
    }
    return want;
  }

  /// Backward: the expected dK and dV of key row `key` of the checked kv head, summed over the heads of its
  /// group and over the query rows that see that key.
  void key_gradient_rows(std::int64_t key, std::vector<double>& want_dk, std::vector<double>& want_dv) const {
    const float* v = key_rows(2);
    want_dk.assign(static_cast<size_t>(d), 0.0);
    want_dv.assign(static_cast<size_t>(d), 0.0);
    for (std::int64_t member = kv_head * group;
         member < std::min<std::int64_t>((kv_head + 1) * group, shape.heads); ++member) {
      const float* q_member = query_rows(0, member);
      const float* o_member = query_rows(3, member);
      const float* d_out = query_rows(6, member);
      for (std::int64_t row = shape.causal ? key - shift : 0; row < sq; ++row) {
        const auto p = probabilities(q_member, row);
        double row_dot = 0;
        double dp = 0;
        for (std::int64_t x = 0; x < d; ++x) {
          row_dot += static_cast<double>(d_out[row * d + x]) * o_member[row * d + x];
          dp += static_cast<double>(d_out[row * d + x]) * v[key * d + x];
        }
        const double p_key = p[static_cast<size_t>(key)];
        const double ds = p_key * (dp - row_dot) * scale;
        for (std::int64_t x = 0; x < d; ++x) {
          want_dv[static_cast<size_t>(x)] += p_key * d_out[row * d + x];
          want_dk[static_cast<size_t>(x)] += ds * q_member[row * d + x];
        }
      }
    }
  }

  /// Counts the d values of `got` against `want` into `check` (tolerance grows with the key count).
  void compare_row(OpCheck& check, const float* got, const std::vector<double>& want,
                   const std::string& what) const {
    for (std::int64_t x = 0; x < d; ++x) {
      const double expected = want[static_cast<size_t>(x)];
      const bool correct =
          !(std::abs(got[x] - expected) > 1e-3 * (1.0 + std::abs(expected)) + 1e-4 * static_cast<double>(sk));
      check.count(correct, [&] {
        return fmt::format("op {} ({}): {} col {} = {} but the reference says {}", prepared.index,
                           graph::describe(prepared.rank_op.op), what, x, got[x], expected);
      });
    }
  }

  const CpuOp& prepared;
  const graph::AttentionShape& shape;
  const std::int64_t sq;       // query rows
  const std::int64_t sk;       // key rows
  const std::int64_t shift;    // bottom-right causal: row r sees keys <= shift + r
  const std::int64_t d;        // head dimension
  const std::int64_t group;    // query heads per kv head
  const std::int64_t batch;    // the checked sequence: the last
  const std::int64_t head;     // the checked query head: the last
  const std::int64_t kv_head;  // its kv head
  const double scale;          // 1 / sqrt(d)
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendConfig& config) : config_(config) {
    openblas_set_num_threads(1);
    device_.backend = "cpu";
    device_.name = read_cpu_name();
    device_.local_index = config.local_rank;
    device_.memory_bytes = read_host_memory_bytes() / std::max(1, config.local_world_size);
    device_.peak_flops = measure_sgemm_peak_flops(384, 0.05);
    device_.peak_flops_source = "measured: one-thread OpenBLAS sgemm 384^3 at startup";
    device_.gemm_dtype = "fp32";
    const char* fault = std::getenv("CALO_CPU_INJECT_FAULT");
    inject_fault_ = fault != nullptr ? fault : "";
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
      for (auto& [group_id, comm] : comms_) MPI_Comm_free(&comm);
      if (p2p_comm_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_comm_);
      if (ring_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ring_comm_);
    }
#endif
  }

  const DeviceDescription& device() const override {
    return device_;
  }

  void connect(const graph::Graph& graph, int rank, Bootstrap& /*bootstrap*/) override {
    graph_ = &graph;
    rank_ = rank;
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
        comms_[group_id] = comm;
      }
      MPI_Comm_dup(MPI_COMM_WORLD, &p2p_comm_);
      MPI_Comm_dup(MPI_COMM_WORLD, &ring_comm_);  // context-parallel ring: own tag space
      int* tag_upper_bound = nullptr;
      int found = 0;
      MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_upper_bound, &found);
      if (found != 0 && tag_upper_bound != nullptr) tag_upper_bound_ = *tag_upper_bound;
    }
#endif
    // Tokens per expert from the expert GEMMs of every program (m of an expert fc1 forward GEMM).
    for (const graph::RankProgram& program : graph.programs) {
      for (const graph::Op& op : program.ops) {
        if (op.kind == OpKind::kGemm && op.gemm.weight == graph::GemmWeight::kExpertFc1 &&
            op.gemm.pass == graph::GemmPass::kForward && op.gemm.expert >= 0) {
          expert_tokens_.emplace(op.gemm.expert, op.gemm.m);
        }
      }
    }
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
    if (graph_ == nullptr) throw std::logic_error("CpuBackend::prepare before connect");
    auto prepared = std::make_unique<CpuOp>();
    prepared->rank_op = rank_op;
    prepared->index = op_index;
    const graph::Op& op = rank_op.op;
    const std::uint64_t seed =
        config_.seed ^ (static_cast<std::uint64_t>(rank_) << 40) ^ static_cast<std::uint64_t>(op_index);
    switch (op.kind) {
      case OpKind::kGemm: {
        const auto& shape = op.gemm;
        prepared->buffers = {shared("gemm.a", shape.batch * shape.m * shape.k, seed),
                             shared("gemm.b", shape.batch * shape.k * shape.n, seed + 1),
                             shared("gemm.c", shape.batch * shape.m * shape.n, seed + 2)};
        break;
      }
      case OpKind::kAttention: {
        const auto& shape = op.attention;
        const std::int64_t q_elements = std::int64_t{shape.batch} * shape.heads * shape.seq * shape.head_dim;
        const std::int64_t kv_elements =
            std::int64_t{shape.batch} * shape.kv_heads * shape.keys() * shape.head_dim;
        const std::int64_t scores = std::int64_t{shape.seq} * shape.keys();
        prepared->buffers = {shared("attn.q", q_elements, seed),      shared("attn.k", kv_elements, seed + 1),
                             shared("attn.v", kv_elements, seed + 2), shared("attn.o", q_elements, seed + 3),
                             shared("attn.s", scores, seed + 4),      shared("attn.p", scores, seed + 5)};
        if (shape.backward) {
          prepared->buffers.push_back(shared("attn.do", q_elements, seed + 6));
          prepared->buffers.push_back(shared("attn.dq", q_elements, seed + 7));
          prepared->buffers.push_back(shared("attn.dk", kv_elements, seed + 8));
          prepared->buffers.push_back(shared("attn.dv", kv_elements, seed + 9));
        }
        break;
      }
      case OpKind::kElementwise: {
        // Reads half of the op's bytes and writes the other half (fp32 elements); the unfused attention's
        // softmax works on its s x s scores per (sequence, head) instead.
        const auto& shape = op.attention;
        prepared->elements = op.elementwise == graph::ElementwiseKind::kSoftmax
                                 ? std::int64_t{shape.batch} * shape.heads * shape.seq * shape.seq
                                 : std::max<std::int64_t>(1, static_cast<std::int64_t>(op.bytes / 8.0));
        prepared->buffers = {shared("elementwise.in", prepared->elements, seed),
                             shared("elementwise.out", prepared->elements, seed + 1)};
        if (op.elementwise == graph::ElementwiseKind::kSoftmax && shape.backward)
          prepared->buffers.push_back(shared("elementwise.dprob", prepared->elements, seed + 2));
        break;
      }
      case OpKind::kCollective:
        prepare_collective(*prepared, seed);
        break;
      case OpKind::kSend:
      case OpKind::kRecv: {
        prepared->elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 4.0)));
        prepared->buffers = {owned(prepared->elements, seed)};
        // Ring ops of one batch are consecutive in issue order; the last one waits for the batch.
        const auto& program_ops = graph_->program(rank_).ops;
        const auto next = static_cast<size_t>(op_index) + 1;
        if (op.group == graph::GroupKind::kCp && op.p2p_batch >= 0 && next < program_ops.size()) {
          const graph::Op& following = program_ops[next];
          prepared->last_of_batch = !((following.kind == OpKind::kSend || following.kind == OpKind::kRecv) &&
                                      following.p2p_batch == op.p2p_batch && following.stream == op.stream);
        }
        break;
      }
      case OpKind::kOptimizer: {
        prepared->elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(op.parameters));
        prepared->buffers = {owned(prepared->elements, seed), owned(prepared->elements, seed + 1, 1e-3f),
                             owned(prepared->elements, seed + 2, 1e-3f),
                             owned(prepared->elements, seed + 3, 1e-6f)};
        for (float& value : *prepared->buffers[3]) value = std::abs(value);  // second moment is positive
        break;
      }
    }
    return prepared;
  }

  void launch(PreparedOp& op, Stream& stream) override {
    auto& cpu_op = static_cast<CpuOp&>(op);
    static_cast<CpuStream&>(stream).enqueue([this, &cpu_op] {
      if (failed_.load()) return;
      run(cpu_op);
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
    return checks_.report();
  }

  std::int64_t allocated_bytes() const override {
    return allocated_bytes_.load();
  }

 private:
  // Streams created here (owned by the executor, which outlives no backend call after its own death).
  std::vector<CpuStream*> streams_seen() {
    return streams_alive_;
  }

  void fail(const std::string& message) {
    failed_.store(true);
    std::lock_guard lock(error_mutex_);
    if (first_error_.empty()) first_error_ = fmt::format("rank {}: {}", rank_, message);
  }

  std::shared_ptr<std::vector<float>> owned(std::int64_t elements, std::uint64_t seed, float scale = 1.0f) {
    auto buffer =
        std::make_shared<std::vector<float>>(static_cast<size_t>(std::max<std::int64_t>(1, elements)));
    fill_random(*buffer, seed, scale);
    allocated_bytes_ += static_cast<std::int64_t>(buffer->size() * sizeof(float));
    return buffer;
  }

  /// A compute-stream scratch buffer shared by ops of the same role and size (they run one at a time).
  std::shared_ptr<std::vector<float>> shared(const std::string& role, std::int64_t elements,
                                             std::uint64_t seed) {
    auto& slot = scratch_[{role, elements}];
    if (!slot) slot = owned(elements, seed);
    return slot;
  }

  bool inject(const char* kind) const {
    return inject_fault_ == kind;
  }

  void prepare_collective(CpuOp& prepared, std::uint64_t seed) {
    const graph::Op& op = prepared.rank_op.op;
    const auto& group = graph_->groups.at(static_cast<size_t>(prepared.rank_op.group_id));
    prepared.group_ranks = group.ranks;
    prepared.group_size = static_cast<std::int64_t>(group.ranks.size());
    prepared.group_index = std::find(group.ranks.begin(), group.ranks.end(), rank_) - group.ranks.begin();
#ifdef CALO_EXEC_HAVE_MPI
    if (auto found = comms_.find(prepared.rank_op.group_id); found != comms_.end())
      prepared.comm = found->second;
#endif
    const std::int64_t members = prepared.group_size;
    const std::int64_t total =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 4.0)));
    const std::int64_t per_rank = std::max<std::int64_t>(1, (total + members - 1) / members);
    switch (op.collective) {
      case CollectiveKind::kAllReduce:
        prepared.elements = total;
        prepared.buffers = {owned(total, seed), owned(total, seed + 1)};
        break;
      case CollectiveKind::kAllGather:
        prepared.elements = per_rank;
        prepared.buffers = {owned(per_rank, seed), owned(per_rank * members, seed + 1)};
        break;
      case CollectiveKind::kReduceScatter:
        prepared.elements = per_rank;
        prepared.buffers = {owned(per_rank * members, seed), owned(per_rank, seed + 1)};
        break;
      case CollectiveKind::kAllToAll:
        prepare_all_to_all(prepared, seed);
        break;
    }
  }

  /// All-to-all counts. Expert-parallel dispatch/combine use the graph's tokens per expert: every source
  /// sends its routed rows to the owners of the experts in proportion to their tokens (dispatch), and gets
  /// them back (combine); otherwise equal blocks.
  void prepare_all_to_all(CpuOp& prepared, std::uint64_t seed) {
    const graph::Op& op = prepared.rank_op.op;
    const std::int64_t members = prepared.group_size;
    const std::int64_t me = prepared.group_index;
    const std::int64_t row_elements = std::max<std::int64_t>(1, graph_->model.hidden_size / 2);  // bf16 row
    const std::int64_t rows_total =
        std::max<std::int64_t>(members, std::llround(op.bytes / (2.0 * graph_->model.hidden_size)));
    const AllToAllSplit split = split_all_to_all(rows_total, members, op.group == graph::GroupKind::kEp,
                                                 graph_->model.num_experts, expert_tokens_);
    const bool expert_parallel = split.expert_parallel;
    const std::vector<std::int64_t>& rows = split.rows;
    // Dispatch (even occurrence in the program) sends rows[d] to each d; combine sends rows[me] back to each.
    const bool combine = expert_parallel && (all_to_all_seen_++ % 2 == 1);
    prepared.send_counts.resize(static_cast<size_t>(members));
    prepared.recv_counts.resize(static_cast<size_t>(members));
    prepared.send_offsets.resize(static_cast<size_t>(members));
    prepared.recv_offsets.resize(static_cast<size_t>(members));
    prepared.peer_send_offset_to_me.resize(static_cast<size_t>(members));
    int send_total = 0;
    int recv_total = 0;
    for (std::int64_t peer = 0; peer < members; ++peer) {
      const auto index = static_cast<size_t>(peer);
      const std::int64_t send_rows = combine ? rows[static_cast<size_t>(me)] : rows[index];
      const std::int64_t recv_rows = combine ? rows[index] : rows[static_cast<size_t>(me)];
      prepared.send_counts[index] = static_cast<int>(send_rows * row_elements);
      prepared.recv_counts[index] = static_cast<int>(recv_rows * row_elements);
      prepared.send_offsets[index] = send_total;
      prepared.recv_offsets[index] = recv_total;
      send_total += prepared.send_counts[index];
      recv_total += prepared.recv_counts[index];
      // Where my block starts in peer's send buffer.
      std::int64_t offset_rows = 0;
      if (combine) {
        offset_rows = me * rows[index];
      } else {
        for (std::int64_t before = 0; before < me; ++before) offset_rows += rows[static_cast<size_t>(before)];
      }
      prepared.peer_send_offset_to_me[index] = offset_rows * row_elements;
    }
    prepared.elements = send_total;
    prepared.buffers = {owned(send_total, seed), owned(recv_total, seed + 1)};
  }

  void run(CpuOp& prepared) {
    const graph::Op& op = prepared.rank_op.op;
    switch (op.kind) {
      case OpKind::kGemm:
        run_gemm(prepared);
        break;
      case OpKind::kAttention:
        run_attention(prepared);
        break;
      case OpKind::kElementwise:
        run_elementwise(prepared);
        break;
      case OpKind::kCollective:
        run_collective(prepared);
        break;
      case OpKind::kSend:
      case OpKind::kRecv:
        run_point_to_point(prepared);
        break;
      case OpKind::kOptimizer:
        run_optimizer(prepared);
        break;
    }
  }

  void run_gemm(CpuOp& prepared) {
    const auto& shape = prepared.rank_op.op.gemm;
    const float* a = prepared.buffers[0]->data();
    const float* b = prepared.buffers[1]->data();
    float* c = prepared.buffers[2]->data();
    const auto m = static_cast<blasint>(shape.m);
    const auto n = static_cast<blasint>(shape.n);
    const auto k = static_cast<blasint>(shape.k);
    // A batched GEMM (the unfused attention core) is `batch` independent products of packed matrices.
    const std::int64_t a_size = shape.m * shape.k, b_size = shape.k * shape.n, c_size = shape.m * shape.n;
    for (std::int64_t product = 0; product < shape.batch; ++product)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a + product * a_size, k,
                  b + product * b_size, n, 0.0f, c + product * c_size, n);
    if (inject("gemm")) c[0] += 1.0f;
    if (!config_.check) return;
    Random random(static_cast<std::uint64_t>(prepared.index) + 17);
    std::int64_t wrong = 0;
    std::string failure;
    constexpr int kSpots = 8;
    for (int spot = 0; spot < kSpots; ++spot) {
      const auto pick = [&](std::int64_t size) {
        return spot == 0 ? 0 : static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(size));
      };
      const std::int64_t product = pick(shape.batch);
      const std::int64_t row = pick(shape.m);
      const std::int64_t column = pick(shape.n);
      const float* a_product = a + product * a_size;
      const float* b_product = b + product * b_size;
      double want = 0;
      double magnitude = 0;
      for (std::int64_t inner = 0; inner < shape.k; ++inner) {
        const double product_value =
            static_cast<double>(a_product[row * shape.k + inner]) * b_product[inner * shape.n + column];
        want += product_value;
        magnitude += std::abs(product_value);
      }
      const double got = c[product * c_size + row * shape.n + column];
      const double tolerance = (static_cast<double>(shape.k) * 1.2e-7 + 1e-6) * magnitude + 1e-6;
      if (std::abs(got - want) > tolerance) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): C[{},{}] = {} but the reference says {}", prepared.index,
                                graph::describe(prepared.rank_op.op), row, column, got, want);
      }
    }
    checks_.add(kSpots, wrong, failure);
  }

  /// Attention of one (batch, head): S = Q K^T * scale, causal mask, P = softmax(S), O = P V; backward
  /// recomputes P and forms dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o O)), dQ = dS K, dK = dS^T Q.
  /// Query rows go in blocks of kAttentionBlockRows; with the causal mask block [r0, r1) multiplies only keys
  /// [0, r1), so the masked half of S is never computed (half the FLOPs of a full s×s at long sequences).
  /// A context-parallel ring step attends `seq` query rows to `keys()` key rows without a mask (or, on the
  /// diagonal step, with the causal mask of the square block).
  void run_attention(CpuOp& prepared) {
    const auto& shape = prepared.rank_op.op.attention;
    const std::int64_t sq = shape.seq;
    const std::int64_t sk = shape.keys();
    const std::int64_t shift =
        shape.causal ? sk - sq : 0;  // bottom-right causal: row r sees keys <= shift + r
    const std::int64_t d = shape.head_dim;
    const std::int64_t group = std::max(1, shape.heads / std::max(1, shape.kv_heads));
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    float* scores = prepared.buffers[4]->data();
    float* probs = prepared.buffers[5]->data();
    const auto SK = static_cast<blasint>(sk);
    const auto D = static_cast<blasint>(d);
    for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
      for (std::int64_t head = 0; head < shape.heads; ++head) {
        const std::int64_t kv_head = head / group;
        const std::int64_t q_offset = (batch * shape.heads + head) * sq * d;
        const std::int64_t kv_offset = (batch * shape.kv_heads + kv_head) * sk * d;
        const float* q = prepared.buffers[0]->data() + q_offset;
        const float* k = prepared.buffers[1]->data() + kv_offset;
        const float* v = prepared.buffers[2]->data() + kv_offset;
        float* o = prepared.buffers[3]->data() + q_offset;
        const float* d_out = shape.backward ? prepared.buffers[6]->data() + q_offset : nullptr;
        float* d_q = shape.backward ? prepared.buffers[7]->data() + q_offset : nullptr;
        float* d_k = shape.backward ? prepared.buffers[8]->data() + kv_offset : nullptr;
        float* d_v = shape.backward ? prepared.buffers[9]->data() + kv_offset : nullptr;
        if (shape.backward && head % group == 0) {  // GQA: the heads of a group sum into dK, dV
          std::fill(d_k, d_k + sk * d, 0.0f);
          std::fill(d_v, d_v + sk * d, 0.0f);
        }
        for (std::int64_t first_row = 0; first_row < sq; first_row += kAttentionBlockRows) {
          const std::int64_t end_row = std::min(sq, first_row + kAttentionBlockRows);
          const auto rows = static_cast<blasint>(end_row - first_row);
          const std::int64_t keys = shape.causal ? shift + end_row : sk;  // keys any row of this block sees
          const auto K = static_cast<blasint>(keys);
          float* score_rows = scores + first_row * sk;
          float* prob_rows = probs + first_row * sk;
          attention_probabilities(q, k, score_rows, prob_rows, first_row, end_row, keys, sk, d, scale,
                                  shape.causal, shift);
          if (!shape.backward) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, K, 1.0f, prob_rows, SK, v, D,
                        0.0f, o + first_row * d, D);
            continue;
          }
          const float* d_out_rows = d_out + first_row * d;
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, D, rows, 1.0f, prob_rows, SK, d_out_rows, D,
                      1.0f, d_v, D);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, D, 1.0f, d_out_rows, D, v, D, 0.0f,
                      score_rows, SK);
          for (std::int64_t row = first_row; row < end_row; ++row) {
            double dot = 0;
            for (std::int64_t col = 0; col < d; ++col)
              dot += static_cast<double>(d_out[row * d + col]) * o[row * d + col];
            for (std::int64_t col = 0; col < keys; ++col)
              scores[row * sk + col] =
                  probs[row * sk + col] * (scores[row * sk + col] - static_cast<float>(dot)) * scale;
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, K, 1.0f, score_rows, SK, k, D, 0.0f,
                      d_q + first_row * d, D);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, D, rows, 1.0f, score_rows, SK,
                      q + first_row * d, D, 1.0f, d_k, D);
        }
      }
    }
    if (inject("attention")) {  // corrupt row 0 of the last (batch, head): the one check_attention verifies
      const std::int64_t checked_head = std::int64_t{shape.batch} * shape.heads - 1;
      prepared.buffers[shape.backward ? 7 : 3]->at(static_cast<size_t>(checked_head * sq * d)) += 1.0f;
    }
    if (config_.check) check_attention(prepared);
  }

  /// Rows [first_row, end_row) of P = softmax(Q K^T * scale) over keys [0, keys) (row r sees keys
  /// [0, shift + r] when causal); scores and probs point at row first_row of `stride`-wide buffers; masked
  /// entries of P are 0.
  static void attention_probabilities(const float* q, const float* k, float* scores, float* probs,
                                      std::int64_t first_row, std::int64_t end_row, std::int64_t keys,
                                      std::int64_t stride, std::int64_t d, float scale, bool causal,
                                      std::int64_t shift) {
    const auto S = static_cast<blasint>(stride);
    const auto D = static_cast<blasint>(d);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(end_row - first_row),
                static_cast<blasint>(keys), D, scale, q + first_row * d, D, k, D, 0.0f, scores, S);
    for (std::int64_t row = 0; row < end_row - first_row; ++row) {
      const std::int64_t visible = causal ? shift + first_row + row + 1 : keys;
      float max_score = -INFINITY;
      for (std::int64_t col = 0; col < visible; ++col)
        max_score = std::max(max_score, scores[row * stride + col]);
      double sum = 0;
      for (std::int64_t col = 0; col < visible; ++col) {
        probs[row * stride + col] = std::exp(scores[row * stride + col] - max_score);
        sum += probs[row * stride + col];
      }
      const auto inverse = static_cast<float>(1.0 / sum);
      for (std::int64_t col = 0; col < visible; ++col) probs[row * stride + col] *= inverse;
      for (std::int64_t col = visible; col < keys; ++col) probs[row * stride + col] = 0.0f;
    }
  }

  /// Recomputes two output rows of the last (batch, head) in double and compares (O forward, dQ backward).
  void check_attention(CpuOp& prepared) {
    const AttentionReference reference(prepared);
    const std::int64_t d = reference.d;
    const bool backward = reference.shape.backward;
    OpCheck check;
    for (std::int64_t row : {std::int64_t{0}, reference.sq - 1}) {
      const auto want = backward ? reference.d_query_row(row) : reference.output_row(row);
      const float* got = reference.query_rows(backward ? 7 : 3, reference.head) + row * d;  // dQ or O
      reference.compare_row(check, got, want, fmt::format("row {}", row));
    }
    if (backward) {
      // dK and dV of key row s-1 of the last kv head: summed over the heads of its group and over the query
      // rows that see that key (only row s-1 under the causal mask).
      const std::int64_t key = reference.sk - 1;
      std::vector<double> want_dk;
      std::vector<double> want_dv;
      reference.key_gradient_rows(key, want_dk, want_dv);
      reference.compare_row(check, reference.key_rows(8) + key * d, want_dk, fmt::format("dK row {}", key));
      reference.compare_row(check, reference.key_rows(9) + key * d, want_dv, fmt::format("dV row {}", key));
    }
    checks_.add(check);
  }

  /// Row r of the unfused attention's scores (query position r % s) sees keys [0, r % s] when causal.
  static std::int64_t softmax_visible(const graph::AttentionShape& shape, std::int64_t row) {
    return shape.causal ? row % shape.seq + 1 : shape.seq;
  }

  /// Softmax of one row over its visible keys (masked keys 0); backward: out = P (dP - rowsum(P dP)) with
  /// P = in. Computed in `Real` (float to execute, double for the check's reference).
  template <typename Real>
  static void softmax_row(const float* in, const float* dprob, float* out, std::int64_t visible,
                          std::int64_t columns, std::vector<Real>& row) {
    row.assign(static_cast<size_t>(columns), Real(0));
    if (dprob == nullptr) {
      Real max_score = in[0];
      for (std::int64_t col = 1; col < visible; ++col) max_score = std::max<Real>(max_score, in[col]);
      Real sum = 0;
      for (std::int64_t col = 0; col < visible; ++col) sum += row[col] = std::exp(Real(in[col]) - max_score);
      for (std::int64_t col = 0; col < visible; ++col) row[col] /= sum;
    } else {
      Real dot = 0;
      for (std::int64_t col = 0; col < visible; ++col) dot += Real(in[col]) * Real(dprob[col]);
      for (std::int64_t col = 0; col < visible; ++col) row[col] = Real(in[col]) * (Real(dprob[col]) - dot);
    }
    if (out != nullptr)
      for (std::int64_t col = 0; col < columns; ++col) out[col] = static_cast<float>(row[col]);
  }

  /// The unfused attention's softmax (forward) or its backward over every score row; --check recomputes the
  /// first and last row in double.
  void run_softmax(CpuOp& prepared) {
    const auto& shape = prepared.rank_op.op.attention;
    const std::int64_t s = shape.seq;
    const std::int64_t rows = prepared.elements / s;
    const float* in = prepared.buffers[0]->data();
    float* out = prepared.buffers[1]->data();
    const float* dprob = shape.backward ? prepared.buffers[2]->data() : nullptr;
    std::vector<float> row;
    for (std::int64_t at = 0; at < rows; ++at)
      softmax_row(in + at * s, dprob == nullptr ? nullptr : dprob + at * s, out + at * s,
                  softmax_visible(shape, at), s, row);
    if (inject("softmax")) out[0] += 1.0f;
    if (!config_.check) return;
    std::int64_t wrong = 0;
    std::string failure;
    std::vector<double> reference;
    for (std::int64_t at : {std::int64_t{0}, rows - 1}) {
      softmax_row(in + at * s, dprob == nullptr ? nullptr : dprob + at * s, nullptr,
                  softmax_visible(shape, at), s, reference);
      for (std::int64_t col = 0; col < s; ++col) {
        const double want = reference[static_cast<size_t>(col)], got = out[at * s + col];
        if (std::abs(got - want) <= 1e-5 * (1.0 + std::abs(want))) continue;
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): row {} key {} = {} but the reference says {}", prepared.index,
                                graph::describe(prepared.rank_op.op), at, col, got, want);
        break;
      }
    }
    checks_.add(2, wrong, failure);
  }

  void run_elementwise(CpuOp& prepared) {
    const auto kind = prepared.rank_op.op.elementwise;
    if (kind == graph::ElementwiseKind::kSoftmax) {
      run_softmax(prepared);
      return;
    }
    const float* in = prepared.buffers[0]->data();
    float* out = prepared.buffers[1]->data();
    const std::int64_t count = prepared.elements;
    auto expected = [&](std::int64_t index, const float* source) -> double {
      const double x = source[index];
      switch (kind) {
        case graph::ElementwiseKind::kActivation:
          return x / (1.0 + std::exp(-x));
        case graph::ElementwiseKind::kNorm: {
          const std::int64_t row_begin = index - index % kNormRow;
          const std::int64_t row_end = std::min(count, row_begin + kNormRow);
          double squares = 0;
          for (std::int64_t at = row_begin; at < row_end; ++at)
            squares += static_cast<double>(source[at]) * source[at];
          return x / std::sqrt(squares / static_cast<double>(row_end - row_begin) + 1e-6);
        }
        default:
          return 0.5 * x + 1.0;
      }
    };
    if (kind == graph::ElementwiseKind::kNorm) {
      for (std::int64_t row_begin = 0; row_begin < count; row_begin += kNormRow) {
        const std::int64_t row_end = std::min(count, row_begin + kNormRow);
        float squares = 0;
        for (std::int64_t at = row_begin; at < row_end; ++at) squares += in[at] * in[at];
        const float inverse = 1.0f / std::sqrt(squares / static_cast<float>(row_end - row_begin) + 1e-6f);
        for (std::int64_t at = row_begin; at < row_end; ++at) out[at] = in[at] * inverse;
      }
    } else if (kind == graph::ElementwiseKind::kActivation) {
      for (std::int64_t at = 0; at < count; ++at) out[at] = in[at] / (1.0f + std::exp(-in[at]));
    } else {
      for (std::int64_t at = 0; at < count; ++at) out[at] = 0.5f * in[at] + 1.0f;
    }
    if (inject("elementwise")) out[0] += 1.0f;
    if (!config_.check) return;
    std::int64_t wrong = 0;
    std::string failure;
    for (std::int64_t index : {std::int64_t{0}, count / 2, count - 1}) {
      const double want = expected(index, in);
      if (std::abs(out[index] - want) > 1e-4 * (1.0 + std::abs(want))) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): out[{}] = {} but the reference says {}", prepared.index,
                                graph::describe(prepared.rank_op.op), index, out[index], want);
      }
    }
    checks_.add(3, wrong, failure);
  }

  void run_optimizer(CpuOp& prepared) {
    constexpr float kLr = 1e-4f;
    constexpr float kBeta1 = 0.9f;
    constexpr float kBeta2 = 0.95f;
    constexpr float kEps = 1e-8f;
    constexpr float kWeightDecay = 0.1f;
    float* param = prepared.buffers[0]->data();
    const float* grad = prepared.buffers[1]->data();
    float* m = prepared.buffers[2]->data();
    float* v = prepared.buffers[3]->data();
    const std::int64_t count = prepared.elements;
    const std::int64_t spots[3] = {0, count / 2, count - 1};
    double want[3] = {};
    if (config_.check) {
      for (int spot = 0; spot < 3; ++spot) {
        const std::int64_t at = spots[spot];
        const double next_m =
            kBeta1 * static_cast<double>(m[at]) + (1 - kBeta1) * static_cast<double>(grad[at]);
        const double next_v =
            kBeta2 * static_cast<double>(v[at]) + (1 - kBeta2) * static_cast<double>(grad[at]) * grad[at];
        want[spot] = param[at] - kLr * (next_m / (std::sqrt(next_v) + kEps) + kWeightDecay * param[at]);
      }
    }
    for (std::int64_t at = 0; at < count; ++at) {
      m[at] = kBeta1 * m[at] + (1 - kBeta1) * grad[at];
      v[at] = kBeta2 * v[at] + (1 - kBeta2) * grad[at] * grad[at];
      param[at] -= kLr * (m[at] / (std::sqrt(v[at]) + kEps) + kWeightDecay * param[at]);
    }
    if (inject("optimizer")) param[0] += 1.0f;
    if (!config_.check) return;
    std::int64_t wrong = 0;
    std::string failure;
    for (int spot = 0; spot < 3; ++spot) {
      const double got = param[spots[spot]];
      if (std::abs(got - want[spot]) > 1e-6 * (1.0 + std::abs(want[spot]))) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} (optimizer): param[{}] = {} but AdamW says {}", prepared.index,
                                spots[spot], got, want[spot]);
      }
    }
    checks_.add(3, wrong, failure);
  }

#ifdef CALO_EXEC_HAVE_MPI
  /// Polls a non-blocking MPI request to completion, holding the MPI lock only while testing.
  static void wait_request(MPI_Request& request) {
    while (true) {
      int done = 0;
      {
        std::lock_guard lock(mpi_mutex());
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      }
      if (done != 0) return;
      sched_yield();
    }
  }
#endif

  void run_collective(CpuOp& prepared) {
    const graph::Op& op = prepared.rank_op.op;
    float* send = prepared.buffers[0]->data();
    float* recv = prepared.buffers[1]->data();
    const std::int64_t members = prepared.group_size;
    const auto me_global = static_cast<int>(prepared.group_ranks[static_cast<size_t>(prepared.group_index)]);
    const auto send_size = static_cast<std::int64_t>(prepared.buffers[0]->size());
    if (config_.check) {
      for (std::int64_t at = 0; at < send_size; ++at) send[at] = check_value(me_global, at);
    }
    if (members == 1) {
      std::copy(
          send,
          send + std::min<std::int64_t>(send_size, static_cast<std::int64_t>(prepared.buffers[1]->size())),
          recv);
    } else {
#ifdef CALO_EXEC_HAVE_MPI
      MPI_Request request = MPI_REQUEST_NULL;
      {
        std::lock_guard lock(mpi_mutex());
        const auto count = static_cast<int>(prepared.elements);
        switch (op.collective) {
          case CollectiveKind::kAllReduce:
            MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, prepared.comm, &request);
            break;
          case CollectiveKind::kAllGather:
            MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, prepared.comm, &request);
            break;
          case CollectiveKind::kReduceScatter:
            MPI_Ireduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, prepared.comm, &request);
            break;
          case CollectiveKind::kAllToAll:
            MPI_Ialltoallv(send, prepared.send_counts.data(), prepared.send_offsets.data(), MPI_FLOAT, recv,
                           prepared.recv_counts.data(), prepared.recv_offsets.data(), MPI_FLOAT,
                           prepared.comm, &request);
            break;
        }
      }
      wait_request(request);
#else
      throw RuntimeFailure("collective over several ranks needs MPI (calo built without MPI)");
#endif
    }
    if (inject("collective")) recv[0] += 1.0f;
    if (config_.check) check_collective(prepared);
  }

  void check_collective(CpuOp& prepared) {
    const graph::Op& op = prepared.rank_op.op;
    const float* recv = prepared.buffers[1]->data();
    const auto& members = prepared.group_ranks;
    OpCheck check;
    for_each_expected_collective_value(
        op.collective, members, prepared.elements, prepared.group_index, prepared.recv_offsets,
        prepared.recv_counts, prepared.peer_send_offset_to_me, std::numeric_limits<std::int64_t>::max(),
        [&](std::int64_t at, double want) {
          check.count(recv[at] == static_cast<float>(want), [&] {
            return fmt::format("op {} ({}): out[{}] = {} but expected {}", prepared.index,
                               graph::describe(op), at, recv[at], want);
          });
        });
    checks_.add(check);
  }

  /// Sends or receives one p2p op. Pipeline messages complete one at a time (the graph orders each stage's
  /// exchanges so that this cannot deadlock). The context-parallel ring's ops are batched like an NCCL group:
  /// every op of one p2p_batch is posted, and the last one waits for all of them (every rank sends before it
  /// receives on the ring, so completing them one by one would deadlock once messages pass the eager limit).
  void run_point_to_point(CpuOp& prepared) {
    const graph::Op& op = prepared.rank_op.op;
    float* buffer = prepared.buffers[0]->data();
    const auto count = static_cast<int>(prepared.elements);
    const int peer = prepared.rank_op.peer_rank;
    const bool sending = op.kind == OpKind::kSend;
    if (config_.check && sending) {
      for (int at = 0; at < count; ++at) buffer[at] = check_value(rank_, op.tag + at);
    }
#ifdef CALO_EXEC_HAVE_MPI
    if (op.tag > tag_upper_bound_) {
      throw RuntimeFailure(fmt::format("send/recv tag {} exceeds MPI_TAG_UB {}", op.tag, tag_upper_bound_));
    }
    MPI_Request request = MPI_REQUEST_NULL;
    {
      std::lock_guard lock(mpi_mutex());
      MPI_Comm comm = op.group == graph::GroupKind::kCp ? ring_comm_ : p2p_comm_;
      if (sending) {
        MPI_Isend(buffer, count, MPI_FLOAT, peer, op.tag, comm, &request);
      } else {
        MPI_Irecv(buffer, count, MPI_FLOAT, peer, op.tag, comm, &request);
      }
    }
    if (!prepared.last_of_batch) {
      pending_p2p_[static_cast<size_t>(op.stream)].emplace_back(&prepared, request);
      return;
    }
    auto& pending = pending_p2p_[static_cast<size_t>(op.stream)];
    for (auto& [earlier, earlier_request] : pending) wait_request(earlier_request);
    wait_request(request);
    for (auto& [earlier, earlier_request] : pending) verify_received(*earlier);
    pending.clear();
#else
    (void)peer;
    throw RuntimeFailure("send/recv needs MPI (calo built without MPI)");
#endif
    verify_received(prepared);
  }

  /// --check: a completed receive holds exactly what its peer's send wrote (check_value(peer, tag + index)).
  void verify_received(CpuOp& prepared) {
    const graph::Op& op = prepared.rank_op.op;
    if (op.kind != OpKind::kRecv || !config_.check) return;
    float* buffer = prepared.buffers[0]->data();
    const auto count = static_cast<int>(prepared.elements);
    const int peer = prepared.rank_op.peer_rank;
    if (inject("p2p")) buffer[0] += 1.0f;
    std::int64_t wrong = 0;
    std::string failure;
    for (int at = 0; at < count; ++at) {
      const float want = check_value(peer, op.tag + at);
      if (buffer[at] != want) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): received[{}] = {} but rank {} sent {}", prepared.index,
                                graph::describe(op), at, buffer[at], peer, want);
      }
    }
    checks_.add(count, wrong, failure);
  }

  static constexpr std::int64_t kNormRow = 1024;

  BackendConfig config_;
  DeviceDescription device_;
  const graph::Graph* graph_ = nullptr;
  int rank_ = 0;
  std::string inject_fault_;
  std::map<std::pair<std::string, std::int64_t>, std::shared_ptr<std::vector<float>>> scratch_;
  std::map<int, std::int64_t> expert_tokens_;
  std::int64_t all_to_all_seen_ = 0;
  std::array<std::atomic<std::int64_t>, graph::kNumOpKinds> executed_{};
  std::atomic<std::int64_t> allocated_bytes_{0};
  std::atomic<bool> failed_{false};
  CheckTally checks_;
  std::mutex error_mutex_;
  std::string first_error_;
  std::vector<CpuStream*> streams_alive_;
  int tag_upper_bound_ = 32767;
#ifdef CALO_EXEC_HAVE_MPI
  std::map<int, MPI_Comm> comms_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  MPI_Comm ring_comm_ = MPI_COMM_NULL;
  /// Posted, not yet completed ring ops of the open p2p batch, per stream (touched by that stream's thread).
  std::array<std::vector<std::pair<CpuOp*, MPI_Request>>, graph::kNumStreams> pending_p2p_;
#endif
};

}  // namespace

double measure_sgemm_peak_flops(int size, double min_seconds) {
  openblas_set_num_threads(1);
  std::vector<float> a(static_cast<size_t>(size) * size);
  std::vector<float> b(a.size());
  std::vector<float> c(a.size());
  fill_random(a, 1);
  fill_random(b, 2);
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
    device.memory_bytes = read_host_memory_bytes() / std::max(1, local_world_size);
    device.gemm_dtype = "fp32";
    device.peak_flops_source = "measured by each rank at startup";
    return device;
  };
  registry.add(std::move(factory));
}

}  // namespace calo::exec
