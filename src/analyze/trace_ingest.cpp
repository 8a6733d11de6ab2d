// Kineto trace ingestion: a hand-rolled single-pass JSON scanner (no DOM; ~memchr speed on strings) that
// keeps only what the breakdown needs. nlohmann's SAX parser was measured slower (docs/BENCHMARKS.md
// "Analysis").
#include "analyze/trace_ingest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>

#include "analyze/breakdown.h"
#include "core/error.h"
#include "store/run_store.h"

namespace calo::analyze {
namespace {

constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
// Most ranks one job may have (distributedInfo); beyond is a malformed trace, not a job.
constexpr int64_t kMaxRanks = 1 << 20;
// Most bytes a gzip trace may inflate to in memory. A 2 MB file of zeros inflates to 2 GB; a larger real
// trace is read uncompressed (mapped, not copied): gunzip it first.
constexpr std::size_t kMaxInflatedBytes = std::size_t{1} << 30;
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
      switch (escape) {
        case 'n':
          scratch.push_back('\n');
          break;
        case 't':
          scratch.push_back('\t');
          break;
        case 'r':
          scratch.push_back('\r');
          break;
        case 'b':
          scratch.push_back('\b');
          break;
        case 'f':
          scratch.push_back('\f');
          break;
        case 'u':
          append_unicode_escape(scratch);
          break;
        default:
          scratch.push_back(escape);
          break;  // \" \\ \/
      }
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

struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
};

// NCCL metadata of a collective (on a kernel's args or on the CPU op that launched it).
struct CollectiveMeta {
  std::string name;                  // "Collective name"
  int64_t in_nelems = 0;             // "In msg nelems"
  int64_t out_nelems = 0;            // "Out msg nelems"
  int32_t group_size = 0;            // "Group size"
  int32_t dtype_bytes = 0;           // size of "dtype"
  std::vector<int32_t> group_ranks;  // "Process Group Ranks" ("[0, 1, 2, 3]"), empty if absent or malformed
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

double message_bytes(KernelCategory category, const CollectiveMeta& meta) {
  double element_bytes = meta.dtype_bytes;
  switch (category) {
    case KernelCategory::kAllGather:
      return static_cast<double>(meta.out_nelems) * element_bytes;
    case KernelCategory::kAllReduce:
    case KernelCategory::kReduceScatter:
    case KernelCategory::kAllToAll:
      return static_cast<double>(meta.in_nelems) * element_bytes;
    default:
      return static_cast<double>(std::max(meta.in_nelems, meta.out_nelems)) * element_bytes;
  }
}

// One GPU activity before lanes and the time origin are known.
struct RawKernel {
  int32_t name_id = 0;
  bool is_memory = false;
  int32_t device = 0;
  int32_t stream = 0;
  int64_t t_begin_ns = 0;  // trace's own ts units (before baseTimeNanoseconds)
  int64_t duration_ns = 0;
  int64_t external_id = kUnset;
  int32_t meta_index = -1;  // index into FileState::kernel_meta, -1 if the kernel carried none
};

struct RawStep {
  int64_t step = 0;
  int64_t t_begin_ns = 0;
  int64_t duration_ns = 0;
};

// Per-file parse state.
struct FileState {
  std::vector<RawKernel> kernels;
  std::vector<RawStep> steps;
  std::vector<CollectiveMeta> kernel_meta;
  std::unordered_map<int64_t, CollectiveMeta> op_meta;  // External id of a CPU op -> its collective
  std::unordered_map<int64_t, TraceOp> aten_ops;        // External id of an aten CPU op -> its inputs
  std::map<int64_t, std::string> device_names;
  int64_t rank = kUnset;
  int64_t world_size = 0;
  int64_t base_ns = 0;
  uint64_t events = 0;
  bool keep_op_shapes = false;  // parse aten ops' inputs (ingest_traces' keep_op_shapes)
};

// Interning of kernel names shared by all files.
struct NameTable {
  std::unordered_map<std::string, int32_t, NameHash, std::equal_to<>> ids;
  std::vector<std::string>* names = nullptr;
  int32_t intern(std::string_view name) {
    auto found = ids.find(name);
    if (found != ids.end()) return found->second;
    auto id = static_cast<int32_t>(names->size());
    names->emplace_back(name);
    ids.emplace(std::string(name), id);
    return id;
  }
};

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

// Parses one event object (cursor just before '{').
void parse_event(Scanner& scan, FileState& state, NameTable& names, std::string& scratch_a,
                 std::string& scratch_b) {
  scan.expect('{');
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
  std::string scratch_key;
  std::string scratch_value;
  if (!scan.consume('}')) {
    do {
      std::string_view key = scan.string(scratch_key);
      scan.expect(':');
      if (key == "ph") {
        ph = scan.string(scratch_a);
        if (ph.data() == scratch_a.data()) ph = "?";
      } else if (key == "cat") {
        cat = scan.string(scratch_b);
        if (cat.data() == scratch_b.data()) cat = "?";
      } else if (key == "name") {
        if (scan.peek() != '"') {
          scan.skip_value();
          continue;
        }
        name = scan.string(scratch_value);
        if (name.data() == scratch_value.data()) {
          name_copy = scratch_value;
          name = name_copy;
        }
      } else if (key == "ts") {
        ts_ns = scan.microseconds_as_ns();
        if (ts_ns < 0) scan.fail("negative ts");
      } else if (key == "dur") {
        dur_ns = scan.microseconds_as_ns();
      } else if (key == "pid") {
        pid = scan.integer(scratch_value);
      } else if (key == "tid") {
        tid = scan.integer(scratch_value);
      } else if (key == "args" && scan.peek() == '{') {
        scan.expect('{');
        if (scan.consume('}')) continue;
        do {
          std::string_view arg = scan.string(scratch_key);
          scan.expect(':');
          if (arg == "device") {
            device = scan.integer(scratch_value);
          } else if (arg == "stream") {
            stream = scan.integer(scratch_value);
          } else if (arg == "External id" || arg == "external id") {
            external_id = scan.integer(scratch_value);
          } else if (arg == "Collective name" && scan.peek() == '"') {
            meta.name = std::string(scan.string(scratch_value));
            has_meta = true;
          } else if (arg == "In msg nelems") {
            meta.in_nelems = std::max<int64_t>(0, scan.integer(scratch_value));
          } else if (arg == "Out msg nelems") {
            meta.out_nelems = std::max<int64_t>(0, scan.integer(scratch_value));
          } else if (arg == "Group size") {
            meta.group_size = static_cast<int32_t>(std::max<int64_t>(0, scan.integer(scratch_value)));
          } else if (arg == "Process Group Ranks" && scan.peek() == '"') {
            meta.group_ranks = parse_group_ranks(scan.string(scratch_value));
          } else if (arg == "dtype" && scan.peek() == '"') {
            meta.dtype_bytes = dtype_size_bytes(scan.string(scratch_value));
          } else if (state.keep_op_shapes && arg == "Input Dims" && scan.peek() == '[') {
            inputs.input_dims = parse_dims(scan, scratch_value);
            has_dims = true;
          } else if (state.keep_op_shapes && arg == "Input type" && scan.peek() == '[') {
            inputs.input_types = parse_strings(scan, scratch_value);
          } else if (state.keep_op_shapes && arg == "Concrete Inputs" && scan.peek() == '[') {
            inputs.concrete_inputs = parse_strings(scan, scratch_value);
          } else {
            scan.skip_value();
          }
        } while (scan.consume(','));
        scan.expect('}');
      } else {
        scan.skip_value();
      }
    } while (scan.consume(','));
    scan.expect('}');
  }
  ++state.events;
  if (ph != "X" || ts_ns == kUnset) return;
  bool is_kernel = cat_is(cat, "kernel", "Kernel");
  bool is_memory = cat_is(cat, "gpu_memcpy", "Memcpy") || cat_is(cat, "gpu_memset", "Memset");
  if (is_kernel || is_memory) {
    RawKernel kernel;
    kernel.name_id = names.intern(name);
    kernel.is_memory = is_memory;
    kernel.device = static_cast<int32_t>(device != kUnset ? device : (pid != kUnset ? pid : 0));
    kernel.stream = static_cast<int32_t>(stream != kUnset ? stream : (tid != kUnset ? tid : 0));
    kernel.t_begin_ns = ts_ns;
    kernel.duration_ns = std::max<int64_t>(0, dur_ns);
    kernel.external_id = external_id;
    if (has_meta) {
      kernel.meta_index = static_cast<int32_t>(state.kernel_meta.size());
      state.kernel_meta.push_back(std::move(meta));
    }
    state.kernels.push_back(kernel);
    return;
  }
  if (has_meta && external_id != kUnset) {
    state.op_meta[external_id] = std::move(meta);
    return;
  }
  if (has_dims && external_id != kUnset && name.starts_with("aten::") && cat_is(cat, "cpu_op", "Operator")) {
    inputs.name = std::string(name);
    state.aten_ops[external_id] = std::move(inputs);
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
    state.steps.push_back({step, ts_ns, std::max<int64_t>(0, dur_ns)});
  }
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

// Raw kernels/steps of all files with their rank and absolute time, before lanes are fixed.
struct PendingFile {
  FileState state;
  int32_t rank = 0;
  std::string source;
};

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

// Fixes lanes, the time origin and categories; appends to `data`.
/// Traces given together are the ranks of one job: each rank once, one world size, every rank inside it.
void require_one_job(const std::vector<PendingFile>& files) {
  std::map<int32_t, const PendingFile*> by_rank;
  const PendingFile* sized = nullptr;
  for (const PendingFile& file : files) {
    auto [other, added] = by_rank.emplace(file.rank, &file);
    if (!added)
      throw InputError(
          fmt::format("calo ingest: {} and {} both hold rank {}{}: traces given together must be the ranks "
                      "of one job, one "
                      "file per rank; give each job's traces separately",
                      other->second->source, file.source, file.rank,
                      file.state.rank != kUnset ? " (distributedInfo.rank)"
                                                : " (no distributedInfo: the position in the list)"));
    const int64_t world = file.state.world_size;
    if (world <= 0) continue;
    if (file.state.rank != kUnset && file.state.rank >= world)
      throw InputError(fmt::format("calo ingest: {} says rank {} of a world of {}; the trace is malformed",
                                   file.source, file.state.rank, world));
    if (sized != nullptr && sized->state.world_size != world)
      throw InputError(
          fmt::format("calo ingest: {} is from a job of {} ranks but {} from one of {} "
                      "(distributedInfo.world_size); give "
                      "each job's traces separately",
                      sized->source, sized->state.world_size, file.source, world));
    sized = &file;
  }
}

void merge_files(std::vector<PendingFile>& files, TraceData& data) {
  KernelClassifier classifier;
  std::vector<int8_t> name_category(data.names.size(), -1);
  std::map<std::pair<int32_t, int32_t>, int32_t> lane_of;  // (rank, device) -> provisional lane
  std::vector<TraceLane> lanes;
  std::map<std::vector<int32_t>, int32_t> group_of;  // rank list -> index into data.groups
  for (std::size_t index = 0; index < data.groups.size(); ++index)
    group_of.emplace(data.groups[index], static_cast<int32_t>(index));
  auto group_index = [&](const std::vector<int32_t>& ranks) {
    auto [found, added] = group_of.emplace(ranks, static_cast<int32_t>(data.groups.size()));
    if (added) data.groups.push_back(ranks);
    return found->second;
  };
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (auto& file : files) {
    for (const auto& kernel : file.state.kernels)
      origin = std::min(origin, file.state.base_ns + kernel.t_begin_ns);
    for (const auto& step : file.state.steps) origin = std::min(origin, file.state.base_ns + step.t_begin_ns);
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  data.origin_unix_ns = origin;
  auto lane_for = [&](const PendingFile& file, int32_t device) {
    auto key = std::make_pair(file.rank, device);
    auto found = lane_of.find(key);
    if (found != lane_of.end()) return found->second;
    TraceLane lane;
    lane.rank = file.rank;
    lane.device = device;
    auto name = file.state.device_names.find(device);
    if (name != file.state.device_names.end()) lane.device_name = name->second;
    lane.source_file = file.source;
    auto index = static_cast<int32_t>(lanes.size());
    lanes.push_back(lane);
    lane_of.emplace(key, index);
    return index;
  };
  std::vector<TraceKernel> kernels;
  std::vector<TraceStep> steps;
  for (auto& file : files) {
    auto& state = file.state;
    std::unordered_map<int64_t, int32_t> op_index;  // External id -> index into data.ops
    for (const auto& raw : state.kernels) {
      const std::string& name = data.names[static_cast<std::size_t>(raw.name_id)];
      const CollectiveMeta* meta = nullptr;
      if (raw.meta_index >= 0) {
        meta = &state.kernel_meta[static_cast<std::size_t>(raw.meta_index)];
      } else if (raw.external_id != kUnset && is_nccl_kernel(name)) {
        auto found = state.op_meta.find(raw.external_id);
        if (found != state.op_meta.end()) meta = &found->second;
      }
      TraceKernel kernel;
      kernel.lane = lane_for(file, raw.device);
      kernel.stream = raw.stream;
      kernel.name_id = raw.name_id;
      auto& cached = name_category[static_cast<std::size_t>(raw.name_id)];
      if (raw.is_memory) {
        kernel.category = KernelCategory::kElementwise;
      } else if (meta != nullptr || is_nccl_kernel(name)) {
        kernel.category = classifier.classify(name, false, meta != nullptr ? meta->name : std::string_view());
      } else {
        if (cached < 0) cached = static_cast<int8_t>(classifier.classify(name, false, {}));
        kernel.category = static_cast<KernelCategory>(cached);
      }
      if (meta != nullptr && is_comm(kernel.category)) {
        kernel.message_bytes = message_bytes(kernel.category, *meta);
        kernel.group_size = meta->group_size;
        kernel.p2p_send = kernel.category == KernelCategory::kSendRecv && meta->name == "send";
        if (!meta->group_ranks.empty() && static_cast<int32_t>(meta->group_ranks.size()) == meta->group_size)
          kernel.group = group_index(meta->group_ranks);
      }
      kernel.t_begin_ns = state.base_ns + raw.t_begin_ns - origin;
      kernel.t_end_ns = kernel.t_begin_ns + raw.duration_ns;
      if (raw.external_id != kUnset && !raw.is_memory) {
        auto linked = op_index.find(raw.external_id);
        if (linked != op_index.end()) {
          kernel.op = linked->second;
        } else if (auto found = state.aten_ops.find(raw.external_id); found != state.aten_ops.end()) {
          kernel.op = static_cast<int32_t>(data.ops.size());
          data.ops.push_back(std::move(found->second));
          op_index.emplace(raw.external_id, kernel.op);
        }
      }
      kernels.push_back(kernel);
    }
    state.aten_ops.clear();
  }
  for (auto& file : files) {
    for (const auto& raw : file.state.steps) {
      int32_t lane = -1;
      for (std::size_t index = 0; index < lanes.size(); ++index) {
        if (lanes[index].rank == file.rank) {
          lane = static_cast<int32_t>(index);
          break;
        }
      }
      if (lane < 0) lane = lane_for(file, 0);
      int64_t begin = file.state.base_ns + raw.t_begin_ns - origin;
      steps.push_back({lane, raw.step, begin, begin + raw.duration_ns});
    }
    data.world_size = std::max(data.world_size, static_cast<int32_t>(file.state.world_size));
    data.events_seen += file.state.events;
  }
  // Renumber lanes by (rank, device).
  std::vector<int32_t> order(lanes.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = static_cast<int32_t>(index);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::make_pair(lanes[static_cast<std::size_t>(a)].rank,
                          lanes[static_cast<std::size_t>(a)].device) <
           std::make_pair(lanes[static_cast<std::size_t>(b)].rank, lanes[static_cast<std::size_t>(b)].device);
  });
  std::vector<int32_t> new_index(lanes.size());
  auto base_lane = static_cast<int32_t>(data.lanes.size());
  for (std::size_t position = 0; position < order.size(); ++position) {
    new_index[static_cast<std::size_t>(order[position])] = base_lane + static_cast<int32_t>(position);
    data.lanes.push_back(lanes[static_cast<std::size_t>(order[position])]);
  }
  for (auto& kernel : kernels) kernel.lane = new_index[static_cast<std::size_t>(kernel.lane)];
  for (auto& step : steps) step.lane = new_index[static_cast<std::size_t>(step.lane)];
  auto by_lane_time = [](const auto& a, const auto& b) {
    return std::make_pair(a.lane, a.t_begin_ns) < std::make_pair(b.lane, b.t_begin_ns);
  };
  std::stable_sort(kernels.begin(), kernels.end(), by_lane_time);
  std::stable_sort(steps.begin(), steps.end(), by_lane_time);
  for (const auto& kernel : kernels) data.end_ns = std::max(data.end_ns, kernel.t_end_ns);
  for (const auto& step : steps) data.end_ns = std::max(data.end_ns, step.t_end_ns);
  data.kernels.insert(data.kernels.end(), kernels.begin(), kernels.end());
  data.steps.insert(data.steps.end(), steps.begin(), steps.end());
}

// Read-only memory map of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw InputError(
          fmt::format("{}: cannot open trace ({}); pass the path of a PyTorch profiler JSON trace",
                      path.string(), std::strerror(errno)));
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      throw InputError(
          fmt::format("{}: not a regular file; pass a PyTorch profiler JSON trace", path.string()));
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ > 0) {
      data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data_ == MAP_FAILED) {
        ::close(fd);
        throw RuntimeFailure(fmt::format("{}: mmap failed: {}", path.string(), std::strerror(errno)));
      }
      ::madvise(data_, size_, MADV_SEQUENTIAL);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_ != nullptr && data_ != MAP_FAILED) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return static_cast<const char*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Whether `data` starts with the gzip magic bytes.
