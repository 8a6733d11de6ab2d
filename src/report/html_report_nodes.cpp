// How the HTML run report names devices, ranks and nodes, so that a merged run of several nodes (calo merge)
// reads like one job on N nodes: every series, verdict and straggler line says which node, and a table lists
// the nodes (host, the run each came from, its devices and ranks, its clock shift).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "report/html_report_internal.h"
#include "report/svg_chart.h"

namespace calo::report {
namespace {

/// The host of each node of a merged run (config "merged_from"), or of none.
std::map<int32_t, std::string> node_hosts(const analyze::RunAnalysis& run) {
  std::map<int32_t, std::string> hosts;
  const nlohmann::json config = nlohmann::json::parse(run.run.config_json, nullptr, false);
  if (!config.is_object() || !config.contains("merged_from") || !config["merged_from"].is_array())
    return hosts;
  for (const auto& source : config["merged_from"]) {
    if (source.is_object() && source.value("node", -1) >= 0)
      hosts[source.value("node", -1)] = source.value("host", std::string());
  }
  return hosts;
}

}  // namespace

bool multi_node(const analyze::RunAnalysis& run) {
  return std::any_of(run.devices.begin(), run.devices.end(),
                     [](const store::DeviceInfo& device) { return device.node > 0; });
}

std::string device_label(const analyze::RunAnalysis& run, const store::DeviceInfo& device) {
  if (device.kind ==
      store::DeviceKind::kCpu) {  // a GPU's label names its node always: no scan of the devices
    const std::string name = device.name.empty() ? "host" : device.name;
    return multi_node(run) ? fmt::format("node {}: {}", device.node, name) : name;
  }
  return fmt::format("GPU {} (n{} s{})", device.idx, device.node, device.slot);  // short: chart legends
}

std::string lane_label(const analyze::RunAnalysis& run, int32_t idx) {
  const bool any_gpu =
      std::any_of(run.devices.begin(), run.devices.end(),
                  [](const store::DeviceInfo& device) { return device.kind == store::DeviceKind::kGpu; });
  if (any_gpu) {
    for (const store::DeviceInfo& device : run.devices) {
      if (device.idx == idx) return device_label(run, device);
    }
    return fmt::format("GPU {}", idx);
  }
  const auto node = run.rank_node.find(idx);
  if (node == run.rank_node.end() || !multi_node(run)) return fmt::format("rank {}", idx);
  const std::map<int32_t, std::string> hosts = node_hosts(run);
  const auto host = hosts.find(node->second);
  return host == hosts.end() || host->second.empty()
             ? fmt::format("rank {} (node {})", idx, node->second)
             : fmt::format("rank {} (node {}, host {})", idx, node->second, host->second);
}

namespace {

/// Per node of `run`: its devices by name with their idx range ("8 × NVIDIA H100 (idx 8–15)").
std::map<int32_t, std::string> node_devices(const analyze::RunAnalysis& run) {
  std::map<int32_t, std::map<std::string, int>> names;
  std::map<int32_t, std::pair<int32_t, int32_t>> range;
  for (const store::DeviceInfo& device : run.devices) {
    ++names[device.node][device.kind == store::DeviceKind::kCpu ? "host CPU" : device.name];
    auto [found, fresh] = range.try_emplace(device.node, device.idx, device.idx);
    found->second.first = std::min(found->second.first, device.idx);
    found->second.second = std::max(found->second.second, device.idx);
  }
  std::map<int32_t, std::string> text;
  for (const auto& [node, counts] : names) {
    for (const auto& [name, count] : counts)
      text[node] += fmt::format("{}{} × {}", text[node].empty() ? "" : ", ", count, name);
    const auto [first, last] = range[node];
    text[node] += first == last ? fmt::format(" (idx {})", first) : fmt::format(" (idx {}–{})", first, last);
  }
  return text;
}

}  // namespace

std::string nodes_table(const analyze::RunAnalysis& run) {
  const nlohmann::json config = nlohmann::json::parse(run.run.config_json, nullptr, false);
  if (!multi_node(run) || !config.is_object() || !config.contains("merged_from") ||
      !config["merged_from"].is_array())
    return "";  // a simulation of several nodes: its devices name their nodes, it has no sources to list
  std::map<int32_t, std::set<int32_t>> ranks;
  for (const auto& [rank, node] : run.rank_node) ranks[node].insert(rank);
  std::map<int32_t, nlohmann::json> sources;
  for (const auto& source : config["merged_from"]) {
    if (source.is_object()) sources[source.value("node", -1)] = source;
  }
  const std::map<int32_t, std::string> devices = node_devices(run);
  std::string out = fmt::format(
      "<p><b>Nodes</b>: one job on {} nodes, merged by calo merge on their wall clocks.</p>\n<table><tr><th>"
      "node</th><th>host</th><th>recorded in</th><th>devices</th><th>ranks</th><th>clock shift</th></tr>\n",
      devices.size());
  for (const auto& [node, device_text] : devices) {
    const nlohmann::json source = sources.count(node) ? sources[node] : nlohmann::json::object();
    std::string rank_list;
    for (int32_t rank : ranks[node]) rank_list += fmt::format("{}{}", rank_list.empty() ? "" : ", ", rank);
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>\n", node,
        escape_html(source.value("host", std::string("–"))),
        escape_html(source.value("run_dir", std::string("–"))), escape_html(device_text),
        rank_list.empty() ? "–" : rank_list,
        source.contains("shift_ns") && source["shift_ns"].is_number()
            ? fmt::format("{:+.3f} ms", source["shift_ns"].get<double>() * 1e-6)
            : std::string("–"));
  }
  return out + "</table>\n";
}

}  // namespace calo::report
