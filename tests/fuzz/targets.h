// Fuzz targets: one function per parser (tests/fuzz/<name>_fuzz.cpp) of untrusted input. Each takes arbitrary
// bytes, runs the parser as the CLI does, and lets only InputError (bad input, exit 2) pass: any other
// exception, crash or sanitizer report is a finding. Built as libFuzzer binaries (CALO_FUZZ) and replayed
// over the committed corpora by fuzz_replay_tests in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace calo::fuzz {

/// A fuzz target: parses `size` bytes at `data`; returns 0 (libFuzzer's convention).
using Target = int (*)(const uint8_t* data, std::size_t size);

/// The input bytes as text (the YAML and line parsers take std::string).
inline std::string text_of(const uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// Model YAML loader: core::parse_yaml then model::parse_model_spec (and its JSON round trip), then the graph
/// of one GPU (so slow or huge graphs are findings too).
int model_yaml(const uint8_t* data, std::size_t size);
/// Cluster YAML loader: core::parse_yaml then sim::parse_cluster (and its JSON round trip), then one
/// simulated step of tiny-dense on two of its GPUs (so clusters that make the simulation slow are findings
/// too).
int cluster_yaml(const uint8_t* data, std::size_t size);
/// Kineto trace ingestion: analyze::parse_kineto_json on JSON or gzip-compressed JSON bytes.
int kineto_trace(const uint8_t* data, std::size_t size);
/// Step markers: every line through telemetry::parse_marker_line into a SpanAssembler, and through the
/// megatron and torchtitan output-line patterns.
int marker_lines(const uint8_t* data, std::size_t size);
/// Campaign (calo sweep) spec: core::parse_yaml, campaign::parse_spec, the grid and each point's arguments.
int campaign_spec(const uint8_t* data, std::size_t size);

}  // namespace calo::fuzz
