// "Did you mean": the flags and subcommands nearest to what a user mistyped, for parser errors.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace calo::cli {

/// Edit distance (insertions, deletions, substitutions) between `a` and `b`.
std::size_t edit_distance(const std::string& a, const std::string& b);

/// Up to three of `known` nearest `given`, all at the smallest distance found (edit distance at most a third of
/// its length, at least 2; `given` a prefix of a name counts as 1).
std::vector<std::string> nearest_names(const std::string& given, const std::vector<std::string>& known);

/// Lines "calo: did you mean ...?" for the command line `args` (argv after the program): an unknown
/// subcommand, or each --flag the subcommand does not have; empty when nothing is near.
std::vector<std::string> parse_suggestions(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace calo::cli
