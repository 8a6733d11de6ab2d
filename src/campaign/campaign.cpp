#include "campaign/campaign.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>
#include <utility>

#include "core/config.h"
#include "core/error.h"
#include "core/shell.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"
#include "parallel/schedule.h"
#include "parallel/validate.h"
#include "plan/layout_space.h"
#include "sim/cluster.h"
#include "sim/simulate.h"

namespace calo::campaign {
namespace {

const std::vector<std::string> kFlagKeys = {"tp",
                                            "cp",
                                            "cp-comm",
                                            "pp",
                                            "dp",
                                            "ep",
                                            "mbs",
                                            "gbs",
                                            "seq",
                                            "zero",
                                            "fsdp-shard-group",
                                            "fsdp-reshard-after-forward",
                                            "recompute",
                                            "schedule",
                                            "vpp",
                                            "overlap",
                                            "overlap-tp",
                                            "overlap-grad",
                                            "overlap-param",
                                            "sequence-parallel",
                                            "attention",
                                            "precision",
                                            "fp8-all-gather",
                                            "pp-scatter-gather",
                                            "power-cap",
                                            "memory-limit"};
const std::vector<std::string> kBoolKeys = {"overlap",       "overlap-tp",        "overlap-grad",
                                            "overlap-param", "sequence-parallel", "pp-scatter-gather",
                                            "fp8-all-gather"};

bool is_bool_key(const std::string& key) {
  return std::find(kBoolKeys.begin(), kBoolKeys.end(), key) != kBoolKeys.end();
}

/// Whether a value is a word (on, full, 1f1b), not a number: names then read "recompute-full", "tp4".
bool is_word(const std::string& value) {
  return value.empty() ||
         !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// A scalar YAML value as text; booleans as "on"/"off".
std::string scalar_text(const nlohmann::json& value, const std::string& where) {
  if (value.is_boolean()) return value.get<bool>() ? "on" : "off";
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  if (value.is_number()) return fmt::format("{}", value.get<double>());  // 10.5 W, as --power-cap 10.5
  if (value.is_string()) return value.get<std::string>();
  throw InputError(fmt::format("{}: expected a number, a word or on/off, got {}; write one scalar value",
                               where, value.dump()));
}

bool flag_on(const std::string& value, const std::string& where) {
  if (value == "on" || value == "true" || value == "yes" || value == "1") return true;
  if (value == "off" || value == "false" || value == "no" || value == "0") return false;
  throw InputError(fmt::format("{}: '{}' is not on/off; write on or off", where, value));
}

double number_value(const std::string& value, const std::string& where) {
  if (const std::optional<double> number = core::parse_finite_number(value)) return *number;
  throw InputError(fmt::format("{}: '{}' is not a number; write e.g. 500", where, value));
}

int int_value(const std::string& value, const std::string& where) {
  try {
    std::size_t used = 0;
    const int number = std::stoi(value, &used);
    if (used == value.size()) return number;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("{}: '{}' is not an integer; write a whole number", where, value));
}

/// Position of a key in known_keys() (the order of a point's name; the YAML parser does not keep key order).
std::size_t key_rank(const std::string& key) {
  const auto& keys = known_keys();
  return static_cast<std::size_t>(std::find(keys.begin(), keys.end(), key) - keys.begin());
}

/// The keys of `object` in known_keys() order.
std::vector<std::string> ordered_keys(const nlohmann::json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, unused] : object.items()) keys.push_back(key);
  std::stable_sort(keys.begin(), keys.end(),
                   [](const std::string& a, const std::string& b) { return key_rank(a) < key_rank(b); });
  return keys;
}

/// Throws InputError naming `where` and the valid values when `value` is no value `key` accepts for any
/// model (a positive integer for sizes, 0-3 for zero, a word of the mode's list, on/off for switches).
void check_value(const std::string& key, const std::string& value, const std::string& where) {
  static const std::map<std::string, std::vector<std::string>> kWords = {
      {parallel::kRecomputeAxis.key, parallel::kRecomputeAxis.words()},
      {parallel::kScheduleAxis.key, parallel::kScheduleAxis.words()},
      {parallel::kCpCommAxis.key, parallel::kCpCommAxis.words()},
      {parallel::kPrecisionAxis.key, parallel::kPrecisionAxis.words()},
      {"zero", {"0", "1", "2", "3"}},
      {"attention", {"fused", "unfused"}},
      {"fsdp-reshard-after-forward", {"on", "off"}},
      {"memory-limit", {"usable", "card"}}};
  if (is_bool_key(key)) {
    flag_on(value, where);
    return;
  }
  const auto words = kWords.find(key);
  if (words != kWords.end()) {
    if (std::find(words->second.begin(), words->second.end(), value) == words->second.end())
      throw InputError(fmt::format("{}: '{}' is not a valid {}; use one of {}", where, value, key,
                                   fmt::join(words->second, ", ")));
    return;
  }
  if (key == "power-cap") {  // watts, as calo sim --power-cap reads them (each point checks the card's range)
    require_input(number_value(value, where) > 0,
                  fmt::format("{}: '{}' is not a valid power-cap; use watts > 0, e.g. 500", where, value));
    return;
  }
  bool positive = false;
  try {
    std::size_t used = 0;
    positive = std::stoi(value, &used) >= 1 && used == value.size();
  } catch (const std::exception&) {
  }
  if (!positive)
    throw InputError(
        fmt::format("{}: '{}' is not a valid {}; use a whole number >= 1, e.g. 2", where, value, key));
}

void check_key(const std::string& key, const std::string& where) {
  const auto& keys = known_keys();
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
  throw InputError(fmt::format("{}: unknown key '{}'; use one of {}", where, key, fmt::join(keys, ", ")));
}

/// Point keys that set a whole-number field of the layout (int_value).
constexpr std::array<std::pair<std::string_view, int parallel::Layout::*>, 10> kIntLayoutKeys{{
    {"tp", &parallel::Layout::tp},
    {"cp", &parallel::Layout::cp},
    {"pp", &parallel::Layout::pp},
    {"ep", &parallel::Layout::ep},
    {"mbs", &parallel::Layout::micro_batch},
    {"gbs", &parallel::Layout::global_batch},
    {"seq", &parallel::Layout::seq_length},
    {"zero", &parallel::Layout::zero_stage},
    {"fsdp-shard-group", &parallel::Layout::fsdp_shard_size},
    {"vpp", &parallel::Layout::virtual_stages},
}};

/// Point keys that turn a feature of the layout on or off (flag_on).
constexpr std::array<std::pair<std::string_view, bool parallel::Layout::*>, 6> kFlagLayoutKeys{{
    {"overlap-tp", &parallel::Layout::overlap_tp_comm},
    {"overlap-grad", &parallel::Layout::overlap_grad_reduce},
    {"overlap-param", &parallel::Layout::overlap_param_gather},
    {"sequence-parallel", &parallel::Layout::sequence_parallel},
    {"pp-scatter-gather", &parallel::Layout::pipeline_scatter_gather},
    {"fp8-all-gather", &parallel::Layout::fp8_all_gather},
}};

/// Sets the field of `layout` that `key` names in `keys` to convert(value, where); false when `key` is not
/// in `keys`.
template <typename Field, std::size_t N, typename Convert>
bool set_layout_field(const std::array<std::pair<std::string_view, Field parallel::Layout::*>, N>& keys,
                      const std::string& key, const std::string& value, const std::string& where,
                      Convert convert, parallel::Layout& layout) {
  for (const auto& [name, field] : keys) {
    if (name != key) continue;
    layout.*field = convert(value, where);
    return true;
  }
  return false;
}

/// The layout a point describes, before validation (the mapping `calo sim`'s layout flags apply).
parallel::Layout point_layout(const Spec& spec, const Point& point, int* gpus) {
  parallel::Layout layout;
  bool overlap_all = false;
  *gpus = spec.gpus;
  bool dp_given = false;
  for (const auto& [key, value] : point.flags) {
    const std::string where = fmt::format("point {} key '{}'", point.name, key);
    if (set_layout_field(kIntLayoutKeys, key, value, where, int_value, layout) ||
        set_layout_field(kFlagLayoutKeys, key, value, where, flag_on, layout))
      continue;
    if (key == "gpus")
      *gpus = int_value(value, where);
    else if (key == "dp")
      layout.dp = int_value(value, where), dp_given = true;
    else if (key == "fsdp-reshard-after-forward")
      layout.reshard_after_forward = value == "on";
    else if (key == "recompute")
      layout.recompute = parallel::parse_recompute(value);
    else if (key == "schedule")
      layout.schedule = parallel::parse_schedule(value);
    else if (key == "cp-comm")
      layout.cp_comm = parallel::parse_cp_comm(value);
    else if (key == parallel::kPrecisionAxis.key)
      layout.precision = parallel::kPrecisionAxis.parse(value, where);
    else if (key == "overlap")
      overlap_all = flag_on(value, where);
    else if (key == "attention")
      layout.attention = parallel::parse_attention(value, where);
  }
  if (overlap_all) {
    layout.overlap_tp_comm = true;
    layout.overlap_grad_reduce = true;
    layout.overlap_param_gather = layout.zero_stage > 0;
  }
  if (*gpus > 0 && !dp_given && layout.tp * layout.cp * layout.pp > 0)
    layout.dp = std::max(1, *gpus / (layout.tp * layout.cp * layout.pp));
  return layout;
}

}  // namespace

