// store internal header: what the run writer (run_store.cpp) and reader (run_store_reader.cpp) share.
#pragma once

namespace calo::store::detail {

/// Schema version stored in PRAGMA user_version; bump on incompatible changes (docs/RUN_STORE.md).
/// 2: run.wall_offset_ns is the wall-clock time at t_ns = 0 for every kind (in 1, `record` and `bench` runs
/// wrote the wall-clock time at the host's CLOCK_MONOTONIC zero; RunReader::run() converts those).
inline constexpr int kSchemaVersion = 2;

}  // namespace calo::store::detail
