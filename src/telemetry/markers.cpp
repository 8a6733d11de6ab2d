// Step/phase markers: see markers.h.
#include "telemetry/markers.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/time.h"

namespace calo::telemetry {

namespace {

bool parse_int64(const std::string& text, int64_t& value) {
  if (text.empty()) return false;
  size_t used = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size();
}

// Removes ANSI colour escapes (TorchTitan colours its log lines).
std::string strip_ansi(const std::string& line) {
  std::string plain;
  plain.reserve(line.size());
  for (size_t position = 0; position < line.size(); ++position) {
    if (line[position] == '\x1b' && position + 1 < line.size() && line[position + 1] == '[') {
      position += 2;
      while (position < line.size() && !(line[position] >= '@' && line[position] <= '~')) ++position;
      continue;
    }
    plain.push_back(line[position]);
  }
  return plain;
}

// The built-in patterns are scanned by hand: libstdc++'s std::regex recurses once per character that `.*`
// consumes, so a long output line (a config dump) overflowed the stack of `calo record` (100 KB did).
bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
// Advances `at` over characters of `line` satisfying `pred`; returns how many.
template <typename Pred>
size_t skip(std::string_view line, size_t& at, Pred pred) {
  const size_t start = at;
  while (at < line.size() && pred(line[at])) ++at;
  return at - start;
}

// The step digits of a Megatron/NeMo header "iteration\s+(\d+)\s*/\s*\d+\s*\|" starting at `at`, and the
// position after its '|'; nullopt if the text there is no header.
std::optional<std::pair<std::string_view, size_t>> megatron_header(std::string_view line, size_t at) {
  at += std::string_view("iteration").size();
  if (skip(line, at, is_space) == 0) return std::nullopt;
  const size_t digits = at;
  if (skip(line, at, is_digit) == 0) return std::nullopt;
  const std::string_view step = line.substr(digits, at - digits);
  skip(line, at, is_space);
  if (at >= line.size() || line[at] != '/') return std::nullopt;
  ++at;
  skip(line, at, is_space);
  if (skip(line, at, is_digit) == 0) return std::nullopt;
  skip(line, at, is_space);
  if (at >= line.size() || line[at] != '|') return std::nullopt;
  return std::make_pair(step, at + 1);
}

// The regex "iteration\s+(\d+)\s*/\s*\d+\s*\|.*KEY\s*([0-9.]+)" with std::regex_search's choice of
// match (leftmost header; greedy `.*`, so the last KEY followed by a number): {step digits, number text}.
std::optional<std::pair<std::string_view, std::string_view>> match_megatron(std::string_view line,
                                                                            std::string_view key) {
  for (size_t found = line.find("iteration"); found != std::string_view::npos;
       found = line.find("iteration", found + 1)) {
    const auto header = megatron_header(line, found);
    if (!header) continue;
    const std::string_view rest = line.substr(header->second);
    for (size_t at = rest.rfind(key); at != std::string_view::npos;
         at = at == 0 ? std::string_view::npos : rest.rfind(key, at - 1)) {
      size_t cursor = at + key.size();
      skip(rest, cursor, is_space);
      const size_t number = cursor;
      if (skip(rest, cursor, [](char c) { return is_digit(c) || c == '.'; }) > 0)
        return std::make_pair(header->first, rest.substr(number, cursor - number));
    }
  }
  return std::nullopt;
}

// TorchTitan's "\bstep:\s*(\d+)\s+loss:" (leftmost match): the step digits.
std::optional<std::string_view> match_torchtitan(std::string_view line) {
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  for (size_t found = line.find("step:"); found != std::string_view::npos;
       found = line.find("step:", found + 1)) {
    if (found > 0 && is_word(line[found - 1])) continue;
    size_t at = found + 5;
    skip(line, at, is_space);
    const size_t digits = at;
    if (skip(line, at, is_digit) == 0) continue;
    const std::string_view step = line.substr(digits, at - digits);
    if (skip(line, at, is_space) == 0) continue;
    if (line.substr(at, 5) == "loss:") return step;
  }
  return std::nullopt;
}

double parse_ms(std::string_view text) {
  try {
    return std::stod(std::string(text));
  } catch (const std::exception&) {
    return 0;
  }
}

constexpr int64_t kMaxSenderClockSkewNs = 10'000'000'000;  // a sender t_ns further off than this is ignored

}  // namespace

std::optional<MarkerCommand> parse_marker_line(const std::string& line, std::string* error) {
  std::istringstream stream(line);
  std::vector<std::string> words;
  for (std::string word; stream >> word;) words.push_back(word);
  auto fail = [&](const std::string& why) -> std::optional<MarkerCommand> {
    if (error) *error = fmt::format("marker line '{}': {}", line, why);
    return std::nullopt;
  };
  if (words.empty()) return fail("empty");
  MarkerCommand command;
  size_t next = 0;
  if (words[0] == "begin" || words[0] == "end") {
    if (words.size() < 3) return fail("expected 'begin|end step N' or 'begin|end phase NAME'");
    command.verb = words[0] == "begin" ? MarkerCommand::Verb::kBegin : MarkerCommand::Verb::kEnd;
    if (words[1] == "step") {
      command.is_step = true;
      if (!parse_int64(words[2], command.step) || command.step < 0) return fail("step number must be >= 0");
    } else if (words[1] == "phase") {
      command.is_step = false;
      command.name = words[2];
    } else {
      return fail("expected 'step' or 'phase' after '" + words[0] + "'");
    }
    next = 3;
  } else if (words[0] == "phase") {
    if (words.size() < 2) return fail("expected 'phase NAME'");
    command.verb = MarkerCommand::Verb::kPhase;
    command.is_step = false;
    command.name = words[1];
    next = 2;
  } else {
    return fail("must start with 'begin', 'end' or 'phase'");
  }
  while (next < words.size()) {
    if (next + 1 >= words.size()) return fail("'" + words[next] + "' needs a value");
    int64_t value = 0;
    if (!parse_int64(words[next + 1], value)) return fail("'" + words[next] + "' needs an integer");
    if (words[next] == "rank") {
      if (value < 0 || value > std::numeric_limits<int32_t>::max())
        return fail("rank must be in 0..2147483647");
      command.rank = static_cast<int32_t>(value);
    } else if (words[next] == "t_ns") {
      command.t_ns = value;
    } else {
      return fail("unknown option '" + words[next] + "' (valid: rank R, t_ns T)");
    }
    next += 2;
  }
  return command;
}

SpanAssembler::SpanAssembler(std::function<void(const MarkerSpan&)> on_span) : on_span_(std::move(on_span)) {}

void SpanAssembler::apply(const MarkerCommand& command, int64_t arrival_ns, const std::string& source) {
  int64_t t_ns = arrival_ns;
  if (command.t_ns > 0 && std::llabs(command.t_ns - arrival_ns) < kMaxSenderClockSkewNs) t_ns = command.t_ns;
  std::lock_guard lock(mutex_);
  RankState& state = ranks_[command.rank];
  MarkerSpan span;
  span.rank = command.rank;
  span.source = source;
  span.t_end_ns = t_ns;
  switch (command.verb) {
    case MarkerCommand::Verb::kBegin:
      if (command.is_step) {
        state.open_steps[command.step] = t_ns;
      } else {
        state.open_phases[command.name] = t_ns;
      }
      return;
    case MarkerCommand::Verb::kEnd: {
      if (command.is_step) {
        auto open = state.open_steps.find(command.step);
        if (open == state.open_steps.end()) {
          ++rejected_;
          return;
        }
        span.is_step = true;
        span.name = "step";
        span.step = command.step;
        span.t_begin_ns = open->second;
        state.open_steps.erase(open);
      } else {
        auto open = state.open_phases.find(command.name);
        if (open == state.open_phases.end()) {
          ++rejected_;
          return;
        }
        span.is_step = false;
        span.name = command.name;
        span.t_begin_ns = open->second;
        state.open_phases.erase(open);
      }
      if (span.t_end_ns < span.t_begin_ns) {  // sender times out of order: no negative-length span
        ++rejected_;
        return;
      }
      on_span_(span);
      return;
    }
    case MarkerCommand::Verb::kPhase:
      if (state.current_phase) {
        span.is_step = false;
        span.name = state.current_phase->first;
        span.t_begin_ns = state.current_phase->second;
        if (span.t_end_ns >= span.t_begin_ns) {
          on_span_(span);
        } else {
          ++rejected_;
        }
      }
      // "phase end" (or "phase none") closes the current phase without opening another.
      if (command.name == "end" || command.name == "none") {
        state.current_phase.reset();
      } else {
        state.current_phase = std::make_pair(command.name, t_ns);
      }
      return;
  }
}

void SpanAssembler::log_step(int64_t step, int64_t end_ns, double elapsed_ms, const std::string& source) {
  std::lock_guard lock(mutex_);
  MarkerSpan span;
  span.is_step = true;
  span.name = "step";
  span.step = step;
  span.t_end_ns = end_ns;
  span.source = source;
  bool emit = false;
  const int64_t covered = last_log_step_ >= 0 && step > last_log_step_ ? step - last_log_step_ : 1;
  // Megatron prints the mean over its log interval: the span covers the steps since the last line. A time
  // longer than the clock has run (a garbled or absurd number) is ignored, as if none were given.
  const double span_ns = elapsed_ms * 1e6 * static_cast<double>(covered);
  if (elapsed_ms > 0 && span_ns <= static_cast<double>(end_ns)) {
    span.steps_covered = covered;
    span.t_begin_ns = end_ns - static_cast<int64_t>(span_ns);
    emit = true;
  } else if (last_log_step_ >= 0 && step > last_log_step_) {
    span.t_begin_ns = last_log_end_ns_;
    span.steps_covered = covered;
    emit = true;
  }
  last_log_step_ = step;
  last_log_end_ns_ = end_ns;
  if (emit) on_span_(span);
}

StepSourceFilter::StepSourceFilter(std::function<void(const MarkerSpan&)> write, int64_t hold_ns)
    : write_(std::move(write)), hold_ns_(hold_ns) {}

void StepSourceFilter::offer(const MarkerSpan& span) {
  if (!span.is_step) {
    write_(span);
  } else if (span.source == "socket") {
    if (!socket_seen_) {
      socket_seen_ = true;
      source_ = "socket";
      dropped_ += held_.size();
      held_.clear();
      written_before_socket_ = log_steps_written_;
    }
    write_(span);
  } else if (socket_seen_) {
    ++dropped_;
  } else {
    held_.push_back(span);
  }
  release_older_than(span.t_end_ns - hold_ns_);
}

void StepSourceFilter::finish() {
  release_older_than(std::numeric_limits<int64_t>::max());
}

void StepSourceFilter::release_older_than(int64_t t_ns) {
  size_t released = 0;
  while (released < held_.size() && held_[released].t_end_ns <= t_ns) {
    if (source_.empty()) source_ = held_[released].source;
    write_(held_[released]);
    ++log_steps_written_;
    ++released;
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(released));
}

int SpanAssembler::close_all(int64_t end_ns) {
  std::lock_guard lock(mutex_);
  int closed = 0;
  for (auto& [rank, state] : ranks_) {
    auto emit_phase = [&, rank_id = rank](const std::string& name, int64_t begin_ns) {
      MarkerSpan span;
      span.is_step = false;
      span.name = name;
      span.rank = rank_id;
      span.t_begin_ns = begin_ns;
      span.t_end_ns = std::max(end_ns, begin_ns);  // a sender's clock may run up to 10 s ahead
      span.source = "socket";
      on_span_(span);
      ++closed;
    };
    if (state.current_phase) emit_phase(state.current_phase->first, state.current_phase->second);
    for (const auto& [name, begin_ns] : state.open_phases) emit_phase(name, begin_ns);
    state = RankState{};
  }
  return closed;
}

LinePattern::LinePattern(const std::string& spec) {
  if (spec == "megatron" || spec == "torchtitan") {
    // Megatron-LM: " iteration       10/     100 | ... | elapsed time per iteration (ms): 1234.5 | ...";
    // NeMo 2 / Lightning: "... iteration 5/99 | ... | train_step_timing in s: 1.23"; TorchTitan:
    // "... step: 10  loss:  7.9 ..." (scanned by hand in match()).
    kind_ = spec;
  } else if (spec.rfind("regex:", 0) == 0) {
    kind_ = "regex";
    try {
      patterns_.emplace_back(spec.substr(6), std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& error) {
      throw InputError(
          fmt::format("--markers {}: invalid regular expression ({}); group 1 must capture the step "
                      "number, optional group 2 the step time in ms",
                      spec, error.what()));
    }
    if (patterns_.back().mark_count() < 1) {
      throw InputError(
          fmt::format("--markers {}: the pattern needs a capture group for the step number, e.g. "
                      "regex:'step (\\d+)'",
                      spec));
    }
  } else {
    throw InputError(fmt::format(
        "--markers {}: unknown marker pattern; valid: megatron, torchtitan, regex:PATTERN", spec));
  }
}

std::optional<std::pair<int64_t, double>> LinePattern::match(const std::string& line) const {
  int64_t step = 0;
  if (kind_ == "megatron") {
    if (line.find("iteration") == std::string::npos) return std::nullopt;
    if (const auto hit = match_megatron(line, "elapsed time per iteration (ms):")) {
      if (parse_int64(std::string(hit->first), step)) return std::make_pair(step, parse_ms(hit->second));
    }
    if (const auto hit = match_megatron(line, "train_step_timing in s:")) {  // NeMo reports seconds
      if (parse_int64(std::string(hit->first), step))
        return std::make_pair(step, parse_ms(hit->second) * 1000.0);
    }
    return std::nullopt;
  }
  if (kind_ == "torchtitan") {
    if (line.find("step") == std::string::npos) return std::nullopt;
    const std::string plain = strip_ansi(line);  // outlives `hit`, a view into it
    const auto hit = match_torchtitan(plain);
    if (hit && parse_int64(std::string(*hit), step)) return std::make_pair(step, 0.0);
    return std::nullopt;
  }
  // A user's regex sees the first kMaxRegexLineBytes of the line (std::regex's recursion, see above).
  const std::string head = line.substr(0, kMaxRegexLineBytes);
  std::smatch match;
  if (!std::regex_search(head, match, patterns_.front())) return std::nullopt;
  if (!parse_int64(match[1].str(), step)) return std::nullopt;
  const double elapsed_ms = match.size() > 2 && match[2].matched ? parse_ms(match[2].str()) : 0.0;
  return std::make_pair(step, elapsed_ms);
}

MarkerSocket::MarkerSocket(std::string path, SpanAssembler& assembler)
    : path_(std::move(path)), assembler_(assembler) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(address.sun_path)) {
    throw InputError(
        fmt::format("marker socket path '{}' is longer than {} bytes; use a shorter --out directory", path_,
                    sizeof(address.sun_path) - 1));
  }
  std::strcpy(address.sun_path, path_.c_str());
  unlink(path_.c_str());
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw RuntimeFailure(fmt::format("cannot create the marker socket: {}", std::strerror(errno)));
  const int buffer_bytes = 4 << 20;
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string why = std::strerror(errno);
    close(fd_);
    throw InputError(
        fmt::format("cannot create marker socket {}: {}; choose a writable --out directory", path_, why));
  }
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) throw RuntimeFailure("cannot create a pipe for the marker listener");
  thread_ = std::thread([this] { listen(); });
}

