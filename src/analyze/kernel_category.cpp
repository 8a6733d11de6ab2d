// Kernel classification: NCCL metadata, NCCL kernel names, then an ordered name-pattern table.
#include "analyze/kernel_category.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <vector>

namespace calo::analyze {
namespace {

struct NamedCategory {
  std::string_view name;
  KernelCategory category;
};

constexpr std::array<NamedCategory, kKernelCategoryCount> kNames = {{
    {"gemm", KernelCategory::kGemm},
    {"attention", KernelCategory::kAttention},
    {"norm", KernelCategory::kNorm},
    {"elementwise", KernelCategory::kElementwise},
    {"other", KernelCategory::kOther},
    {"all_reduce", KernelCategory::kAllReduce},
    {"all_gather", KernelCategory::kAllGather},
    {"reduce_scatter", KernelCategory::kReduceScatter},
    {"all_to_all", KernelCategory::kAllToAll},
    {"send_recv", KernelCategory::kSendRecv},
    {"other_comm", KernelCategory::kOtherComm},
}};

// Lower-case letters and digits only: "_reduce_scatter_base" -> "reducescatterbase".
std::string squash(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) out.push_back(static_cast<char>(std::tolower(c)));
  }
  return out;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// Ordered pattern table (first match wins), matched case-insensitively against the whole demangled name.
// Kept in sync with docs/METRICS.md "Kernel categories".
struct Pattern {
  KernelCategory category;
  std::regex regex;
};

const std::vector<Pattern>& compute_patterns() {
  static const std::vector<Pattern> patterns = [] {
    auto flags = std::regex::ECMAScript | std::regex::icase | std::regex::optimize;
    std::vector<Pattern> table;
    table.push_back({KernelCategory::kAttention,
                     std::regex(R"(flash_?(fwd|bwd|attn)|flash::|fmha|sdpa|attention|attn_(fwd|bwd)|)"
                                R"(mha_(fwd|bwd)|xformers)",
                                flags)});
    table.push_back({KernelCategory::kGemm,
                     std::regex(R"(gemm|gemv|nvjet|xmma|cutlass_?\d+x?_(tensorop|wmma|simt)|cutlass3x|)"
                                R"(cublas|splitkreduce|triton_tem_|triton_mm|matmul|bmm_|_mm_kernel)",
                                flags)});
    table.push_back({KernelCategory::kNorm,
                     std::regex(R"((layer|rms|group|batch|instance)_?norm|gammabeta|cuapply(layer|rms)norm|)"
                                R"(cucompute(partgradgammabeta|gradinput)|rowwisemoments)",
                                flags)});
    table.push_back(
        {KernelCategory::kElementwise,
         std::regex(R"(elementwise|reduce_kernel|memcpy|memset|copy|fill|catarray|index|gather|)"
                    R"(scatter|softmax|dropout|embedding|triton_(poi|red|per)_|multi_tensor_apply|)"
                    R"(foreach|adam|distribution|philox|transpose|permute|at::native::)",
                    flags)});
    return table;
  }();
  return patterns;
}

}  // namespace

std::string_view to_string(KernelCategory category) {
  for (const auto& entry : kNames) {
    if (entry.category == category) return entry.name;
  }
  return "other";
}

std::optional<KernelCategory> parse_kernel_category(std::string_view name) {
  for (const auto& entry : kNames) {
    if (entry.name == name) return entry.category;
  }
  return std::nullopt;
}

bool is_comm(KernelCategory category) {
  return static_cast<int>(category) >= static_cast<int>(KernelCategory::kAllReduce);
}

std::optional<KernelCategory> collective_from_name(std::string_view collective_name) {
  std::string_view text = collective_name;
  if (starts_with(text, "nccl:")) text.remove_prefix(5);
  if (starts_with(text, "c10d::")) text.remove_prefix(6);
  std::string key = squash(text);
  if (starts_with(key, "allreduce")) return KernelCategory::kAllReduce;
  if (starts_with(key, "allgather")) return KernelCategory::kAllGather;
  if (starts_with(key, "reducescatter")) return KernelCategory::kReduceScatter;
  if (starts_with(key, "alltoall")) return KernelCategory::kAllToAll;
  if (starts_with(key, "send") || starts_with(key, "recv") || starts_with(key, "batchisendirecv") ||
      starts_with(key, "p2p")) {
    return KernelCategory::kSendRecv;
  }
  if (key == "broadcast" || key == "reduce" || key == "gather" || key == "scatter" || key == "barrier" ||
      starts_with(key, "broadcastcoalesced")) {
    return KernelCategory::kOtherComm;
  }
  return std::nullopt;  // "coalesced", "", unknown: let the kernel name decide
}

bool is_nccl_kernel(std::string_view kernel_name) {
  std::string_view text = kernel_name;
  if (starts_with(text, "void ")) text.remove_prefix(5);
  if (!(starts_with(text, "nccl") || starts_with(text, "rccl"))) return false;
  std::string_view head = text.substr(0, std::min<std::size_t>(text.find('_'), text.size()));
  return head.ends_with("Kernel");
}

std::optional<KernelCategory> collective_from_kernel_name(std::string_view kernel_name) {
  if (!is_nccl_kernel(kernel_name)) return std::nullopt;
  std::size_t underscore = kernel_name.find('_');
  std::string_view rest = kernel_name.substr(underscore + 1);
  std::size_t token_end = 0;
  while (token_end < rest.size() && std::isalpha(static_cast<unsigned char>(rest[token_end]))) ++token_end;
  std::string_view token = rest.substr(0, token_end);
  if (token == "AllReduce") return KernelCategory::kAllReduce;
  if (token == "AllGather") return KernelCategory::kAllGather;
  if (token == "ReduceScatter") return KernelCategory::kReduceScatter;
  if (token == "AllToAll" || token == "AlltoAll") return KernelCategory::kAllToAll;
  if (token == "SendRecv" || token == "Send" || token == "Recv") return KernelCategory::kSendRecv;
  if (token == "Broadcast" || token == "Reduce") return KernelCategory::kOtherComm;
  return std::nullopt;
}

KernelCategory classify_compute_kernel(std::string_view kernel_name) {
  std::string name(kernel_name);
  for (const auto& pattern : compute_patterns()) {
    if (std::regex_search(name, pattern.regex)) return pattern.category;
  }
  return KernelCategory::kOther;
}

KernelCategory KernelClassifier::classify(std::string_view kernel_name, bool is_memory_activity,
                                          std::string_view collective_name) {
  if (is_memory_activity) return KernelCategory::kElementwise;
  if (is_nccl_kernel(kernel_name)) {
    if (auto from_metadata = collective_from_name(collective_name)) return *from_metadata;
    if (auto from_name = collective_from_kernel_name(kernel_name)) return *from_name;
    return KernelCategory::kOtherComm;
  }
  auto found = compute_cache_.find(kernel_name);
  if (found != compute_cache_.end()) return found->second;
  KernelCategory category = classify_compute_kernel(kernel_name);
  compute_cache_.emplace(std::string(kernel_name), category);
  return category;
}

}  // namespace calo::analyze
