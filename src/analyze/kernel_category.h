// GPU kernel categories (GEMM, attention, ..., AllReduce, ...) and the classifier that assigns them from a
// kernel's name and its NCCL metadata. The pattern table is documented in docs/METRICS.md ("Kernel
// categories").
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace calo::analyze {

/// What a GPU kernel does; the order is the order of report legends.
enum class KernelCategory {
  kGemm,
  kAttention,
  kNorm,
  kElementwise,  ///< pointwise, reductions, copies, memcpy/memset, optimizer
  kOther,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kOtherComm,  ///< broadcast, reduce, gather, scatter, barrier
};

/// Number of KernelCategory values.
inline constexpr int kKernelCategoryCount = 11;

/// All categories in legend order.
inline constexpr std::array<KernelCategory, kKernelCategoryCount> kAllKernelCategories = {
    KernelCategory::kGemm,        KernelCategory::kAttention,     KernelCategory::kNorm,
    KernelCategory::kElementwise, KernelCategory::kOther,         KernelCategory::kAllReduce,
    KernelCategory::kAllGather,   KernelCategory::kReduceScatter, KernelCategory::kAllToAll,
    KernelCategory::kSendRecv,    KernelCategory::kOtherComm};

/// Stable snake_case name: "gemm", "attention", "norm", "elementwise", "other", "all_reduce", "all_gather",
/// "reduce_scatter", "all_to_all", "send_recv", "other_comm".
std::string_view to_string(KernelCategory category);
/// Inverse of to_string; nullopt for an unknown name.
std::optional<KernelCategory> parse_kernel_category(std::string_view name);
/// True for the communication categories (AllReduce .. OtherComm).
bool is_comm(KernelCategory category);

/// Collective kind from a c10d/NCCL collective name as PyTorch records it ("allreduce", "_allgather_base",
/// "reduce_scatter_tensor_coalesced", "alltoall_base", "send", "nccl:all_reduce", ...); nullopt if the name
/// does not say (e.g. "coalesced").
std::optional<KernelCategory> collective_from_name(std::string_view collective_name);

/// Collective kind from an NCCL/RCCL kernel name ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)",
/// "ncclKernel_SendRecv_..."); nullopt if `kernel_name` is not an NCCL kernel or names no known kind.
std::optional<KernelCategory> collective_from_kernel_name(std::string_view kernel_name);

/// True if `kernel_name` is an NCCL/RCCL device kernel (name starts with nccl...Kernel, after "void ").
bool is_nccl_kernel(std::string_view kernel_name);

/// Category of a compute (non-NCCL) kernel by the ordered name-pattern table; never a comm category.
KernelCategory classify_compute_kernel(std::string_view kernel_name);

/// Classifies kernels, caching the result per distinct name (traces repeat few names millions of times).
class KernelClassifier {
 public:
  /// Category of one GPU activity. `is_memory_activity`: a memcpy/memset event (always elementwise).
  /// `collective_name`: NCCL metadata attached to the kernel or to the CPU op that launched it (may be
  /// empty). NCCL kernels: metadata first, then the kernel name, else kOtherComm. Others: the name table.
  KernelCategory classify(std::string_view kernel_name, bool is_memory_activity,
                          std::string_view collective_name);

 private:
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::unordered_map<std::string, KernelCategory, NameHash, std::equal_to<>> compute_cache_;
};

}  // namespace calo::analyze