std::vector<std::string> axis_keys(const Spec& spec) {
  std::vector<std::string> keys;
  for (const auto& [key, unused] : spec.axes) keys.push_back(key);
  return keys;
}

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> all = {"layout", "gpus"};
    all.insert(all.end(), kFlagKeys.begin(), kFlagKeys.end());
    return all;
  }();
  return keys;
}

namespace {

// A campaign's name becomes a folder under campaigns/: a plain name, never a path ("../../x" wrote outside
// it).
void check_campaign_name(const std::string& name, const std::string& origin) {
  const bool plain =
      !name.empty() && name.size() <= 100 && name.front() != '.' &&
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
          std::string::npos;
  if (!plain) {
    throw InputError(
        fmt::format("{}: name '{}' must be a plain name (letters, digits, '.', '_', '-'; not starting "
                    "with '.'; at most 100 characters): it becomes the folder campaigns/NAME",
                    origin, name));
  }
}

/// Flags as (key, value text), as Spec::fixed holds them.
using FlagList = std::vector<std::pair<std::string, std::string>>;
/// Swept keys with their value texts, as Spec::axes holds them.
using AxisList = std::vector<std::pair<std::string, std::vector<std::string>>>;

/// Throws InputError naming the first top-level key a spec does not have.
void check_top_keys(const nlohmann::json& object, const std::string& origin) {
  static const std::vector<std::string> top = {"name", "model", "layers", "cluster",
                                               "gpus", "steps", "fixed",  "axes"};
  for (const auto& [key, value] : object.items()) {
    if (std::find(top.begin(), top.end(), key) == top.end()) {
      throw InputError(fmt::format("{}: unknown key '{}'; a spec has {}", origin, key, fmt::join(top, ", ")));
    }
  }
}

/// The string under `key` ("" when absent and not `required`); InputError when missing or not a string.
std::string spec_text(const nlohmann::json& object, const char* key, bool required,
                      const std::string& origin) {
  if (!object.contains(key)) {
    if (required)
      throw InputError(
          fmt::format("{}: missing '{}'; add `{}: NAME` (a preset or a YAML path)", origin, key, key));
    return std::string();
  }
  if (!object[key].is_string()) throw InputError(fmt::format("{}: '{}' must be a name or path", origin, key));
  return object[key].get<std::string>();
}

/// The campaign's name: `name:`, else the origin's file stem with odd characters as '-'; checked plain.
std::string campaign_name(const nlohmann::json& object, const std::string& origin) {
  std::string name = spec_text(object, "name", false, origin);
  if (name.empty()) {
    name = std::filesystem::path(origin).stem().string();  // a file name: any odd character becomes '-'
    for (char& character : name)
      if (!std::isalnum(static_cast<unsigned char>(character)) && character != '_' && character != '.')
        character = '-';
    if (name.empty() || name.front() == '.') name = "campaign" + name;
  }
  check_campaign_name(name, origin);
  return name;
}

/// The positive integer under `key`, checked as int64 before narrowing to int (gpus: 4294967297 used to pass
/// as 1).
int positive_int(const nlohmann::json& object, const char* key, const std::string& origin) {
  const nlohmann::json& value = object[key];
  if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
      value.get<int64_t>() > std::numeric_limits<int>::max())
    throw InputError(fmt::format("{}: '{}' must be a positive integer, e.g. `{}: {}`", origin, key, key,
                                 std::string_view(key) == "gpus" ? 32 : 2));
  return static_cast<int>(value.get<int64_t>());
}

