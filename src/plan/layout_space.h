// The layout space of a training job: every valid parallel layout for a model on N GPUs at a global batch,
// each checked against the memory model `calo bench` uses (parallel::memory_per_gpu,
// parallel::usable_memory_bytes). One place for layout enumeration and the memory-fit filter: `calo plan`
// searches it, `calo sim` quotes it when it refuses a layout that does not fit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"

namespace calo::plan {

/// What a layout's accounted memory must fit: the usable share of the card (the default: the card less 3 %
/// allocator fragmentation and the 4 GiB runtime reserve) or the whole card (`calo plan --memory-limit card`:
/// layouts that leave the runtime less than it usually needs are ranked too, marked tight).
enum class MemoryLimit { kUsable, kCard };

/// "usable" or "card"; anything else is an InputError naming `what` (a flag) and the two values.
MemoryLimit parse_memory_limit(const std::string& text, const std::string& what = "--memory-limit");

/// Name of a memory limit ("usable", "card").
const char* to_string(MemoryLimit limit);

/// Settings a search keeps to the values given (`calo plan --tp 4 --mbs 1,2 --recompute none ...`); an empty
/// list (or an unset overlap) leaves that setting free.
struct LayoutConstraints {
  std::vector<int> tp, cp, pp, dp, ep, vpp, micro_batch, zero_stage;  ///< allowed sizes
  std::vector<parallel::Schedule> schedule;                           ///< allowed pipeline schedules
  std::vector<parallel::Recompute> recompute;                         ///< allowed recomputation modes
  std::optional<bool> overlap;  ///< true: overlapped layouts only; false: none overlapped
  /// True when `layout` keeps every constraint.
  bool admits(const parallel::Layout& layout) const;
  /// The flag of the first constraint `layout` breaks ("--tp", ..., "--overlap"); empty when it keeps all.
  std::string refusing_flag(const parallel::Layout& layout) const;
  /// True when nothing is constrained.
  bool empty() const;
  /// The constraints as the flags that set them ("--tp 4 --mbs 1,2"), empty when none.
  std::string describe() const;
};

/// What to enumerate: the job (model, GPUs, batch, sequence) and the hardware limits that bound the space.
struct SpaceRequest {
  model::ModelSpec model;          ///< the model
  int gpus = 0;                    ///< world size; every layout has tp * pp * dp == gpus
  int global_batch = 0;            ///< sequences per iteration (fixed: every layout trains the same tokens)
  int seq_length = 0;              ///< tokens per sequence; 0 = the model's default
  int gpus_per_node = 8;           ///< tp never spans nodes (tp <= gpus_per_node)
  double device_memory_bytes = 0;  ///< HBM per GPU; a layout fits when its accounted total <= usable share
  parallel::AttentionImpl attention = parallel::AttentionImpl::kFused;  ///< attention core of every layout
  parallel::Trainer trainer = parallel::Trainer::kDefault;  ///< memory accounting of every layout (--trainer)
  /// Precisions searched (--precision bf16,fp8): each layout once per precision.
  std::vector<parallel::Precision> precisions = {parallel::Precision::kBf16};
  /// --fp8-all-gather on every layout it applies to (parallel::Layout::fp8_all_gather_applies), off
  /// elsewhere.
  bool fp8_all_gather = false;
  MemoryLimit memory_limit = MemoryLimit::kUsable;  ///< what `fits` holds a layout to
  int max_cp = 1;  ///< context-parallel sizes enumerated: powers of two up to max_cp (1 = no cp)
  LayoutConstraints constraints;  ///< settings held to given values; layouts outside are not enumerated
};

/// Sequences this long or longer get context-parallel layouts in the space by default (default_max_cp).
inline constexpr int kLongSequenceTokens = 32768;

/// The largest cp `calo plan` and `calo sim`'s refusal enumerate by default: 16 at sequences of
/// kLongSequenceTokens or more (activations of long sequences outgrow a GPU without cp), else 1.
int default_max_cp(int seq_length);

/// One layout of the space with its memory verdict.
struct Candidate {
  parallel::Layout layout;           ///< resolved layout (parallel::resolve_layout)
  parallel::MemoryBreakdown memory;  ///< accounted memory of the most loaded stage
  bool fits = false;                 ///< memory.total_bytes() <= memory_limit_bytes(device, the limit)
  /// Needs more than the usable share but no more than the card: fits only under MemoryLimit::kCard.
  bool tight = false;
};

/// The enumerated space.
struct LayoutSpace {
  std::vector<Candidate> candidates;  ///< every valid layout, fitting or not
  int invalid = 0;                    ///< combinations that parallel::resolve_layout rejects
  /// Of `invalid`, those skipped by construction: their schedule's rules refuse them
  /// (parallel::broken_schedule_rule), so they were never resolved.
  int invalid_by_construction = 0;
  int excluded = 0;  ///< combinations outside SpaceRequest::constraints (never resolved)
  /// The excluded ones by the flag that excluded them (LayoutConstraints::refusing_flag), in flag order.
  std::vector<std::pair<std::string, int>> excluded_by;
  /// Number of candidates that fit memory.
  int fitting() const;
  /// Number of candidates that are tight (beyond the usable share, within the card).
  int tight() const;
};

/// Usable bytes of a device of `device_bytes` (parallel::usable_memory_bytes).
double usable_memory_bytes(double device_bytes);

/// Bytes a layout may need on a device of `device_bytes` under `limit`: the usable share, or the card.
double memory_limit_bytes(double device_bytes, MemoryLimit limit);

/// True when `memory` fits a device of `device_bytes` under `limit` (kUsable: the rule `calo bench` applies).
bool fits_memory(const parallel::MemoryBreakdown& memory, double device_bytes,
                 MemoryLimit limit = MemoryLimit::kUsable);

/// Enumerates tp (divisors of the heads, <= gpus_per_node), cp (powers of two up to max_cp dividing gpus /
/// tp), pp (dividing gpus / (tp cp)), dp = gpus / (tp cp pp), ep (MoE: divisors of dp and experts), vpp with
/// the interleaved schedule (pp > 1), gpipe and 1f1b, micro-batch (divisors of global_batch / dp), recompute
/// none|selective|full, ZeRO 0|1|2|3 and, without cp, hybrid sharding within a node (ZeRO-3 with
/// S = gpus_per_node / tp when 1 < S < dp divides dp; parameters resharded after forward), overlap off|all.
/// Every combination goes through parallel::resolve_layout; the ones it rejects are counted, not kept. Those
/// whose schedule refuses them (parallel::broken_schedule_rule: a split backward with ZeRO-2/3 or an
/// overlapped gradient reduction, a chunked schedule whose micro-batches are no multiple of pp, ...) are
/// counted invalid by construction without resolving them.
/// Throws InputError when gpus < 1 or global_batch < 1.
LayoutSpace enumerate_layouts(const SpaceRequest& request);

/// Layouts of the space that fit memory, nearest to `layout` first (fewest changed settings, then least
/// memory); at most `limit`. For the refusal message of `calo sim` and the planner's "nearest feasible".
std::vector<Candidate> nearest_fitting(const LayoutSpace& space, const parallel::Layout& layout, int limit);

/// Settings in which `a` and `b` differ (tp, pp, dp, ep, vpp, schedule, mbs, recompute, zero, shard group,
/// reshard after forward, overlap).
int layout_distance(const parallel::Layout& a, const parallel::Layout& b);

/// Flags that reproduce `layout` with `calo sim` / `calo bench` (e.g. "--tp 8 --pp 4 ... --recompute full").
std::string calo_flags(const parallel::Layout& layout);

/// The same layout as Megatron-LM pretrain_gpt.py arguments (--tensor-model-parallel-size ...).
std::string megatron_flags(const parallel::Layout& layout);

/// "N fit(s) the card but not its usable margin: --memory-limit card ranks them"; empty when `tight` is 0.
std::string tight_count_text(int tight);

/// One-line memory breakdown: "123.4 GiB (weights .., gradients .., optimizer .., activations ..)".
std::string describe_memory(const parallel::MemoryBreakdown& memory);

}  // namespace calo::plan
