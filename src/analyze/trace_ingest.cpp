// Kineto trace ingestion: reads the trace files (memory-mapped, or inflated from gzip), has each scanned
// (trace_ingest_parse.cpp), merges them on one time base as the ranks of one job, and writes a run.
#include "analyze/trace_ingest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

#include "analyze/breakdown.h"
#include "analyze/trace_ingest_internal.h"
#include "core/error.h"
#include "store/run_store.h"

namespace calo::analyze {
namespace {

using ingest_detail::CollectiveMeta;
using ingest_detail::FileState;
using ingest_detail::kUnset;
using ingest_detail::NameTable;
using ingest_detail::parse_into;
using ingest_detail::RawKernel;

// Most bytes a gzip trace may inflate to in memory. A 2 MB file of zeros inflates to 2 GB; a larger real
// trace is read uncompressed (mapped, not copied): gunzip it first.
constexpr std::size_t kMaxInflatedBytes = std::size_t{1} << 30;

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

// Raw kernels/steps of all files with their rank and absolute time, before lanes are fixed.
struct PendingFile {
  FileState state;
  int32_t rank = 0;
  std::string source;
};

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

// Fixes lanes, the time origin and categories of parsed files before they join a TraceData: the provisional
// lanes (one per (rank, device), in order of discovery) and the process groups found so far.
class FileMerger {
 public:
  explicit FileMerger(TraceData& data) : data_(data), name_category_(data.names.size(), -1) {
    for (std::size_t index = 0; index < data.groups.size(); ++index)
      group_of_.emplace(data.groups[index], static_cast<int32_t>(index));
  }

  // Sets the time origin: the earliest kernel or step begin of all files (absolute), 0 if they hold none.
  void set_origin(const std::vector<PendingFile>& files) {
    int64_t origin = std::numeric_limits<int64_t>::max();
    for (const auto& file : files) {
      for (const auto& kernel : file.state.kernels)
        origin = std::min(origin, file.state.base_ns + kernel.t_begin_ns);
      for (const auto& step : file.state.steps)
        origin = std::min(origin, file.state.base_ns + step.t_begin_ns);
    }
    if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
    origin_ns_ = origin;
    data_.origin_unix_ns = origin;
  }

  // Appends `file`'s kernels to `kernels` on the merged time base, each classified, with its collective's
  // message and group, and its aten op moved into data.ops.
  void merge_kernels(PendingFile& file, std::vector<TraceKernel>& kernels) {
    auto& state = file.state;
    std::unordered_map<int64_t, int32_t> op_index;  // External id -> index into data.ops
    for (const auto& raw : state.kernels) {
      const std::string& name = data_.names[static_cast<std::size_t>(raw.name_id)];
      const CollectiveMeta* meta = collective_of(state, raw, name);
      TraceKernel kernel;
      kernel.lane = lane_for(file, raw.device);
      kernel.stream = raw.stream;
      kernel.name_id = raw.name_id;
      kernel.category = category_of(raw, name, meta);
      if (meta != nullptr && is_comm(kernel.category)) add_collective(*meta, kernel);
      kernel.t_begin_ns = state.base_ns + raw.t_begin_ns - origin_ns_;
      kernel.t_end_ns = kernel.t_begin_ns + raw.duration_ns;
      if (raw.external_id != kUnset && !raw.is_memory) link_op(state, raw.external_id, op_index, kernel);
      kernels.push_back(kernel);
    }
    state.aten_ops.clear();
  }

  // Appends every file's steps to `steps` (on the first lane of the file's rank, else its device 0) and
  // takes the files' world size and event counts into data.
  void merge_steps(const std::vector<PendingFile>& files, std::vector<TraceStep>& steps) {
    for (const auto& file : files) {
      for (const auto& raw : file.state.steps) {
        int32_t lane = -1;
        for (std::size_t index = 0; index < lanes_.size(); ++index) {
          if (lanes_[index].rank == file.rank) {
            lane = static_cast<int32_t>(index);
            break;
          }
        }
        if (lane < 0) lane = lane_for(file, 0);
        int64_t begin = file.state.base_ns + raw.t_begin_ns - origin_ns_;
        steps.push_back({lane, raw.step, begin, begin + raw.duration_ns});
      }
      data_.world_size = std::max(data_.world_size, static_cast<int32_t>(file.state.world_size));
      data_.events_seen += file.state.events;
    }
  }

