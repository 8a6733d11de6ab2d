// Sampler: see sampler.h. Each loop sleeps to the earliest absolute deadline of its tasks, reads every due
// metric (one batch per device), and advances each task's deadline by whole periods (no drift).
#include "telemetry/sampler.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>

#include "core/time.h"

namespace calo::telemetry {

namespace {

// A metric's own default period (100 ms where it declares none).
int64_t default_period_of(const MetricInfo& metric) {
  return metric.default_period_ns > 0 ? metric.default_period_ns : 100'000'000;
}

// Gives a loop's CPU-following tasks of each device the largest period and CPU estimate among them, so that
// the metrics one query returns (NVLink TX+RX, PCIe TX+RX) are due together and come back from one call.
// Every later read updates them from that same call's CPU, so they stay equal.
template <typename Tasks>
void align_cpu_following(Tasks& tasks) {
  std::map<uint32_t, std::pair<int64_t, int64_t>> dearest;  // device -> (period, cpu per read)
  for (const auto& task : tasks) {
    if (task.budget_default_ns == 0) continue;
    auto& [period_ns, cpu_ns] = dearest[task.device_position];
    period_ns = std::max(period_ns, task.period_ns);
    cpu_ns = std::max(cpu_ns, task.cpu_per_read_ns);
  }
  for (auto& task : tasks) {
    if (task.budget_default_ns != 0)
      std::tie(task.period_ns, task.cpu_per_read_ns) = dearest[task.device_position];
  }
}

}  // namespace

MetricInfo as_measured(MetricInfo metric, int64_t measured_wall_ns) {
  if (measured_wall_ns >= kSlowQueryNs && metric.expected_cost_ns < kSlowQueryNs) {
    metric.group += ".slow";
    metric.expected_cost_ns = measured_wall_ns;
  }
  return metric;
}

std::optional<int64_t> PeriodPlan::given_ns(const MetricInfo& metric) const {
  if (auto found = by_metric_ns.find(metric.name); found != by_metric_ns.end()) return found->second;
  if (auto found = by_group_ns.find(metric.group); found != by_group_ns.end()) return found->second;
  const int64_t override_ns = metric.expected_cost_ns >= kSlowQueryNs ? slow_override_ns : fast_override_ns;
  if (override_ns > 0) return override_ns;
  return std::nullopt;
}

bool PeriodPlan::follows_cpu(const MetricInfo& metric) const {
  return metric.expected_cost_ns >= kSlowQueryNs && !metric.buffered && !given_ns(metric);
}

int64_t PeriodPlan::period_for(const MetricInfo& metric, int64_t cpu_ns) const {
  const int64_t default_ns = default_period_of(metric);
  int64_t period_ns = default_ns;
  if (const auto given = given_ns(metric)) {
    period_ns = *given;
  } else if (follows_cpu(metric) && cpu_ns > 0) {
    period_ns = cpu_budget_period_ns(default_ns, cpu_ns);
  }
  // A buffered metric's history is a ring (NVML: ~120 power samples, 2.4 s): read less often than its default
  // and the oldest samples would be overwritten unseen (0, off, stays off).
  if (metric.buffered) period_ns = std::min(period_ns, default_ns);
  return period_ns;
}

int64_t cpu_budget_period_ns(int64_t default_ns, int64_t cpu_ns) {
  // Expensive queries spin in the driver (energy ~2-5 ms of CPU per read on H200): stretch the default so
  // one such metric costs at most kSlowMetricCpuShare of a core, in whole 100 ms steps.
  constexpr int64_t kStepNs = 100'000'000;
  const auto budget_ns =
      static_cast<int64_t>(static_cast<double>(std::max<int64_t>(cpu_ns, 0)) / kSlowMetricCpuShare);
  return std::max(default_ns, (budget_ns + kStepNs - 1) / kStepNs * kStepNs);
}

CostTable measure_query_costs(const std::vector<Source*>& sources, int reads) {
  CostTable costs;
  for (Source* source : sources) {
    if (!source->available()) continue;
    const auto& devices = source->devices();
    for (size_t device_position = 0; device_position < devices.size(); ++device_position) {
      const auto& metrics = devices[device_position].metrics;
      for (size_t metric_index = 0; metric_index < metrics.size(); ++metric_index) {
        const auto key = std::make_pair(source->name(), metrics[metric_index].name);
        if (costs.contains(key)) continue;
        QueryCost best{INT64_MAX, INT64_MAX};
        for (int read = 0; read < std::max(reads, 1); ++read) {
          const int64_t cpu_before_ns = core::thread_cpu_ns();
          const int64_t wall_before_ns = core::monotonic_ns();
          const Reading reading = source->read(device_position, metric_index);
          const int64_t wall_ns = core::monotonic_ns() - wall_before_ns;
          const int64_t cpu_ns = core::thread_cpu_ns() - cpu_before_ns;
          if (reading.status == ReadStatus::kUnsupported || reading.status == ReadStatus::kDeviceLost) break;
          best.wall_ns = std::min(best.wall_ns, wall_ns);
          best.cpu_ns = std::min(best.cpu_ns, cpu_ns);
        }
        if (best.wall_ns != INT64_MAX) costs[key] = best;
      }
    }
  }
  return costs;
}

void JitterHistogram::add(int64_t jitter_ns) {
  jitter_ns = std::max<int64_t>(jitter_ns, 0);
  const int64_t bucket = std::min<int64_t>(jitter_ns / 1000, kBuckets);
  ++buckets_[static_cast<size_t>(bucket)];
  max_ns_ = std::max(max_ns_, jitter_ns);
  ++count_;
}

void JitterHistogram::merge(const JitterHistogram& other) {
  for (size_t bucket = 0; bucket < buckets_.size(); ++bucket) buckets_[bucket] += other.buckets_[bucket];
  max_ns_ = std::max(max_ns_, other.max_ns_);
  count_ += other.count_;
}

int64_t JitterHistogram::quantile_ns(double q) const {
  if (count_ == 0) return 0;
  const auto wanted = static_cast<uint64_t>(std::max(1.0, q * static_cast<double>(count_) + 0.5));
  uint64_t seen = 0;
  for (size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    seen += buckets_[bucket];
    if (seen >= wanted)
      return bucket == static_cast<size_t>(kBuckets) ? max_ns_ : static_cast<int64_t>(bucket) * 1000;
  }
  return max_ns_;
}

struct Sampler::Task {
  uint32_t device_position = 0;
  uint32_t metric_index = 0;
  int64_t period_ns = 0;
  int64_t next_deadline_ns = 0;
  bool active = true;
  bool error_reported = false;
  int64_t cost_ns = 0;  // expected wall time of one read (measured at start, then following real reads)
  // A slow metric at its default period: the period follows the CPU its reads really cost (0 = fixed period).
  int64_t budget_default_ns = 0;
  int64_t cpu_per_read_ns =
      0;  // running mean (1/8 weight) of the CPU of one read, where the period follows it
};

struct Sampler::Loop {
  uint32_t source_position = 0;
  std::string group;
  bool slow = false;  // any task costs >= kSlowQueryNs: reads go through the source's gate
  std::vector<Task> tasks;
  std::atomic<int64_t> next_read_ns{INT64_MAX};  // fast loops: when the next read starts
  std::atomic<bool> reading{false};              // fast loops: a read is in progress
  LoopStats stats;
  JitterHistogram jitter;
  mutable std::mutex stats_mutex;  // guards stats/jitter for stats() while running
  std::mutex wake_mutex;           // with wake: the loop sleeps to its deadline or until stop()
  std::condition_variable wake;
  struct Runner;  // the steps of run_loop() (defined there)
};

// Per source: the slow loops read one at a time (they would only spin against each other inside the driver)
// and watch the fast loops' next read so as not to sit in its way.
struct Sampler::Gate {
  std::mutex slow_turn;
  std::vector<Loop*> fast_loops;
};

Sampler::Sampler(std::vector<Source*> sources, PeriodPlan plan, SamplerSink sink)
    : sources_(std::move(sources)),
      sink_(std::move(sink)),
      costs_(plan.measured_costs ? *plan.measured_costs : measure_query_costs(sources_)),
      plan_(plan) {
  size_t device_total = 0;
  for (const Source* source : sources_) {
    device_offset_.push_back(device_total);
    device_total += source->available() ? source->devices().size() : 0;
  }
  device_lost_ = std::make_unique<std::atomic<bool>[]>(device_total + 1);
  for (uint32_t source_position = 0; source_position < sources_.size(); ++source_position) {
    Source* source = sources_[source_position];
    if (!source->available()) continue;
    std::map<std::string, Loop*> by_group;
    const auto& devices = source->devices();
    for (uint32_t device_position = 0; device_position < devices.size(); ++device_position) {
      const auto& metrics = devices[device_position].metrics;
      for (uint32_t metric_index = 0; metric_index < metrics.size(); ++metric_index) {
        // Classify by the cost measured here, not the declared one: a query that is cheap on one driver can
        // cost half a millisecond on another and would then delay every fast metric of its group.
        const auto measured = costs_.find({source->name(), metrics[metric_index].name});
        const QueryCost cost = measured != costs_.end() ? measured->second : QueryCost{};
        const MetricInfo metric = as_measured(metrics[metric_index], cost.wall_ns);
        const int64_t period_ns = plan.period_for(metric, cost.cpu_ns);
        if (period_ns <= 0) continue;  // a period of 0 turns the metric off
        Loop*& loop = by_group[metric.group];
        if (loop == nullptr) {
          loops_.push_back(std::make_unique<Loop>());
          loop = loops_.back().get();
          loop->source_position = source_position;
          loop->group = metric.group;
          loop->stats.source = source->name();
          loop->stats.group = metric.group;
        }
        loop->tasks.push_back({device_position, metric_index, period_ns, 0, true, false, cost.wall_ns,
                               plan.follows_cpu(metric) ? default_period_of(metric) : 0, cost.cpu_ns});
        if (metric.expected_cost_ns >= kSlowQueryNs) loop->slow = true;
      }
    }
  }
  for (auto& loop : loops_) align_cpu_following(loop->tasks);
  gates_.resize(sources_.size());
  for (auto& gate : gates_) gate = std::make_unique<Gate>();
  for (auto& loop : loops_) {
    if (!loop->slow) gates_[loop->source_position]->fast_loops.push_back(loop.get());
  }
}

void Sampler::wait_for_gap(Loop& loop, int64_t expected_cost_ns) {
  // A read that cannot fit between two fast reads (longer than the gap) starts right after a fast read ends.
  constexpr int64_t kMarginNs = 200'000;
  constexpr int64_t kPollNs = 50'000;
  const Gate& gate = *gates_[loop.source_position];
  if (gate.fast_loops.empty()) return;
  const int64_t give_up_ns = core::monotonic_ns() + 50'000'000;  // never hold a slow read back > 50 ms
  // A fast read has happened since the wait began once one was seen reading or the fast loops' next read
  // moved on. A deadline that has merely passed is not a read: the fast loop may still be waking up (tens of
  // us), and a slow read let go then started just ahead of it (1-9 times a second on a 2-core VM).
  bool waited_for_read = false;
  int64_t first_next_fast_ns = -1;
  while (!stopping_.load(std::memory_order_relaxed)) {
    const int64_t now_ns = core::monotonic_ns();
    if (now_ns >= give_up_ns) return;
    bool busy = false;
    int64_t next_fast_ns = INT64_MAX;
    for (const Loop* fast : gate.fast_loops) {
      busy = busy || fast->reading.load(std::memory_order_acquire);
      next_fast_ns = std::min(next_fast_ns, fast->next_read_ns.load(std::memory_order_acquire));
    }
    if (first_next_fast_ns < 0) first_next_fast_ns = next_fast_ns;
    if (busy || next_fast_ns > first_next_fast_ns) waited_for_read = true;
    const bool due = next_fast_ns <= now_ns;  // a fast read is due and has not begun: its loop is waking
    if (!busy && !due && (now_ns + expected_cost_ns + kMarginNs <= next_fast_ns || waited_for_read)) return;
    const int64_t wake_ns = busy || due || next_fast_ns - now_ns < kPollNs
                                ? now_ns + kPollNs
                                : std::min(next_fast_ns, give_up_ns);
    sleep_until_or_stop(loop, wake_ns);
  }
}

Sampler::~Sampler() {
  stop();
}

void Sampler::start(int64_t start_ns) {
  if (!threads_.empty()) return;
  if (start_ns == 0) start_ns = core::monotonic_ns();
  started_ns_ = start_ns;
  stopping_ = false;
  for (auto& loop : loops_) {
    for (auto& task : loop->tasks) task.next_deadline_ns = start_ns;
    threads_.emplace_back([this, raw = loop.get()] { run_loop(*raw); });
  }
}

void Sampler::sleep_until_or_stop(Loop& loop, int64_t deadline_ns) {
  // One timed wait per deadline: a loop whose next read is a second away sleeps once, not in short naps (each
  // wake-up costs tens of µs of CPU on a VM, and five slow loops napping every 20 ms cost 0.5 % of a core).
  // Each loop waits on its own mutex, so no loop's wake-up ever waits for another loop's lock.
  std::unique_lock lock(loop.wake_mutex);
  loop.wake.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns)),
                       [this] { return stopping_.load(std::memory_order_relaxed); });
}