/// The `fixed:` flags as (key, value text), each key and value checked.
FlagList parse_fixed(const nlohmann::json& fixed, const std::string& origin) {
  if (!fixed.is_object())
    throw InputError(fmt::format("{}: 'fixed' must map flags to values, e.g. `fixed: {{gbs: 128}}`", origin));
  FlagList flags;
  for (const auto& [key, value] : fixed.items()) {
    const std::string where = fmt::format("{}: fixed.{}", origin, key);
    check_key(key, where);
    if (key == "gpus")
      throw InputError(fmt::format("{}: give gpus at the top level (`gpus: N`) or as an axis", where));
    if (key == "layout")
      throw InputError(fmt::format(
          "{}: 'layout' is an axis (a list of flag mappings); give its flags under fixed", where));
    flags.emplace_back(key, scalar_text(value, where));
    check_value(key, flags.back().second, where);
  }
  return flags;
}

/// One value of a layout axis, a mapping of flags that move together (e.g. {tp: 8, pp: 2}), as "tp=8,pp=2".
std::string layout_bundle(const nlohmann::json& value, const std::string& where) {
  if (!value.is_object() || value.empty())
    throw InputError(fmt::format("{}: each layout is a mapping of flags, e.g. `- {{tp: 8, pp: 2}}`", where));
  std::string bundle;
  for (const std::string& flag : ordered_keys(value)) {
    const nlohmann::json& flag_value = value[flag];
    check_key(flag, where);
    if (flag == "layout")
      throw InputError(fmt::format("{}: a layout cannot hold 'layout'; use tp, pp, dp, ep, ...", where));
    const std::string flag_text = scalar_text(flag_value, where + "." + flag);
    check_value(flag, flag_text, where + "." + flag);
    bundle += (bundle.empty() ? "" : ",") + flag + "=" + flag_text;
  }
  return bundle;
}