bool is_gzip(const char* data, std::size_t size) {
  return size >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
         static_cast<unsigned char>(data[1]) == 0x8b;
}

/// The inflated size a gzip file's last member states (its ISIZE trailer: the size modulo 2^32), to reserve
/// memory once instead of growing by doubling.
std::size_t gzip_size_hint(const char* data, std::size_t size) {
  if (size < 18) return 0;
  const auto* tail = reinterpret_cast<const unsigned char*>(data + size - 4);
  return std::size_t{tail[0]} | std::size_t{tail[1]} << 8 | std::size_t{tail[2]} << 16 |
         std::size_t{tail[3]} << 24;
}

/// The decompressed contents of gzip data (PyTorch profiler's usual `.json.gz`; concatenated members are
/// joined as gzip(1) does). InputError naming `source` if it is corrupt or truncated.
std::string gunzip(const char* data, std::size_t size, const std::string& source) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK)
    throw RuntimeFailure(fmt::format("{}: zlib could not start ({})", source, stream.msg ? stream.msg : "?"));
  std::string text;
  // Deflate inflates at most ~1032:1, so a trailer that claims more is not trusted with memory.
  text.reserve(std::min({gzip_size_hint(data, size), size * 1032, kMaxInflatedBytes}));
  std::vector<char> chunk(1 << 20);
  const auto* next = reinterpret_cast<const Bytef*>(data);
  std::size_t left = size;
  int status = Z_OK;
  while (true) {
    const auto feed = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    stream.next_in = const_cast<Bytef*>(next);
    stream.avail_in = feed;
    stream.next_out = reinterpret_cast<Bytef*>(chunk.data());
    stream.avail_out = static_cast<uInt>(chunk.size());
    status = inflate(&stream, Z_NO_FLUSH);
    const std::size_t used = feed - stream.avail_in;
    next += used;
    left -= used;
    const std::size_t produced = chunk.size() - stream.avail_out;
    if (text.size() + produced > kMaxInflatedBytes) {
      inflateEnd(&stream);
      throw InputError(
          fmt::format("{}: inflates to more than {} MiB; decompress it (gunzip) and pass the .json, "
                      "which is read from disk instead of memory",
                      source, kMaxInflatedBytes >> 20));
    }
    text.append(chunk.data(), produced);
    if (status == Z_STREAM_END) {
      if (left == 0) break;
      if (left < 2 || static_cast<unsigned char>(next[0]) != 0x1f ||
          static_cast<unsigned char>(next[1]) != 0x8b)
        break;  // trailing bytes that are no gzip member are ignored, as gzip(1) does
      inflateReset(&stream);
      continue;
    }
    if (status != Z_OK) break;  // Z_BUF_ERROR: no progress with input and output room, i.e. truncated data
  }
  const std::string message =
      stream.msg != nullptr ? stream.msg : (status == Z_BUF_ERROR ? "unexpected end of data" : "");
  inflateEnd(&stream);
  if (status != Z_STREAM_END)
    throw InputError(fmt::format("{}: corrupt gzip trace ({}); re-export it from the profiler", source,
                                 message.empty() ? "zlib error " + std::to_string(status) : message));
  return text;
}

}  // namespace