void Sampler::stop() {
  stopping_ = true;
  for (auto& loop : loops_) {
    // Under the loop's mutex: a loop between its check of stopping_ and its wait gets the notify.
    std::lock_guard lock(loop->wake_mutex);
    loop->wake.notify_all();
  }
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void Sampler::report(const SamplerEvent& event) {
  if (sink_.on_event) sink_.on_event(event);
}

// The thread of one loop: the source it reads, buffers reused by every pass, and the steps of a pass. Nested
// in Loop so that it may use the sampler's private state (gates, lost devices, sink).
struct Sampler::Loop::Runner {
  Runner(Sampler& owner, Loop& owned)
      : sampler(owner),
        loop(owned),
        source(*owner.sources_[owned.source_position]),
        lost_offset(owner.device_offset_[owned.source_position]) {}

  // Asks for real-time priority and records in the stats whether it was granted.
  void claim_realtime_priority();
  // The earliest deadline of the active tasks; INT64_MAX when none is left.
  int64_t earliest_deadline_ns() const;
  // Sleeps to `deadline_ns` (a fast loop first posts it for the slow ones); false when stop() woke it.
  bool sleep_to_deadline(int64_t deadline_ns);
  // Counts a wake-up and its delay past the deadline.
  void record_wakeup(int64_t woke_ns, int64_t deadline_ns);
  // Reads the due tasks device by device, their values into `batch`, and counts the pass.
  void read_due_tasks(bool closing, int64_t woke_ns);
  // Ends a pass: lets slow reads in again, hands `batch` to the sink, adds the pass to the stats.
  void end_pass(bool closing);
  // After the last pass: holds no slow read back and records the sleeps left and the thread's CPU time.
  void end_thread(int64_t cpu_start_ns);

 private:
  // What one pass counted, added to the loop's stats when the pass ends.
  struct PassCounts {
    uint64_t late = 0;    // reads that started more than half a period after their deadline
    uint64_t missed = 0;  // deadlines skipped because a read overran them
    uint64_t errors = 0;  // transient read errors
    int64_t read_ns = 0;  // wall time spent inside source reads
  };

  // Fills `due_indices` with the tasks to read now (all due counters and buffered metrics when closing).
  void collect_due_tasks(bool closing, int64_t woke_ns);
  // Reads the due tasks `due_indices[begin, end)` of one device with one batch call.
  void read_device(uint32_t device_position, size_t begin, size_t end);
  // Slow loops: takes the source's slow turn and waits for a gap between fast reads (empty lock otherwise).
  std::unique_lock<std::mutex> take_slow_turn(size_t begin, size_t end);
  // After a slow read: periods that follow CPU cost and the expected read costs follow what the read took.
  void follow_slow_read(size_t begin, size_t end, int64_t query_cpu_ns, int64_t read_wall_ns);
  // Moves `task`'s deadline past the read by whole periods, counting a late start and skipped deadlines.
  void advance_deadline(Task& task, int64_t read_begin_ns, int64_t read_end_ns);
  // Turns one reading into samples in `batch`, or into an event (unsupported, device lost, first error).
  void take_reading(Task& task, uint32_t device_position, const Reading& result, int64_t t_ns);

  Sampler& sampler;
  Loop& loop;
  Source& source;
  size_t lost_offset = 0;              // first device_lost_ slot of the loop's source
  uint64_t sleeps = 0;                 // since the last time stats were updated
  PassCounts counts;                   // of the pass under way
  std::vector<SampleRecord> batch;     // the values of this pass
  std::vector<size_t> due_indices;     // task indices due now, grouped per device
  std::vector<size_t> metric_indices;  // metric indices of one device's due tasks
  std::vector<Reading> readings;       // their readings
};

void Sampler::Loop::Runner::claim_realtime_priority() {
  // Real-time priority (SCHED_FIFO 1) where allowed: a busy host (data loaders on every core) otherwise
  // delays wake-ups by tens of ms. The loop sleeps between reads, so it cannot starve anything.
  sched_param priority{};
  priority.sched_priority = 1;
  const bool realtime = pthread_setschedparam(pthread_self(), SCHED_FIFO, &priority) == 0;
  std::lock_guard lock(loop.stats_mutex);
  loop.stats.realtime = realtime;
}

int64_t Sampler::Loop::Runner::earliest_deadline_ns() const {
  int64_t deadline_ns = INT64_MAX;
  for (const auto& task : loop.tasks) {
    if (task.active) deadline_ns = std::min(deadline_ns, task.next_deadline_ns);
  }
  return deadline_ns;
}

bool Sampler::Loop::Runner::sleep_to_deadline(int64_t deadline_ns) {
  if (!loop.slow) loop.next_read_ns.store(deadline_ns, std::memory_order_release);
  sampler.sleep_until_or_stop(loop, deadline_ns);
  ++sleeps;  // added to stats under the lock taken at the end of this pass
  return !sampler.stopping_.load(std::memory_order_relaxed);
}

void Sampler::Loop::Runner::record_wakeup(int64_t woke_ns, int64_t deadline_ns) {
  std::lock_guard lock(loop.stats_mutex);
  ++loop.stats.wakeups;
  loop.jitter.add(woke_ns - deadline_ns);
}

void Sampler::Loop::Runner::collect_due_tasks(bool closing, int64_t woke_ns) {
  // Tasks are stored device by device, so each device's due tasks are adjacent and are read with one batch
  // call.
  due_indices.clear();
  for (size_t task_index = 0; task_index < loop.tasks.size(); ++task_index) {
    const Task& task = loop.tasks[task_index];
    if (!task.active) continue;
    // The closing pass reads what would otherwise be lost: counter deltas and buffered samples since the
    // last read (a gauge's last value is already recorded).
    const auto& info = source.devices()[task.device_position].metrics[task.metric_index];
    const bool due =
        closing ? info.kind == MetricKind::kCounter || info.buffered : task.next_deadline_ns <= woke_ns;
    if (due) due_indices.push_back(task_index);
  }
}

void Sampler::Loop::Runner::read_due_tasks(bool closing, int64_t woke_ns) {
  collect_due_tasks(closing, woke_ns);
  batch.clear();
  counts = PassCounts{};
  for (size_t begin = 0; begin < due_indices.size();) {
    const uint32_t device_position = loop.tasks[due_indices[begin]].device_position;
    size_t end = begin;
    while (end < due_indices.size() && loop.tasks[due_indices[end]].device_position == device_position) ++end;
    read_device(device_position, begin, end);
    begin = end;
  }
}

void Sampler::Loop::Runner::read_device(uint32_t device_position, size_t begin, size_t end) {
  if (sampler.device_lost_[lost_offset + device_position].load()) {
    for (size_t position = begin; position < end; ++position)
      loop.tasks[due_indices[position]].active = false;
    return;
  }
  metric_indices.clear();
  for (size_t position = begin; position < end; ++position) {
    metric_indices.push_back(loop.tasks[due_indices[position]].metric_index);
  }
  readings.assign(metric_indices.size(), Reading{});
  std::unique_lock<std::mutex> slow_turn = take_slow_turn(begin, end);
  const int64_t read_cpu_begin_ns = loop.slow ? core::thread_cpu_ns() : 0;
  const int64_t read_begin_ns = core::monotonic_ns();
  source.read_batch(device_position, metric_indices, readings);
  const int64_t read_end_ns = core::monotonic_ns();
  if (slow_turn.owns_lock()) {
    slow_turn.unlock();
    follow_slow_read(begin, end, core::thread_cpu_ns() - read_cpu_begin_ns, read_end_ns - read_begin_ns);
  }
  counts.read_ns += read_end_ns - read_begin_ns;
  const int64_t t_ns = read_begin_ns + (read_end_ns - read_begin_ns) / 2;
  for (size_t position = begin; position < end; ++position) {
    Task& task = loop.tasks[due_indices[position]];
    advance_deadline(task, read_begin_ns, read_end_ns);
    take_reading(task, device_position, readings[position - begin], t_ns);
  }
}

std::unique_lock<std::mutex> Sampler::Loop::Runner::take_slow_turn(size_t begin, size_t end) {
  if (!loop.slow) return {};
  int64_t expected_cost_ns = 0;
  for (size_t position = begin; position < end; ++position)
    expected_cost_ns += loop.tasks[due_indices[position]].cost_ns;
  std::unique_lock slow_turn(sampler.gates_[loop.source_position]->slow_turn);
  sampler.wait_for_gap(loop, expected_cost_ns);
  return slow_turn;
}

void Sampler::Loop::Runner::follow_slow_read(size_t begin, size_t end, int64_t query_cpu_ns,
                                             int64_t read_wall_ns) {
  // The CPU a query really costs (cold, under load: 2-3x the cheapest read measured at start) sets the
  // period of the metrics it returns at their default, so that each query (NVLink TX and RX come in
  // one call) stays within kSlowMetricCpuShare of a core.
  for (size_t position = begin; position < end; ++position) {
    Task& task = loop.tasks[due_indices[position]];
    if (task.budget_default_ns == 0) continue;  // a period the user gave, or a buffered metric
    task.cpu_per_read_ns += (query_cpu_ns - task.cpu_per_read_ns) / 8;
    task.period_ns = cpu_budget_period_ns(task.budget_default_ns, task.cpu_per_read_ns);
  }
  // The gap needed is what reads really take (energy: 2.4 ms at start, up to 5 ms later): follow rises
  // at once and falls slowly.
  const int64_t share_ns = read_wall_ns / static_cast<int64_t>(end - begin);
  for (size_t position = begin; position < end; ++position) {
    int64_t& cost_ns = loop.tasks[due_indices[position]].cost_ns;
    cost_ns = std::max(share_ns, cost_ns - cost_ns / 16);
  }
}

void Sampler::Loop::Runner::advance_deadline(Task& task, int64_t read_begin_ns, int64_t read_end_ns) {
  if (read_begin_ns - task.next_deadline_ns > task.period_ns / 2) ++counts.late;
  // Advance by whole periods from the scheduled deadline (not from now): no drift; overrun periods are
  // skipped and counted, never replayed in a burst.
  task.next_deadline_ns += task.period_ns;
  if (task.next_deadline_ns <= read_end_ns) {
    const int64_t behind = (read_end_ns - task.next_deadline_ns) / task.period_ns + 1;
    counts.missed += static_cast<uint64_t>(behind);
    task.next_deadline_ns += behind * task.period_ns;
  }
}

void Sampler::Loop::Runner::take_reading(Task& task, uint32_t device_position, const Reading& result,
                                         int64_t t_ns) {
  const uint32_t source_index = loop.source_position;
  const DeviceInfo& device = source.devices()[device_position];
  const auto& metric = device.metrics[task.metric_index];
  switch (result.status) {
    case ReadStatus::kOk:
      if (metric.buffered) {  // each sample at the time the source took it (none if none is new)
        for (const TimedValue& sample : result.series) {
          if (sample.sensor_t_ns < sampler.started_ns_) continue;  // taken before the recording began
          batch.push_back({source_index, device_position, task.metric_index, sample.sensor_t_ns, sample.value,
                           sample.sensor_t_ns});
        }
      } else {
        batch.push_back(
            {source_index, device_position, task.metric_index, t_ns, result.value, result.sensor_t_ns});
      }
      break;
    case ReadStatus::kUnsupported:
      task.active = false;
      sampler.report({t_ns, false, source_index, device_position,
                      fmt::format("{} device {}: {} is not supported, no longer read ({})", source.name(),
                                  device.index, metric.name, result.error)});
      break;
    case ReadStatus::kDeviceLost:
      task.active = false;
      if (!sampler.device_lost_[lost_offset + device_position].exchange(true)) {
        sampler.report({t_ns, true, source_index, device_position,
                        fmt::format("{} device {} is lost ({}); the other devices keep recording",
                                    source.name(), device.index, result.error)});
      }
      break;
    case ReadStatus::kError:
      ++counts.errors;
      if (!task.error_reported && !result.error.empty()) {
        task.error_reported = true;
        sampler.report({t_ns, false, source_index, device_position,
                        fmt::format("{} device {}: reading {} failed ({}); will keep trying", source.name(),
                                    device.index, metric.name, result.error)});
      }
      break;
  }
}

void Sampler::Loop::Runner::end_pass(bool closing) {
  if (!loop.slow) loop.reading.store(false, std::memory_order_release);
  if (!batch.empty() && sampler.sink_.on_samples) sampler.sink_.on_samples(batch);
  std::lock_guard lock(loop.stats_mutex);
  loop.stats.samples += batch.size();
  loop.stats.sleeps += sleeps;
  sleeps = 0;
  loop.stats.late += closing ? 0 : counts.late;
  loop.stats.missed += closing ? 0 : counts.missed;
  loop.stats.read_errors += counts.errors;
  loop.stats.read_ns_total += counts.read_ns;
}

void Sampler::Loop::Runner::end_thread(int64_t cpu_start_ns) {
  loop.next_read_ns.store(INT64_MAX, std::memory_order_release);  // a stopped fast loop holds nobody back
  loop.reading.store(false, std::memory_order_release);
  std::lock_guard lock(loop.stats_mutex);
  loop.stats.sleeps += sleeps;
  loop.stats.cpu_ns = core::thread_cpu_ns() - cpu_start_ns;
}

void Sampler::run_loop(Loop& loop) {
  Loop::Runner runner(*this, loop);
  runner.claim_realtime_priority();
  const int64_t cpu_start_ns = core::thread_cpu_ns();
  // When stop() is called every counter is read once more (the closing pass), so that counter deltas (energy,
  // throttle seconds) cover the recording to its end even where a counter's period is seconds long.
  while (true) {
    const bool closing = stopping_.load(std::memory_order_relaxed);
    const int64_t deadline_ns = runner.earliest_deadline_ns();
    if (deadline_ns == INT64_MAX) break;  // nothing left to read (all unsupported or lost)
    if (!closing && !runner.sleep_to_deadline(deadline_ns)) continue;  // woken by stop(): closing pass next
    if (!loop.slow) loop.reading.store(true, std::memory_order_release);  // slow loops keep out of the way
    const int64_t woke_ns = core::monotonic_ns();
    if (!closing) runner.record_wakeup(woke_ns, deadline_ns);
    runner.read_due_tasks(closing, woke_ns);
    runner.end_pass(closing);
    if (closing) break;
  }
  runner.end_thread(cpu_start_ns);
}

std::vector<LoopStats> Sampler::stats() const {
  std::vector<LoopStats> result;
  for (const auto& loop : loops_) {
    std::lock_guard lock(loop->stats_mutex);
    LoopStats stats = loop->stats;
    stats.jitter_p50_ns = loop->jitter.quantile_ns(0.5);
    stats.jitter_p99_ns = loop->jitter.quantile_ns(0.99);
    stats.jitter_max_ns = loop->jitter.max_ns();
    result.push_back(std::move(stats));
  }
  return result;
}

JitterSummary Sampler::jitter_summary() const {
  JitterHistogram pooled;
  JitterSummary summary;
  for (const auto& loop : loops_) {
    std::lock_guard lock(loop->stats_mutex);
    pooled.merge(loop->jitter);
    const int64_t loop_p99_ns = loop->jitter.quantile_ns(0.99);
    if (loop->jitter.count() > 0 && (summary.worst_loop.empty() || loop_p99_ns > summary.worst_loop_p99_ns)) {
      summary.worst_loop_p99_ns = loop_p99_ns;
      summary.worst_loop = loop->stats.source + "/" + loop->group;
      summary.worst_loop_wakeups = loop->jitter.count();
    }
  }
  summary.wakeups = pooled.count();
  summary.p50_ns = pooled.quantile_ns(0.5);
  summary.p99_ns = pooled.quantile_ns(0.99);
  summary.max_ns = pooled.max_ns();
  return summary;
}

std::vector<Sampler::Scheduled> Sampler::schedule() const {
  std::vector<Scheduled> result;
  for (const auto& loop : loops_) {
    const Source& source = *sources_[loop->source_position];
    for (const auto& task : loop->tasks) {
      const MetricInfo& info = source.devices()[task.device_position].metrics[task.metric_index];
      auto existing = std::find_if(result.begin(), result.end(), [&](const Scheduled& entry) {
        return entry.source == source.name() && entry.metric == info.name &&
               entry.period_ns == task.period_ns;
      });
      if (existing != result.end()) {
        ++existing->devices;
      } else {
        const auto measured = costs_.find({source.name(), info.name});
        result.push_back({source.name(), loop->group, info.name, task.period_ns, 1,
                          measured != costs_.end() ? measured->second : QueryCost{},
                          loop->group != info.group, plan_.given_ns(info).value_or(0) > task.period_ns});
      }
    }
  }
  return result;
}

}  // namespace calo::telemetry