/// The value texts of the axis `key`: checked scalars, or layout bundles for the layout axis.
std::vector<std::string> axis_values(const std::string& key, const nlohmann::json& values,
                                     const FlagList& fixed, const std::string& where) {
  check_key(key, where);
  if (!values.is_array() || values.empty())
    throw InputError(fmt::format("{}: give a non-empty list, e.g. `{}: [1, 2]`", where, key));
  for (const auto& [fixed_key, unused] : fixed) {
    if (fixed_key == key)
      throw InputError(fmt::format("{}: '{}' is both fixed and an axis; remove it from fixed", where, key));
  }
  std::vector<std::string> texts;
  for (const auto& value : values) {
    if (key != "layout") {
      texts.push_back(scalar_text(value, where));
      check_value(key, texts.back(), where);
      continue;
    }
    texts.push_back(layout_bundle(value, where));
  }
  return texts;
}

/// The `axes:` keys in known_keys() order, each with its value texts.
AxisList parse_axes(const nlohmann::json& object, const FlagList& fixed, const std::string& origin) {
  if (!object.contains("axes") || !object["axes"].is_object() || object["axes"].empty()) {
    throw InputError(fmt::format(
        "{}: missing 'axes'; add e.g. `axes: {{mbs: [1, 2, 4]}}` (a key to a list of values)", origin));
  }
  AxisList axes;
  for (const std::string& key : ordered_keys(object["axes"])) {
    const std::string where = fmt::format("{}: axes.{}", origin, key);
    axes.emplace_back(key, axis_values(key, object["axes"][key], fixed, where));
  }
  return axes;
}

/// Throws InputError when the grid has more than kMaxGridPoints points, or no point gets a GPU count.
void check_grid(const Spec& spec, const std::string& origin) {
  // Every point is a run: a larger grid is a mistake, and expanding one that a few lines describe (20 axes of
  // 10 values) would exhaust memory.
  double grid_points = 1;
  for (const auto& axis : spec.axes) grid_points *= static_cast<double>(axis.second.size());
  if (grid_points > kMaxGridPoints)
    throw InputError(fmt::format("{}: the axes make {:.0f} points; at most {} (split the sweep)", origin,
                                 grid_points, kMaxGridPoints));
  if (spec.gpus == 0) {
    bool swept = std::any_of(spec.axes.begin(), spec.axes.end(),
                             [](const auto& axis) { return axis.first == "gpus"; });
    if (!swept)
      throw InputError(fmt::format("{}: missing 'gpus'; add `gpus: N` or an axis `gpus: [..]`", origin));
  }
}

