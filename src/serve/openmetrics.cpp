// OpenMetrics exposition of a growing run store: see openmetrics.h.
#include "serve/openmetrics.h"

#include <fmt/format.h>

#include <cmath>

namespace calo::serve {

namespace {

// dcgm-exporter's name for a calo metric, the factor from calo's unit to dcgm's, and whether dcgm counts it.
struct DcgmAlias {
  const char* calo_name;
  const char* dcgm_name;
  double scale;
  const char* help;
};

// Field names and units as in dcgm-exporter's default-counters.csv and DCGM's dcgm_fields.h.
constexpr DcgmAlias kDcgmAliases[] = {
    {"power_avg_w", "DCGM_FI_DEV_POWER_USAGE", 1.0, "Power draw (W), the driver's 1 s average"},
    {"power_instant_w", "DCGM_FI_DEV_POWER_USAGE_INSTANT", 1.0, "Instantaneous power draw (W)"},
    {"energy_j", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e3,
     "Total energy consumption since the driver was loaded (mJ; a counter)"},
    {"temp_gpu_c", "DCGM_FI_DEV_GPU_TEMP", 1.0, "GPU temperature (C)"},
    {"temp_mem_c", "DCGM_FI_DEV_MEMORY_TEMP", 1.0, "Memory temperature (C)"},
    {"clock_sm_mhz", "DCGM_FI_DEV_SM_CLOCK", 1.0, "SM clock frequency (MHz)"},
    {"clock_mem_mhz", "DCGM_FI_DEV_MEM_CLOCK", 1.0, "Memory clock frequency (MHz)"},
    {"util_gpu_pct", "DCGM_FI_DEV_GPU_UTIL", 1.0, "GPU utilization (%)"},
    {"util_mem_pct", "DCGM_FI_DEV_MEM_COPY_UTIL", 1.0, "Memory utilization (%)"},
    {"mem_used_bytes", "DCGM_FI_DEV_FB_USED", 1.0 / (1024.0 * 1024.0), "Framebuffer memory used (MiB)"},
    {"clock_event_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1.0,
     "Current clock event reasons (bitmask)"},
    {"throttle_power_cap_s", "DCGM_FI_DEV_POWER_VIOLATION", 1e6,
     "Throttling duration due to power constraints (us; a counter)"},
    {"throttle_sync_boost_s", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", 1e6,
     "Throttling duration due to sync-boost constraints (us; a counter)"},
};

// One metric family: its samples must be written together (OpenMetrics).
struct Family {
  std::string type;  // gauge | counter | unknown
  std::string help;
  std::vector<std::pair<std::string, double>> samples;  // (rendered label set, value)
};

std::string escape_label_value(const std::string& value) {
  std::string escaped;
  for (const char character : value) {
    if (character == '\\')
      escaped += "\\\\";
    else if (character == '"')
      escaped += "\\\"";
    else if (character == '\n')
      escaped += "\\n";
    else
      escaped += character;
  }
  return escaped;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

// Labels of a device: dcgm-exporter's (gpu, UUID, modelName, pci_bus_id, Hostname) for GPUs; Hostname and
// device="cpu" for the host.
std::string device_labels(const store::DeviceInfo& device, const std::string& host) {
  if (device.kind == store::DeviceKind::kGpu) {
    return fmt::format("gpu=\"{}\",UUID=\"{}\",modelName=\"{}\",pci_bus_id=\"{}\",Hostname=\"{}\"",
                       device.slot, escape_label_value(device.uuid), escape_label_value(device.name),
                       escape_label_value(device.pci_bus), escape_label_value(host));
  }
  return fmt::format("device=\"cpu\",modelName=\"{}\",Hostname=\"{}\"", escape_label_value(device.name),
                     escape_label_value(host));
}

std::string render_families(const std::map<std::string, Family>& families) {
  std::string text;
  for (const auto& [name, family] : families) {
    text += fmt::format("# TYPE {} {}\n# HELP {} {}\n", name, family.type, name, family.help);
    const std::string sample_name = family.type == "counter" ? name + "_total" : name;
    for (const auto& [labels, value] : family.samples) {
      text += fmt::format("{}{{{}}} {}\n", sample_name, labels, format_value(value));
    }
  }
  text += "# EOF\n";
  return text;
}

}  // namespace

double RankSteps::step_rate_hz() const {
  if (recent_ends.size() >= 2) {
    const auto& [first_step, first_end_ns] = recent_ends.front();
    const auto& [last_step_number, last_end_ns] = recent_ends.back();
    if (last_end_ns > first_end_ns && last_step_number > first_step) {
      return static_cast<double>(last_step_number - first_step) /
             (static_cast<double>(last_end_ns - first_end_ns) / 1e9);
    }
  }
  return last_step_time_s > 0 ? 1.0 / last_step_time_s : 0.0;
}

LiveMetrics::LiveMetrics(const std::filesystem::path& run_dir) : reader_(run_dir) {
  host_ = reader_.run().host;
}

std::map<int32_t, RankSteps> LiveMetrics::steps() const {
  std::lock_guard lock(mutex_);
  return ranks_;
}

void LiveMetrics::add_step_span(const store::Span& span) {
  RankSteps& rank = ranks_[span.rank];
  // Output-line markers (megatron, torchtitan, regex) log every N steps: a span covers the steps since the
  // previous one. A socket span is one step, whatever its number.
  int64_t covered = 1;
  if (span.category != "socket" && rank.last_step >= 0 && span.step > rank.last_step) {
    covered = span.step - rank.last_step;
  }
  rank.steps_total += covered;
  rank.last_step = span.step;
  rank.last_category = span.category;
  rank.last_step_time_s =
      static_cast<double>(span.t_end_ns - span.t_begin_ns) / 1e9 / static_cast<double>(covered);
  rank.recent_ends.emplace_back(span.step, span.t_end_ns);
  if (rank.recent_ends.size() > 11) rank.recent_ends.pop_front();
}

void LiveMetrics::refresh() {
  devices_ = reader_.devices();
  for (const auto& metric : reader_.metrics()) metrics_[metric.id] = metric;
  last_sample_rowid_ = reader_.for_each_sample_since(last_sample_rowid_, [&](const store::Sample& sample) {
    latest_[{sample.device_idx, sample.metric_id}] = sample.value;
  });
  last_span_rowid_ = reader_.for_each_span_since(last_span_rowid_, store::SpanKind::kStep,
                                                 [&](const store::Span& span) { add_step_span(span); });
}

std::string LiveMetrics::render() {
  std::lock_guard lock(mutex_);
  refresh();
  std::map<int32_t, const store::DeviceInfo*> device_by_idx;
  for (const auto& device : devices_) device_by_idx[device.idx] = &device;
  std::map<std::string, Family> families;
  for (const auto& [series, value] : latest_) {
    const auto device = device_by_idx.find(series.first);
    const auto metric = metrics_.find(series.second);
    if (device == device_by_idx.end() || metric == metrics_.end()) continue;
    const std::string labels = device_labels(*device->second, host_);
    const store::MetricInfo& info = metric->second;
    const bool is_counter = info.kind == store::MetricKind::kCounter;
    Family& own = families["calo_" + info.name];
    own.type = is_counter ? "counter" : "gauge";
    own.help = fmt::format("calo metric {} ({}; docs/TELEMETRY.md)", info.name, info.unit);
    own.samples.emplace_back(labels, value);
    if (device->second->kind != store::DeviceKind::kGpu) continue;
    for (const auto& alias : kDcgmAliases) {
      if (info.name != alias.calo_name) continue;
      // dcgm-exporter's counters carry no _total suffix, which OpenMetrics requires of type counter: they are
      // typed unknown so Prometheus stores them under dcgm-exporter's exact names.
      Family& dcgm = families[alias.dcgm_name];
      dcgm.type = is_counter ? "unknown" : "gauge";
      dcgm.help = alias.help;
      dcgm.samples.emplace_back(labels, value * alias.scale);
    }
  }
  for (const auto& [rank, steps] : ranks_) {
    std::string labels = fmt::format("Hostname=\"{}\"", escape_label_value(host_));
    if (rank != store::kNone) labels += fmt::format(",rank=\"{}\"", rank);
    const auto add = [&](const std::string& name, const std::string& type, const std::string& help,
                         double value) {
      Family& family = families[name];
      family.type = type;
      family.help = help;
      family.samples.emplace_back(labels, value);
    };
    add("calo_steps", "counter", "Training steps seen (step markers)",
        static_cast<double>(steps.steps_total));
    add("calo_last_step", "gauge", "Number of the latest step seen", static_cast<double>(steps.last_step));
    add("calo_last_step_time_s", "gauge", "Duration of the latest step (s)", steps.last_step_time_s);
    add("calo_step_rate_hz", "gauge", "Steps per second over the latest 10 steps (docs/METRICS.md)",
        steps.step_rate_hz());
  }
  return render_families(families);
}

MetricsEndpoint::MetricsEndpoint(const ListenAddress& address) {
  server_ = std::make_unique<HttpServer>(address, "/metrics", [this] {
    std::lock_guard lock(mutex_);
    return HttpResponse{kOpenMetricsContentType, metrics_ ? metrics_->render() : std::string("# EOF\n")};
  });
}

void MetricsEndpoint::stop() {
  server_->stop();
  std::lock_guard lock(mutex_);
  metrics_.reset();  // the recorder is about to finish the store: no reader connection left open on it
}

void MetricsEndpoint::follow(const std::filesystem::path& run_dir) {
  auto metrics = std::make_unique<LiveMetrics>(run_dir);
  std::lock_guard lock(mutex_);
  metrics_ = std::move(metrics);
}

}  // namespace calo::serve
