// Damages a real run store on disk, for tests of what commands leave behind when a store fails half-way.
#pragma once

#include <filesystem>
#include <fstream>

namespace calo::testing {

/// Overwrites the second half of a run's database with garbage, so reading its samples fails half-way.
inline void damage_second_half(const std::filesystem::path& run_dir) {
  const std::filesystem::path db = run_dir / "run.db";
  const auto size = std::filesystem::file_size(db);
  std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(size / 2));
  for (auto at = size / 2; at < size; ++at) file.put(static_cast<char>(0x55));
}

}  // namespace calo::testing