// The value `point` gives `key` (null where it gives none).
const std::string* flag_value(const Point& point, const std::string& key) {
  for (const auto& [name, value] : point.flags)
    if (name == key) return &value;
  return nullptr;
}

}  // namespace

Spec parse_spec(const nlohmann::json& object, const std::string& origin) {
  if (!object.is_object())
    throw InputError(fmt::format("{}: a campaign spec is a mapping (model:, cluster:, axes:)", origin));
  Spec spec;
  spec.source = object;
  check_top_keys(object, origin);
  spec.name = campaign_name(object, origin);
  spec.model = spec_text(object, "model", true, origin);
  spec.cluster = spec_text(object, "cluster", true, origin);
  if (object.contains("gpus")) spec.gpus = positive_int(object, "gpus", origin);
  if (object.contains("steps")) spec.steps = positive_int(object, "steps", origin);
  if (object.contains("layers")) spec.layers = positive_int(object, "layers", origin);
  if (spec.steps > sim::kMaxSimSteps)
    throw InputError(fmt::format("{}: 'steps' = {} is beyond the {} one simulation takes; use fewer", origin,
                                 spec.steps, sim::kMaxSimSteps));
  if (object.contains("fixed")) spec.fixed = parse_fixed(object["fixed"], origin);
  spec.axes = parse_axes(object, spec.fixed, origin);
  check_grid(spec, origin);
  return spec;
}

Spec load_spec(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file)
    throw InputError(
        fmt::format("campaign spec '{}' not found; give the path of a YAML spec", path.string()));
  std::stringstream text;
  text << file.rdbuf();
  return parse_spec(core::parse_yaml(text.str(), path.string()), path.string());
}

std::vector<Point> expand_grid(const Spec& spec) {
  std::vector<Point> points(1);
  for (const auto& [key, values] : spec.axes) {
    std::vector<Point> next;
    for (const Point& base : points) {
      for (const std::string& value : values) {
        Point point = base;
        std::string part;
        if (key == "layout") {
          std::stringstream stream(value);
          for (std::string item; std::getline(stream, item, ',');) {
            const std::size_t equals = item.find('=');
            const std::string flag = item.substr(0, equals), flag_value = item.substr(equals + 1);
            point.flags.emplace_back(flag, flag_value);
            part += (part.empty() ? "" : "-") + flag + (is_word(flag_value) ? "-" : "") + flag_value;
          }
        } else {
          point.flags.emplace_back(key, value);
          part = key + (is_word(value) ? "-" : "") + value;
        }
        point.axis_values.emplace_back(key, key == "layout" ? part : value);
        point.name += (point.name.empty() ? "" : "-") + part;
        next.push_back(std::move(point));
      }
    }
    points = std::move(next);
  }
  for (Point& point : points) {
    std::vector<std::pair<std::string, std::string>> flags = spec.fixed;
    flags.insert(flags.end(), point.flags.begin(), point.flags.end());
    point.flags = std::move(flags);
  }
  return points;
}

