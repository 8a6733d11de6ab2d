// Kineto trace ingestion: a hand-rolled single-pass JSON scanner (no DOM; ~memchr speed on strings) that
// keeps only what the breakdown needs. nlohmann's SAX parser was measured slower
// (docs/benchmarks/analysis.md).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/trace_ingest_internal.h"
#include "core/error.h"

namespace calo::analyze::ingest_detail {
namespace {

/// The character a one-letter JSON escape stands for (\n, \t, ...; \" \\ \/ stand for themselves).
char unescaped(char escape) {
  constexpr std::string_view kLetters = "ntrbf";
  constexpr std::string_view kCharacters = "\n\t\r\b\f";
  const std::size_t at = kLetters.find(escape);
  return at == std::string_view::npos ? escape : kCharacters[at];
}

// Most ranks one job may have (distributedInfo); beyond is a malformed trace, not a job.
constexpr int64_t kMaxRanks = 1 << 20;
// Largest time a trace may give (ts, dur, baseTimeNanoseconds): 3e18 ns, Unix time in 2065. With ts >= 0 and
// base >= 0, base + ts - origin + dur <= 9e18 < INT64_MAX, so the merge arithmetic cannot overflow.
constexpr int64_t kMaxTraceTimeNs = 3'000'000'000'000'000'000;

// Cursor over one JSON text. Strings without escapes are returned as views into the text.
class Scanner {
 public:
  Scanner(const char* begin, const char* end, const std::string& source)
      : begin_(begin), pos_(begin), end_(end), source_(source) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw InputError(
        fmt::format("{}: malformed JSON at byte {}: {}; pass a PyTorch profiler trace as written "
                    "(torch.profiler export_chrome_trace, JSON or .json.gz)",
                    source_, pos_ - begin_, what));
  }

  void skip_ws() {
    while (pos_ < end_ && (*pos_ == ' ' || *pos_ == '\n' || *pos_ == '\r' || *pos_ == '\t')) ++pos_;
  }
  char peek() {
    skip_ws();
    if (pos_ >= end_) fail("unexpected end of file");
    return *pos_;
  }
  bool at_end() {
    skip_ws();
    return pos_ >= end_;
  }
  void expect(char wanted) {
    if (peek() != wanted) fail(fmt::format("expected '{}' but found '{}'", wanted, *pos_));
    ++pos_;
  }
  bool consume(char wanted) {
    if (peek() != wanted) return false;
    ++pos_;
    return true;
  }

  // Reads a string; returns a view into the text, or into `scratch` when it had escapes.
  std::string_view string(std::string& scratch) {
    expect('"');
    const char* start = pos_;
    const auto* quote =
        static_cast<const char*>(std::memchr(pos_, '"', static_cast<std::size_t>(end_ - pos_)));
    if (quote == nullptr) fail("unterminated string");
    if (std::memchr(pos_, '\\', static_cast<std::size_t>(quote - pos_)) == nullptr) {
      pos_ = quote + 1;
      return {start, static_cast<std::size_t>(quote - start)};
    }
    scratch.clear();
    while (true) {
      if (pos_ >= end_) fail("unterminated string");
      char c = *pos_++;
      if (c == '"') break;
      if (c != '\\') {
        scratch.push_back(c);
        continue;
      }
      if (pos_ >= end_) fail("unterminated escape");
      char escape = *pos_++;
      if (escape == 'u') {
        append_unicode_escape(scratch);
        continue;
      }
      scratch.push_back(unescaped(escape));
    }
    return scratch;
  }

  void skip_string() {
    ++pos_;  // opening quote
    while (true) {
      const auto* quote =
          static_cast<const char*>(std::memchr(pos_, '"', static_cast<std::size_t>(end_ - pos_)));
      if (quote == nullptr) fail("unterminated string");
      const char* back = quote;
      while (back > pos_ && back[-1] == '\\') --back;
      pos_ = quote + 1;
      if (((quote - back) & 1) == 0) return;
    }
  }

