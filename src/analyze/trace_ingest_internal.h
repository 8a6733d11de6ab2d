// trace_ingest internal header: the per-file parse state that trace_ingest_parse.cpp fills and
// trace_ingest.cpp merges. Not part of the analyze interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analyze/trace_ingest.h"

namespace calo::analyze::ingest_detail {

// An integer field the event did not give.
inline constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();

// NCCL metadata of a collective (on a kernel's args or on the CPU op that launched it).
struct CollectiveMeta {
  std::string name;                  // "Collective name"
  int64_t in_nelems = 0;             // "In msg nelems"
  int64_t out_nelems = 0;            // "Out msg nelems"
  int32_t group_size = 0;            // "Group size"
  int32_t dtype_bytes = 0;           // size of "dtype"
  std::vector<int32_t> group_ranks;  // "Process Group Ranks" ("[0, 1, 2, 3]"), empty if absent or malformed
};

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

struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
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

/// Scans one Kineto JSON text (`size` bytes at `text`, not gzip) into `state`, interning kernel names in
/// `names`; InputError naming `source` where it is malformed (trace_ingest_parse.cpp).
void parse_into(const char* text, std::size_t size, const std::string& source, FileState& state,
                NameTable& names);

}  // namespace calo::analyze::ingest_detail