void validate_points(const Spec& spec, std::vector<Point>& points) {
  model::ModelSpec model = model::load_model(spec.model);
  if (spec.layers > 0) model = model::slice_model(model, spec.layers);
  const sim::ClusterSpec cluster = sim::load_cluster(spec.cluster);
  for (Point& point : points) {
    try {
      int gpus = 0;
      parallel::Layout layout = point_layout(spec, point, &gpus);
      if (gpus > 0 && layout.world_size() != gpus) {
        // The kind first, the point's numbers after ':': reports count skipped points by kind.
        point.skip_reason =
            fmt::format("layout is not the {} GPUs: tp*cp*pp*dp = {}", gpus, layout.world_size());
        continue;
      }
      const bool sp_given = flag_value(point, "sequence-parallel") != nullptr;
      if (!sp_given) layout.sequence_parallel = layout.tp > 1;
      const parallel::Layout resolved = parallel::resolve_layout(model, layout, sp_given);
      if (!sim::supports_precision(cluster.gpu, resolved.precision)) {
        point.skip_reason = fmt::format("precision {}: the {} has no FP8 tensor cores",
                                        parallel::to_string(resolved.precision), cluster.gpu.name);
        continue;
      }
      const parallel::MemoryBreakdown memory = parallel::memory_per_gpu(model, resolved);
      if (const std::string* cap = flag_value(point, "power-cap")) {
        const double cap_w = number_value(*cap, fmt::format("point {} key 'power-cap'", point.name));
        if (const std::string refusal = sim::power_cap_refusal(cluster.gpu, cap_w); !refusal.empty()) {
          point.skip_reason = fmt::format("power-cap {}: {}", *cap, refusal);
          continue;
        }
      }
      const std::string* limit = flag_value(point, "memory-limit");
      const plan::MemoryLimit memory_limit =
          limit == nullptr ? plan::MemoryLimit::kUsable : plan::parse_memory_limit(*limit, "memory-limit");
      if (!plan::fits_memory(memory, cluster.gpu.memory_bytes, memory_limit)) {
        const double card_bytes = cluster.gpu.memory_bytes;
        point.skip_reason = fmt::format(
            "does not fit memory: needs {:.1f} GiB per GPU, {:.1f} GiB usable of a {}{}",
            memory.total_bytes() / 1073741824.0, plan::usable_memory_bytes(card_bytes) / 1073741824.0,
            cluster.gpu.name,
            parallel::is_tight(memory.total_bytes(), card_bytes)
                ? " (tight: " + parallel::card_headroom_text(memory.total_bytes(), card_bytes) + ")"
                : std::string());
      }
    } catch (const InputError& error) {
      point.skip_reason = fmt::format("invalid layout: {}", error.what());
    }
  }
}

void require_runnable(const Spec& spec, const std::vector<Point>& points) {
  if (std::any_of(points.begin(), points.end(), [](const Point& point) { return point.skip_reason.empty(); }))
    return;
  std::map<std::string, int> reasons;
  for (const Point& point : points) ++reasons[point.skip_reason];
  std::string listed;
  for (const auto& [reason, count] : reasons) listed += fmt::format("\n  {} point(s): {}", count, reason);
  throw InputError(
      fmt::format("campaign {}: the spec expands to {} point(s) and none can run; change the axes or fixed "
                  "flags (e.g. add "
                  "recompute: full, a larger zero stage or more GPUs):{}",
                  spec.name, points.size(), listed));
}

std::vector<std::string> point_arguments(const Spec& spec, const Point& point, const std::string& backend,
                                         const std::filesystem::path& run_dir) {
  std::vector<std::string> args;
  if (backend == "sim") {
    args = {"sim",
            "--model",
            spec.model,
            "--cluster",
            spec.cluster,
            "--steps",
            std::to_string(spec.steps),
            "--no-op-spans"};
  } else {
    args = {
        "bench",        "--backend", backend, "--model", spec.model, "--steps", std::to_string(spec.steps),
        "--no-progress"};
  }
  if (spec.layers > 0) {
    args.push_back("--layers");
    args.push_back(std::to_string(spec.layers));
  }
  int gpus = spec.gpus;
  for (const auto& [key, value] : point.flags) {
    if (key == "gpus") {
      gpus = std::stoi(value);
    } else if (is_bool_key(key)) {
      if (key == "sequence-parallel")
        args.push_back(flag_on(value, key) ? "--sequence-parallel" : "--no-sequence-parallel");
      else if (key == "pp-scatter-gather") {
        if (!flag_on(value, key)) args.push_back("--no-pp-scatter-gather");
      } else if (flag_on(value, key))
        args.push_back("--" + key);
    } else {
      args.push_back("--" + key);
      args.push_back(value);
    }
  }
  if (backend == "sim" && gpus > 0) {
    args.push_back("--gpus");
    args.push_back(std::to_string(gpus));
  }
  args.push_back("--json");
  args.push_back("--out");
  args.push_back(run_dir.string());
  return args;
}

std::vector<std::string> point_commands(const Spec& spec, const std::string& backend,
                                        const std::filesystem::path& out_dir, const std::string& calo) {
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  require_runnable(spec, points);
  std::vector<std::string> commands;
  for (const Point& point : points) {
    if (!point.skip_reason.empty()) continue;
    std::string command = core::shell_quote(calo);
    for (const std::string& arg : point_arguments(spec, point, backend, out_dir / point.name))
      command += " " + core::shell_quote(arg);
    const std::string base = core::shell_quote((out_dir / point.name).string());
    commands.push_back(command + " > " + base + ".json 2> " + base + ".log");
  }
  return commands;
}

}  // namespace calo::campaign