  void skip_value() {
    char first = peek();
    if (first == '"') {
      skip_string();
      return;
    }
    if (first == '{' || first == '[') {
      int depth = 0;
      while (pos_ < end_) {
        char c = *pos_;
        if (c == '"') {
          skip_string();
          continue;
        }
        ++pos_;
        if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) return;
        }
      }
      fail("unterminated object or array");
    }
    scalar_token();
  }

  // A number/true/false/null token as text.
  std::string_view scalar_token() {
    skip_ws();
    const char* start = pos_;
    while (pos_ < end_ && *pos_ != ',' && *pos_ != '}' && *pos_ != ']' && *pos_ != ' ' && *pos_ != '\n' &&
           *pos_ != '\r' && *pos_ != '\t') {
      ++pos_;
    }
    if (pos_ == start) fail("expected a value");
    return {start, static_cast<std::size_t>(pos_ - start)};
  }

  // An integer from a number or a numeric string; kUnset for anything else (e.g. pid "Spans").
  int64_t integer(std::string& scratch) {
    std::string_view text = peek() == '"' ? string(scratch) : scalar_token();
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end == text.data()) return kUnset;
    return value;
  }

  // A whole number in [0, max] (plain or quoted), as distributedInfo's rank and world size; fails naming
  // `what` on anything else ("x", -1, 1e30, 2.5), which would otherwise place the trace at the wrong rank.
  int64_t count(std::string& scratch, std::string_view what, int64_t max) {
    std::string_view text = peek() == '"' ? string(scratch) : scalar_token();
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 0 || value > max)
      fail(fmt::format("{} is '{}', not a whole number from 0 to {}", what, text, max));
    return value;
  }

  // Microseconds with an optional fraction ("1700000000123.456") as exact ns, in [-kMaxTraceTimeNs,
  // kMaxTraceTimeNs] (fails beyond: a longer number would overflow int64).
  int64_t microseconds_as_ns() {
    std::string_view text = scalar_token();
    const char* cursor = text.data();
    const char* stop = cursor + text.size();
    bool negative = cursor < stop && *cursor == '-';
    if (negative) ++cursor;
    constexpr int64_t kMaxWholeUs = kMaxTraceTimeNs / 1000;
    int64_t whole = 0;
    const char* digits_begin = cursor;
    while (cursor < stop && *cursor >= '0' && *cursor <= '9') {
      whole = whole * 10 + (*cursor++ - '0');
      if (whole > kMaxWholeUs) fail(fmt::format("time '{}' us is out of range", text));
    }
    if (cursor == digits_begin) fail(fmt::format("expected a number, found '{}'", text));
    int64_t fraction_ns = 0;
    if (cursor < stop && *cursor == '.') {
      ++cursor;
      int64_t scale = 100;
      while (cursor < stop && *cursor >= '0' && *cursor <= '9') {
        fraction_ns += scale * (*cursor++ - '0');
        scale /= 10;
      }
    }
    if (cursor < stop) {  // exponent or other notation: take the slow path
      std::string copy(text);
      const double ns = std::strtod(copy.c_str(), nullptr) * 1000.0;
      if (!(std::fabs(ns) <= static_cast<double>(kMaxTraceTimeNs)))  // also NaN
        fail(fmt::format("time '{}' us is out of range", text));
      return static_cast<int64_t>(ns);
    }
    int64_t ns = whole * 1000 + fraction_ns;
    if (ns > kMaxTraceTimeNs) fail(fmt::format("time '{}' us is out of range", text));
    return negative ? -ns : ns;
  }

  uint64_t offset() const { return static_cast<uint64_t>(pos_ - begin_); }

 private:
  void append_unicode_escape(std::string& out) {
    if (end_ - pos_ < 4) fail("short \\u escape");
    unsigned code = 0;
    auto [ptr, error] = std::from_chars(pos_, pos_ + 4, code, 16);
    if (error != std::errc() || ptr != pos_ + 4) fail("bad \\u escape");
    pos_ += 4;
    if (code < 0x80) {
      out.push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (code >> 6)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {  // BMP; surrogate halves are kept as-is (names never contain them)
      out.push_back(static_cast<char>(0xE0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  const char* begin_;
  const char* pos_;
  const char* end_;
  const std::string& source_;
};

/// The global ranks of a "Process Group Ranks" string such as "[0, 1, 2, 3]"; empty when it is anything else
/// (a malformed list is no placement, not an error: the group size still says how many ranks there are).
std::vector<int32_t> parse_group_ranks(std::string_view text) {
  std::vector<int32_t> ranks;
  std::size_t at = 0;
  auto skip_spaces = [&] {
    while (at < text.size() && text[at] == ' ') ++at;
  };
  skip_spaces();
  if (at >= text.size() || text[at] != '[') return {};
  ++at;
  skip_spaces();
  if (at < text.size() && text[at] == ']') return {};
  while (at < text.size()) {
    skip_spaces();
    int64_t value = 0;
    const std::size_t digits_begin = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9' && value <= INT32_MAX)
      value = value * 10 + (text[at++] - '0');
    if (at == digits_begin || value > INT32_MAX) return {};
    ranks.push_back(static_cast<int32_t>(value));
    skip_spaces();
    if (at < text.size() && text[at] == ',') {
      ++at;
      continue;
    }
    return at + 1 == text.size() && text[at] == ']' ? ranks : std::vector<int32_t>{};
  }
  return {};
}

int32_t dtype_size_bytes(std::string_view dtype) {
  static const std::map<std::string_view, int32_t> sizes = {
      {"Float", 4}, {"float", 4},         {"Double", 8},      {"BFloat16", 2},     {"Half", 2},
      {"Int", 4},   {"Long", 8},          {"Short", 2},       {"Char", 1},         {"Byte", 1},
      {"Bool", 1},  {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}, {"ComplexFloat", 8}, {"UInt32", 4}};
  auto found = sizes.find(dtype);
  return found == sizes.end() ? 0 : found->second;
}

bool cat_is(std::string_view cat, std::string_view lower, std::string_view legacy) {
  return cat == lower || cat == legacy;
}

// "Input Dims": one entry per input; a flat list of integers is a tensor's shape, anything else (a scalar's
// [], a tensor list's nested lists) is kept as an empty shape.
std::vector<std::vector<int64_t>> parse_dims(Scanner& scan, std::string& scratch) {
  std::vector<std::vector<int64_t>> dims;
  scan.expect('[');
  if (scan.consume(']')) return dims;
  do {
    std::vector<int64_t>& shape = dims.emplace_back();
    if (scan.peek() != '[') {
      scan.skip_value();
      continue;
    }
    scan.expect('[');
    if (scan.consume(']')) continue;
    bool flat = true;
    do {
      if (scan.peek() == '[' || scan.peek() == '{' || scan.peek() == '"') {
        scan.skip_value();
        flat = false;
      } else {
        shape.push_back(scan.integer(scratch));
      }
    } while (scan.consume(','));
    scan.expect(']');
    if (!flat) shape.clear();
  } while (scan.consume(','));
  scan.expect(']');
  return dims;
}

// "Input type" / "Concrete Inputs": a list of strings (other values are kept as "").
std::vector<std::string> parse_strings(Scanner& scan, std::string& scratch) {
  std::vector<std::string> values;
  scan.expect('[');
  if (scan.consume(']')) return values;
  do {
    if (scan.peek() == '"') {
      values.emplace_back(scan.string(scratch));
    } else {
      scan.skip_value();
      values.emplace_back();
    }
  } while (scan.consume(','));
  scan.expect(']');
  return values;
}

// The fields of one event that ingestion keeps; views point into the text or into `name_copy`.
struct EventFields {
  std::string_view ph;
  std::string_view cat;
  std::string_view name;
  std::string name_copy;  // only when `name` had escapes and other strings follow
  int64_t pid = kUnset;
  int64_t tid = kUnset;
  int64_t ts_ns = kUnset;
  int64_t dur_ns = 0;
  int64_t device = kUnset;
  int64_t stream = kUnset;
  int64_t external_id = kUnset;
  CollectiveMeta meta;
  bool has_meta = false;
  TraceOp inputs;
  bool has_dims = false;
};

// Reads one member `arg` of an event's "args" (cursor at its value) into `event`; skips the ones not kept.
void read_event_arg(Scanner& scan, std::string_view arg, bool keep_op_shapes, EventFields& event,
                    std::string& scratch_value) {
  if (arg == "device") {
    event.device = scan.integer(scratch_value);
  } else if (arg == "stream") {
    event.stream = scan.integer(scratch_value);
  } else if (arg == "External id" || arg == "external id") {
    event.external_id = scan.integer(scratch_value);
  } else if (arg == "Collective name" && scan.peek() == '"') {
    event.meta.name = std::string(scan.string(scratch_value));
    event.has_meta = true;
  } else if (arg == "In msg nelems") {
    event.meta.in_nelems = std::max<int64_t>(0, scan.integer(scratch_value));
  } else if (arg == "Out msg nelems") {
    event.meta.out_nelems = std::max<int64_t>(0, scan.integer(scratch_value));
  } else if (arg == "Group size") {
    event.meta.group_size = static_cast<int32_t>(std::max<int64_t>(0, scan.integer(scratch_value)));
  } else if (arg == "Process Group Ranks" && scan.peek() == '"') {
    event.meta.group_ranks = parse_group_ranks(scan.string(scratch_value));
  } else if (arg == "dtype" && scan.peek() == '"') {
    event.meta.dtype_bytes = dtype_size_bytes(scan.string(scratch_value));
  } else if (keep_op_shapes && arg == "Input Dims" && scan.peek() == '[') {
    event.inputs.input_dims = parse_dims(scan, scratch_value);
    event.has_dims = true;
  } else if (keep_op_shapes && arg == "Input type" && scan.peek() == '[') {
    event.inputs.input_types = parse_strings(scan, scratch_value);
  } else if (keep_op_shapes && arg == "Concrete Inputs" && scan.peek() == '[') {
    event.inputs.concrete_inputs = parse_strings(scan, scratch_value);
  } else {
    scan.skip_value();
  }
}

// Reads an event's "args" object (cursor just before '{') into `event`.
void read_event_args(Scanner& scan, bool keep_op_shapes, EventFields& event, std::string& scratch_key,
                     std::string& scratch_value) {
  scan.expect('{');
  if (scan.consume('}')) return;
  do {
    std::string_view arg = scan.string(scratch_key);
    scan.expect(':');
    read_event_arg(scan, arg, keep_op_shapes, event, scratch_value);
  } while (scan.consume(','));
  scan.expect('}');
}

// Reads one event object (cursor just before '{') into `event`: its phase, category, name, times, process
// and thread, and its args.
void read_event_fields(Scanner& scan, bool keep_op_shapes, EventFields& event, std::string& scratch_a,
                       std::string& scratch_b) {
  scan.expect('{');
  std::string scratch_key;
  std::string scratch_value;
  if (scan.consume('}')) return;
  do {
    std::string_view key = scan.string(scratch_key);
    scan.expect(':');
    if (key == "ph") {
      event.ph = scan.string(scratch_a);
      if (event.ph.data() == scratch_a.data()) event.ph = "?";
    } else if (key == "cat") {
      event.cat = scan.string(scratch_b);
      if (event.cat.data() == scratch_b.data()) event.cat = "?";
    } else if (key == "name") {
      if (scan.peek() != '"') {
        scan.skip_value();
        continue;
      }
      event.name = scan.string(scratch_value);
      if (event.name.data() == scratch_value.data()) {
        event.name_copy = scratch_value;
        event.name = event.name_copy;
      }
    } else if (key == "ts") {
      event.ts_ns = scan.microseconds_as_ns();
      if (event.ts_ns < 0) scan.fail("negative ts");
    } else if (key == "dur") {
      event.dur_ns = scan.microseconds_as_ns();
    } else if (key == "pid") {
      event.pid = scan.integer(scratch_value);
    } else if (key == "tid") {
      event.tid = scan.integer(scratch_value);
    } else if (key == "args" && scan.peek() == '{') {
      read_event_args(scan, keep_op_shapes, event, scratch_key, scratch_value);
    } else {
      scan.skip_value();
    }
  } while (scan.consume(','));
  scan.expect('}');
}

// Keeps a complete ("X") event in `state`: a GPU kernel or memcpy/memset, a collective's CPU op, an aten op's
// inputs, or a ProfilerStep span; other events only count.
void keep_event(EventFields& event, FileState& state, NameTable& names) {
  const std::string_view name = event.name;
  const std::string_view cat = event.cat;
  bool is_kernel = cat_is(cat, "kernel", "Kernel");
  bool is_memory = cat_is(cat, "gpu_memcpy", "Memcpy") || cat_is(cat, "gpu_memset", "Memset");
  if (is_kernel || is_memory) {
    RawKernel kernel;
    kernel.name_id = names.intern(name);
    kernel.is_memory = is_memory;
    kernel.device =
        static_cast<int32_t>(event.device != kUnset ? event.device : (event.pid != kUnset ? event.pid : 0));
    kernel.stream =
        static_cast<int32_t>(event.stream != kUnset ? event.stream : (event.tid != kUnset ? event.tid : 0));
    kernel.t_begin_ns = event.ts_ns;
    kernel.duration_ns = std::max<int64_t>(0, event.dur_ns);
    kernel.external_id = event.external_id;
    if (event.has_meta) {
      kernel.meta_index = static_cast<int32_t>(state.kernel_meta.size());
      state.kernel_meta.push_back(std::move(event.meta));
    }
    state.kernels.push_back(kernel);
    return;
  }
  const int64_t external_id = event.external_id;
  if (event.has_meta && external_id != kUnset) {
    state.op_meta[external_id] = std::move(event.meta);
    return;
  }
  if (event.has_dims && external_id != kUnset && name.starts_with("aten::") &&
      cat_is(cat, "cpu_op", "Operator")) {
    event.inputs.name = std::string(name);
    state.aten_ops[external_id] = std::move(event.inputs);
    return;
  }
  if (external_id != kUnset && (name.starts_with("nccl:") || name.starts_with("c10d::"))) {
    auto& entry = state.op_meta[external_id];
    if (entry.name.empty()) entry.name = std::string(name);
    return;
  }
  constexpr std::string_view kStepPrefix = "ProfilerStep#";
  if (name.starts_with(kStepPrefix) && !cat_is(cat, "gpu_user_annotation", "gpu_user_annotation")) {
    int64_t step = 0;
    auto digits = name.substr(kStepPrefix.size());
    std::from_chars(digits.data(), digits.data() + digits.size(), step);
    state.steps.push_back({step, event.ts_ns, std::max<int64_t>(0, event.dur_ns)});
  }
}

// Parses one event object (cursor just before '{').
void parse_event(Scanner& scan, FileState& state, NameTable& names, std::string& scratch_a,
                 std::string& scratch_b) {
  EventFields event;
  read_event_fields(scan, state.keep_op_shapes, event, scratch_a, scratch_b);
  ++state.events;
  if (event.ph != "X" || event.ts_ns == kUnset) return;
  keep_event(event, state, names);
}

void parse_distributed_info(Scanner& scan, FileState& state, std::string& scratch) {
  scan.expect('{');
  if (scan.consume('}')) return;
  do {
    std::string_view key = scan.string(scratch);
    scan.expect(':');
    if (key == "rank") {
      state.rank = scan.count(scratch, "distributedInfo.rank", kMaxRanks - 1);
    } else if (key == "world_size") {
      state.world_size = scan.count(scratch, "distributedInfo.world_size", kMaxRanks);
    } else {
      scan.skip_value();
    }
  } while (scan.consume(','));
  scan.expect('}');
}

void parse_device_properties(Scanner& scan, FileState& state, std::string& scratch) {
  scan.expect('[');
  if (scan.consume(']')) return;
  do {
    scan.expect('{');
    int64_t id = kUnset;
    std::string device_name;
    if (!scan.consume('}')) {
      do {
        std::string_view key = scan.string(scratch);
        scan.expect(':');
        if (key == "id") {
          id = scan.integer(scratch);
        } else if (key == "name" && scan.peek() == '"') {
          device_name = std::string(scan.string(scratch));
        } else {
          scan.skip_value();
        }
      } while (scan.consume(','));
      scan.expect('}');
    }
    if (id != kUnset) state.device_names[id] = device_name;
  } while (scan.consume(','));
  scan.expect(']');
}

void parse_events_array(Scanner& scan, FileState& state, NameTable& names) {
  std::string scratch_a;
  std::string scratch_b;
  scan.expect('[');
  if (scan.consume(']')) return;
  do {
    if (scan.peek() == ']') break;  // tolerate a trailing comma (older Kineto versions wrote one)
    parse_event(scan, state, names, scratch_a, scratch_b);
  } while (scan.consume(','));
  scan.expect(']');
}

}  // namespace

void parse_into(const char* text, std::size_t size, const std::string& source, FileState& state,
                NameTable& names) {
  Scanner scan(text, text + size, source);
  std::string scratch;
  if (scan.at_end()) scan.fail("empty file");
  if (scan.peek() == '[') {
    parse_events_array(scan, state, names);
  } else {
    scan.expect('{');
    if (!scan.consume('}')) {
      do {
        std::string_view key = scan.string(scratch);
        scan.expect(':');
        if (key == "traceEvents") {
          parse_events_array(scan, state, names);
        } else if (key == "distributedInfo" && scan.peek() == '{') {
          parse_distributed_info(scan, state, scratch);
        } else if (key == "deviceProperties" && scan.peek() == '[') {
          parse_device_properties(scan, state, scratch);
        } else if (key == "baseTimeNanoseconds") {
          int64_t base = scan.integer(scratch);
          if (base != kUnset && (base < 0 || base > kMaxTraceTimeNs))
            scan.fail(fmt::format("baseTimeNanoseconds {} is out of range", base));
          state.base_ns = base == kUnset ? 0 : base;
        } else {
          scan.skip_value();
        }
      } while (scan.consume(','));
      scan.expect('}');
    }
  }
  if (!scan.at_end()) scan.fail("trailing characters after the trace object");
}

}  // namespace calo::analyze::ingest_detail