MarkerSocket::~MarkerSocket() {
  stop();
  if (fd_ >= 0) close(fd_);
  for (int& end : wake_pipe_) {
    if (end >= 0) close(end);
  }
  unlink(path_.c_str());
}

void MarkerSocket::stop() {
  if (!thread_.joinable()) return;
  const char byte = 'x';
  [[maybe_unused]] ssize_t written = write(wake_pipe_[1], &byte, 1);
  thread_.join();
}

void MarkerSocket::listen() {
  std::vector<char> buffer(65536);
  bool stopping = false;
  while (true) {
    pollfd watch[2] = {{fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (!stopping) {
      if (poll(watch, 2, -1) < 0 && errno != EINTR) return;
      if (watch[1].revents & POLLIN) stopping = true;  // drain what is queued, then leave
    }
    bool drained = false;
    while (true) {
      const ssize_t size = recv(fd_, buffer.data(), buffer.size(), 0);
      if (size < 0) {
        drained = true;
        break;
      }
      const int64_t arrival_ns = core::monotonic_ns();
      ++received_;
      std::istringstream lines(std::string(buffer.data(), static_cast<size_t>(size)));
      for (std::string line; std::getline(lines, line);) {
        if (line.empty()) continue;
        if (auto command = parse_marker_line(line)) {
          assembler_.apply(*command, arrival_ns, "socket");
        } else {
          assembler_.note_rejected();
        }
      }
    }
    if (stopping && drained) return;
  }
}

}  // namespace calo::telemetry