  // Appends the lanes to data ordered by (rank, device) and renumbers `kernels` and `steps` to match.
  void renumber_lanes(std::vector<TraceKernel>& kernels, std::vector<TraceStep>& steps) {
    std::vector<int32_t> order(lanes_.size());
    for (std::size_t index = 0; index < order.size(); ++index) order[index] = static_cast<int32_t>(index);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return std::make_pair(lanes_[static_cast<std::size_t>(a)].rank,
                            lanes_[static_cast<std::size_t>(a)].device) <
             std::make_pair(lanes_[static_cast<std::size_t>(b)].rank,
                            lanes_[static_cast<std::size_t>(b)].device);
    });
    std::vector<int32_t> new_index(lanes_.size());
    auto base_lane = static_cast<int32_t>(data_.lanes.size());
    for (std::size_t position = 0; position < order.size(); ++position) {
      new_index[static_cast<std::size_t>(order[position])] = base_lane + static_cast<int32_t>(position);
      data_.lanes.push_back(lanes_[static_cast<std::size_t>(order[position])]);
    }
    for (auto& kernel : kernels) kernel.lane = new_index[static_cast<std::size_t>(kernel.lane)];
    for (auto& step : steps) step.lane = new_index[static_cast<std::size_t>(step.lane)];
  }

 private:
  // The provisional lane of (`file`'s rank, `device`), added on first sight.
  int32_t lane_for(const PendingFile& file, int32_t device) {
    auto key = std::make_pair(file.rank, device);
    auto found = lane_of_.find(key);
    if (found != lane_of_.end()) return found->second;
    TraceLane lane;
    lane.rank = file.rank;
    lane.device = device;
    auto name = file.state.device_names.find(device);
    if (name != file.state.device_names.end()) lane.device_name = name->second;
    lane.source_file = file.source;
    auto index = static_cast<int32_t>(lanes_.size());
    lanes_.push_back(lane);
    lane_of_.emplace(key, index);
    return index;
  }

  // The index into data.groups of the process group `ranks`, added on first sight.
  int32_t group_index(const std::vector<int32_t>& ranks) {
    auto [found, added] = group_of_.emplace(ranks, static_cast<int32_t>(data_.groups.size()));
    if (added) data_.groups.push_back(ranks);
    return found->second;
  }

  // The NCCL metadata of `raw`: its own, else (an NCCL kernel) its launching CPU op's; null if none.
  static const CollectiveMeta* collective_of(const FileState& state, const RawKernel& raw,
                                             const std::string& name) {
    if (raw.meta_index >= 0) return &state.kernel_meta[static_cast<std::size_t>(raw.meta_index)];
    if (raw.external_id != kUnset && is_nccl_kernel(name)) {
      auto found = state.op_meta.find(raw.external_id);
      if (found != state.op_meta.end()) return &found->second;
    }
    return nullptr;
  }

  // The category of `raw`: memcpy/memset are elementwise; plain kernels are classified once per name.
  KernelCategory category_of(const RawKernel& raw, const std::string& name, const CollectiveMeta* meta) {
    auto& cached = name_category_[static_cast<std::size_t>(raw.name_id)];
    if (raw.is_memory) return KernelCategory::kElementwise;
    if (meta != nullptr || is_nccl_kernel(name))
      return classifier_.classify(name, false, meta != nullptr ? meta->name : std::string_view());
    if (cached < 0) cached = static_cast<int8_t>(classifier_.classify(name, false, {}));
    return static_cast<KernelCategory>(cached);
  }