void parse_kineto_json(const char* text, std::size_t size, const std::string& source_name,
                       int32_t default_rank, TraceData& data) {
  NameTable names;
  names.names = &data.names;
  for (std::size_t id = 0; id < data.names.size(); ++id)
    names.ids.emplace(data.names[id], static_cast<int32_t>(id));
  std::vector<PendingFile> files(1);
  files[0].source = source_name;
  std::string inflated;
  if (is_gzip(text, size)) {
    inflated = gunzip(text, size, source_name);
    text = inflated.data();
    size = inflated.size();
  }
  parse_into(text, size, source_name, files[0].state, names);
  files[0].rank = files[0].state.rank != kUnset ? static_cast<int32_t>(files[0].state.rank) : default_rank;
  data.bytes_read += size;
  merge_files(files, data);
}

TraceData ingest_traces(const std::vector<std::filesystem::path>& paths, bool keep_op_shapes) {
  if (paths.empty())
    throw InputError("calo ingest: no trace given; pass one or more PyTorch profiler JSON traces");
  TraceData data;
  NameTable names;
  names.names = &data.names;
  std::vector<PendingFile> files(paths.size());
  for (std::size_t index = 0; index < paths.size(); ++index) {
    const auto& path = paths[index];
    std::string source = path.string();
    MappedFile file(path);
    files[index].source = source;
    files[index].state.keep_op_shapes = keep_op_shapes;
    if (is_gzip(file.data(), file.size())) {
      const std::string text = gunzip(file.data(), file.size(), source);
      parse_into(text.data(), text.size(), source, files[index].state, names);
      data.bytes_read += text.size();
    } else {
      parse_into(file.data(), file.size(), source, files[index].state, names);
      data.bytes_read += file.size();
    }
    auto rank = files[index].state.rank;
    files[index].rank = rank != kUnset ? static_cast<int32_t>(rank) : static_cast<int32_t>(index);
  }
  require_one_job(files);
  merge_files(files, data);
  return data;
}

