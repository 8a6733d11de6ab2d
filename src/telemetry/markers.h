// Step and phase markers: (a) patterns on the recorded program's output lines (Megatron-LM/NeMo, TorchTitan,
// regex:PATTERN), (b) a line protocol on a unix datagram socket named by $CALO_MARKER_SOCKET
// ("begin step 12 [rank R] [t_ns T]", "end step 12", "phase backward", ...). Markers are kept apart by rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace calo::telemetry {

/// Name of the environment variable that carries the marker socket path to the recorded program.
inline constexpr const char* kMarkerSocketEnv = "CALO_MARKER_SOCKET";

/// A finished interval assembled from markers (times: host CLOCK_MONOTONIC ns).
struct MarkerSpan {
  bool is_step = true;        ///< step (true) or phase (false)
  std::string name;           ///< "step" for steps, the phase name otherwise
  int32_t rank = -1;          ///< training rank, -1 when unknown (e.g. from output lines of rank 0 only)
  int64_t step = -1;          ///< step number, -1 for phases
  int64_t steps_covered = 1;  ///< steps this span stands for (a log line every 10 steps covers 10)
  int64_t t_begin_ns = 0;     ///< begin (CLOCK_MONOTONIC)
  int64_t t_end_ns = 0;       ///< end (CLOCK_MONOTONIC)
  std::string source;         ///< "socket", "megatron", "torchtitan", "regex"
};

/// One parsed protocol line.
struct MarkerCommand {
  enum class Verb {
    kBegin,
    kEnd,
    kPhase
  } verb = Verb::kBegin;  ///< begin/end of a step or phase; phase switch
  bool is_step = true;    ///< "step" (true) or "phase" (false) for begin/end
  std::string name;       ///< phase name ("" for steps)
  int64_t step = -1;      ///< step number for steps
  int32_t rank = -1;      ///< "rank R", -1 if absent
  int64_t t_ns = 0;       ///< "t_ns T" (CLOCK_MONOTONIC of the sender), 0 = time of arrival
};

/// Parses one protocol line; nullopt (with `error` set) if it is not a valid marker line.
std::optional<MarkerCommand> parse_marker_line(const std::string& line, std::string* error = nullptr);

/// Turns marker commands and output-line matches into spans, per rank. Thread-safe.
class SpanAssembler {
 public:
  /// Called with every finished span (under the assembler's lock; keep it short).
  explicit SpanAssembler(std::function<void(const MarkerSpan&)> on_span);
  /// Applies one protocol command that arrived at `arrival_ns`.
  void apply(const MarkerCommand& command, int64_t arrival_ns, const std::string& source);
  /// A log line said step `step` ended at `end_ns`; `elapsed_ms` (> 0) is the framework's own per-step time.
  /// Without it the span runs from the previous logged step (divided over the steps in between).
  void log_step(int64_t step, int64_t end_ns, double elapsed_ms, const std::string& source);
  /// Closes every open phase at `end_ns` (open steps are dropped: they never ended). Returns how many spans
  /// were closed.
  int close_all(int64_t end_ns);
  /// Marker lines that could not be parsed or did not match (e.g. "end step 3" without a begin).
  uint64_t rejected() const { return rejected_; }
  /// Counts one marker line that could not be parsed.
  void note_rejected() { ++rejected_; }

 private:
  struct RankState {
    std::map<int64_t, int64_t> open_steps;                         // step -> begin ns
    std::map<std::string, int64_t> open_phases;                    // "begin phase X" -> begin ns
    std::optional<std::pair<std::string, int64_t>> current_phase;  // "phase X" until the next one
  };
  std::function<void(const MarkerSpan&)> on_span_;
  std::mutex mutex_;
  std::map<int32_t, RankState> ranks_;
  int64_t last_log_step_ = -1;
  int64_t last_log_end_ns_ = 0;
  std::atomic<uint64_t> rejected_{0};
};

/// Keeps one source of step spans per run: a program that prints framework log lines (--markers) and also
/// sends socket markers would otherwise have every step twice. Socket step spans win. An output-line step
/// span is held back until a span `hold_ns` later arrives (or finish()); a socket step seen meanwhile drops
/// it and every later one. Phases pass through. Not thread-safe on its own: feed it from SpanAssembler's
/// callback.
class StepSourceFilter {
 public:
  /// `write` receives every span that is kept; `hold_ns` is how long an output-line step waits for a socket
  /// one.
  explicit StepSourceFilter(std::function<void(const MarkerSpan&)> write, int64_t hold_ns = 10'000'000'000);
  /// Passes `span` on, holds it, or drops it (see the class comment).
  void offer(const MarkerSpan& span);
  /// Writes the output-line steps still held when no socket step came (call once, after the last offer).
  void finish();
  /// Where the kept steps came from: "socket", the pattern kind ("megatron", ...), or "" if no step was seen.
  const std::string& source() const { return source_; }
  /// Output-line step spans dropped because socket markers gave the steps.
  uint64_t dropped() const { return dropped_; }
  /// Output-line step spans written before the first socket step came more than `hold_ns` after them.
  uint64_t written_before_socket() const { return written_before_socket_; }

 private:
  void release_older_than(int64_t t_ns);
  std::function<void(const MarkerSpan&)> write_;
  int64_t hold_ns_;
  std::vector<MarkerSpan> held_;  // output-line steps not yet written, in arrival order
  bool socket_seen_ = false;
  uint64_t log_steps_written_ = 0;
  std::string source_;
  uint64_t dropped_ = 0;
  uint64_t written_before_socket_ = 0;
};

/// Output-line step patterns.
class LinePattern {
 public:
  /// Bytes of a line a "regex:" pattern sees (std::regex recurses per character; longer lines are cut).
  static constexpr size_t kMaxRegexLineBytes = 4096;
  /// "megatron" (Megatron-LM and NeMo), "torchtitan", or "regex:PATTERN" (group 1 = step number, optional
  /// group 2 = step time in ms). Throws InputError naming the valid choices.
  explicit LinePattern(const std::string& spec);
  /// If `line` reports a step: {step, elapsed ms (0 if not given)}.
  std::optional<std::pair<int64_t, double>> match(const std::string& line) const;
  /// "megatron", "torchtitan" or "regex".
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  std::vector<std::regex> patterns_;  // the "regex:" pattern (the built-in ones are scanned by hand)
};

/// Listens on a unix datagram socket; each datagram holds one or more marker lines.
class MarkerSocket {
 public:
  /// Binds `path` (removes a stale socket file first); throws InputError if it cannot.
  MarkerSocket(std::string path, SpanAssembler& assembler);
  /// Stops listening and removes the socket file.
  ~MarkerSocket();
  MarkerSocket(const MarkerSocket&) = delete;
  MarkerSocket& operator=(const MarkerSocket&) = delete;
  /// Drains what is queued, then stops the listener thread.
  void stop();
  /// The socket path.
  const std::string& path() const { return path_; }
  /// Datagrams received.
  uint64_t received() const { return received_; }

 private:
  void listen();
  std::string path_;
  SpanAssembler& assembler_;
  int fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<uint64_t> received_{0};
};

}  // namespace calo::telemetry