  // Sets a collective kernel's message size, group size, send side and process group from `meta`.
  void add_collective(const CollectiveMeta& meta, TraceKernel& kernel) {
    kernel.message_bytes = message_bytes(kernel.category, meta);
    kernel.group_size = meta.group_size;
    kernel.p2p_send = kernel.category == KernelCategory::kSendRecv && meta.name == "send";
    if (!meta.group_ranks.empty() && static_cast<int32_t>(meta.group_ranks.size()) == meta.group_size)
      kernel.group = group_index(meta.group_ranks);
  }

  // Links `kernel` to the aten op of `external_id`, moving the op into data.ops on its first kernel.
  void link_op(FileState& state, int64_t external_id, std::unordered_map<int64_t, int32_t>& op_index,
               TraceKernel& kernel) {
    auto linked = op_index.find(external_id);
    if (linked != op_index.end()) {
      kernel.op = linked->second;
    } else if (auto found = state.aten_ops.find(external_id); found != state.aten_ops.end()) {
      kernel.op = static_cast<int32_t>(data_.ops.size());
      data_.ops.push_back(std::move(found->second));
      op_index.emplace(external_id, kernel.op);
    }
  }

  TraceData& data_;
  KernelClassifier classifier_;
  std::vector<int8_t> name_category_;                       // per name id: cached category, -1 unknown
  std::map<std::pair<int32_t, int32_t>, int32_t> lane_of_;  // (rank, device) -> provisional lane
  std::vector<TraceLane> lanes_;                            // provisional lanes, in order of discovery
  std::map<std::vector<int32_t>, int32_t> group_of_;        // rank list -> index into data.groups
  int64_t origin_ns_ = 0;                                   // absolute time of t=0
};

// Appends `kernels` and `steps` to `data`, each ordered by (lane, begin), and extends data.end_ns.
void append_in_lane_order(std::vector<TraceKernel>& kernels, std::vector<TraceStep>& steps, TraceData& data) {
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

// Fixes lanes, the time origin and categories of `files`; appends to `data`.
void merge_files(std::vector<PendingFile>& files, TraceData& data) {
  FileMerger merger(data);
  merger.set_origin(files);
  std::vector<TraceKernel> kernels;
  std::vector<TraceStep> steps;
  for (auto& file : files) merger.merge_kernels(file, kernels);
  merger.merge_steps(files, steps);
  merger.renumber_lanes(kernels, steps);
  append_in_lane_order(kernels, steps, data);
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

// A span on `lane` (its rank, and the lane as the device) from t_begin_ns to t_end_ns.
store::Span lane_span(const TraceData& data, int32_t lane, store::SpanKind kind, std::string name,
                      std::string category, int64_t t_begin_ns, int64_t t_end_ns) {
  store::Span span;
  span.rank = data.lanes[static_cast<std::size_t>(lane)].rank;
  span.device_idx = lane;
  span.kind = kind;
  span.name = std::move(name);
  span.category = std::move(category);
  span.t_begin_ns = t_begin_ns;
  span.t_end_ns = t_end_ns;
  return span;
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

std::vector<LaneBreakdown> trace_kernel_breakdown(const TraceData& data) {
  std::vector<KernelInterval> intervals;
  intervals.reserve(data.kernels.size());
  for (const auto& kernel : data.kernels) {
    intervals.push_back({kernel.lane, kernel.category, kernel.t_begin_ns, kernel.t_end_ns,
                         kernel.message_bytes, kernel.group_size});
  }
  return kernel_breakdown(intervals, static_cast<int32_t>(data.lanes.size()));
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
    writer.append_span(lane_span(
        data, kernel.lane, store::SpanKind::kKernel, data.names[static_cast<std::size_t>(kernel.name_id)],
        std::string(to_string(kernel.category)), kernel.t_begin_ns, kernel.t_end_ns));
  }
  for (const auto& step : data.steps) {
    store::Span span =
        lane_span(data, step.lane, store::SpanKind::kStep, fmt::format("ProfilerStep#{}", step.step), "step",
                  step.t_begin_ns, step.t_end_ns);
    span.step = step.step;
    writer.append_span(span);
  }
  auto breakdown = trace_kernel_breakdown(data);
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