void write_trace_run(const TraceData& data, store::RunWriter& writer) {
  for (std::size_t lane = 0; lane < data.lanes.size(); ++lane) {
    store::DeviceInfo device;
    device.idx = static_cast<int32_t>(lane);
    device.slot = data.lanes[lane].device;
    device.name = data.lanes[lane].device_name.empty() ? "GPU" : data.lanes[lane].device_name;
    writer.add_device(device);
  }
  for (const auto& kernel : data.kernels) {
    store::Span span;
    span.rank = data.lanes[static_cast<std::size_t>(kernel.lane)].rank;
    span.device_idx = kernel.lane;
    span.kind = store::SpanKind::kKernel;
    span.name = data.names[static_cast<std::size_t>(kernel.name_id)];
    span.category = std::string(to_string(kernel.category));
    span.t_begin_ns = kernel.t_begin_ns;
    span.t_end_ns = kernel.t_end_ns;
    writer.append_span(span);
  }
  for (const auto& step : data.steps) {
    store::Span span;
    span.rank = data.lanes[static_cast<std::size_t>(step.lane)].rank;
    span.device_idx = step.lane;
    span.kind = store::SpanKind::kStep;
    span.name = fmt::format("ProfilerStep#{}", step.step);
    span.category = "step";
    span.t_begin_ns = step.t_begin_ns;
    span.t_end_ns = step.t_end_ns;
    span.step = step.step;
    writer.append_span(span);
  }
  std::vector<KernelInterval> intervals;
  intervals.reserve(data.kernels.size());
  for (const auto& kernel : data.kernels) {
    intervals.push_back({kernel.lane, kernel.category, kernel.t_begin_ns, kernel.t_end_ns,
                         kernel.message_bytes, kernel.group_size});
  }
  auto breakdown = kernel_breakdown(intervals, static_cast<int32_t>(data.lanes.size()));
  for (const auto& lane : breakdown) {
    std::string scope = fmt::format("dev{}", lane.lane);
    for (auto category : kAllKernelCategories) {
      auto slot = static_cast<std::size_t>(category);
      std::string key(to_string(category));
      if (lane.count[slot] == 0) continue;
      writer.add_summary({scope, "kernel_" + key + "_s", lane.busy_s[slot], "s"});
      writer.add_summary({scope, "kernel_" + key + "_count", static_cast<double>(lane.count[slot]), "count"});
      if (!is_comm(category)) continue;
      writer.add_summary({scope, "comm_" + key + "_exposed_s", lane.exposed_s[slot], "s"});
      writer.add_summary({scope, "comm_" + key + "_overlapped_s", lane.overlapped_s[slot], "s"});
      if (lane.algbw_gbps[slot] > 0) {
        writer.add_summary({scope, "comm_" + key + "_algbw_gbps", lane.algbw_gbps[slot], "GB/s"});
        writer.add_summary({scope, "comm_" + key + "_busbw_gbps", lane.busbw_gbps[slot], "GB/s"});
      }
    }
    writer.add_summary({scope, "compute_union_s", lane.compute_union_s, "s"});
    writer.add_summary({scope, "comm_union_s", lane.comm_union_s, "s"});
    writer.add_summary({scope, "comm_exposed_union_s", lane.comm_exposed_union_s, "s"});
    writer.add_summary({scope, "gpu_busy_union_s", lane.gpu_busy_union_s, "s"});
    writer.add_summary({scope, "kernel_window_s", lane.window_s, "s"});
  }
  writer.add_summary({"run", "trace_bytes", static_cast<double>(data.bytes_read), "bytes"});
  writer.add_summary({"run", "trace_events", static_cast<double>(data.events_seen), "count"});
  writer.add_summary({"run", "kernels", static_cast<double>(data.kernels.size()), "count"});
}

}  // namespace calo::analyze
