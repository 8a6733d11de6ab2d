// Per-GPU settings of a simulation as a command line gives them ("RANK=VALUE" entries of --slow-gpu,
// --hot-gpu, --power-cap): parsed and checked here once for calo sim, calo plan partition and calo plan
// power.
#pragma once

#include <string>
#include <vector>

#include "sim/cluster.h"

namespace calo::sim {

/// Parses "RANK=VALUE" entries of --slow-gpu / --hot-gpu into a per-GPU vector of `world` entries (`fallback`
/// elsewhere; empty when no entry); InputError naming `flag` on a bad entry or a rank outside 0..world-1.
std::vector<double> per_gpu_values(const std::vector<std::string>& entries, int world, double fallback,
                                   const std::string& flag);

/// Per-GPU power caps of --power-cap entries: "W" for every GPU, "RANK=W" for one (later entries win); empty
/// when none. InputError naming the entry when W is refused by power_cap_refusal (not above `gpu`'s idle
/// power, or above its power limit).
std::vector<double> power_caps_w(const std::vector<std::string>& entries, int world, const GpuSpec& gpu);

}  // namespace calo::sim
