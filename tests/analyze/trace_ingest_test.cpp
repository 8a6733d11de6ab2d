#include "analyze/trace_ingest.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../common/scratch.h"
#include "analyze/breakdown.h"
#include "core/error.h"

namespace calo::analyze {
namespace {

const std::filesystem::path kFixtures = std::filesystem::path(CALO_SOURCE_DIR) / "tests" / "fixtures";

std::vector<LaneBreakdown> breakdown_of(const TraceData& data) {
  std::vector<KernelInterval> intervals;
  for (const auto& kernel : data.kernels) {
    intervals.push_back({kernel.lane, kernel.category, kernel.t_begin_ns, kernel.t_end_ns,
                         kernel.message_bytes, kernel.group_size});
  }
  return kernel_breakdown(intervals, static_cast<int32_t>(data.lanes.size()));
}

double us(const LaneBreakdown& lane, KernelCategory category) {
  return lane.busy_s[static_cast<std::size_t>(category)] * 1e6;
}
double exposed_us(const LaneBreakdown& lane, KernelCategory category) {
  return lane.exposed_s[static_cast<std::size_t>(category)] * 1e6;
}
double overlapped_us(const LaneBreakdown& lane, KernelCategory category) {
  return lane.overlapped_s[static_cast<std::size_t>(category)] * 1e6;
}

TEST(KernelCategory, NamesAndMetadata) {
  EXPECT_EQ(classify_compute_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
            KernelCategory::kGemm);
  EXPECT_EQ(classify_compute_kernel("nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNT"), KernelCategory::kGemm);
  EXPECT_EQ(
      classify_compute_kernel("void fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::"
                              "AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64>)"),
      KernelCategory::kAttention);
  EXPECT_EQ(
      classify_compute_kernel("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float>"),
      KernelCategory::kNorm);
  // "NormTwoOps" (gradient clipping) is a reduction, not a norm layer.
  EXPECT_EQ(classify_compute_kernel("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
                                    "at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >"),
            KernelCategory::kElementwise);
  EXPECT_EQ(classify_compute_kernel("triton_poi_fused_add_mul_0"), KernelCategory::kElementwise);
  EXPECT_EQ(classify_compute_kernel("void cub::DeviceRadixSortOnesweepKernel<int>"), KernelCategory::kOther);
  KernelClassifier classifier;
  std::string send_recv = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)";
  EXPECT_EQ(classifier.classify(send_recv, false, ""), KernelCategory::kSendRecv);
  EXPECT_EQ(classifier.classify(send_recv, false, "alltoall_base"), KernelCategory::kAllToAll);
  EXPECT_EQ(classifier.classify(send_recv, false, "all_to_all"), KernelCategory::kAllToAll);
  EXPECT_EQ(classifier.classify("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", false, "coalesced"),
            KernelCategory::kAllGather);
  EXPECT_EQ(
      classifier.classify("ncclDevKernel_Generic_4(ncclDevComm*)", false, "reduce_scatter_tensor_coalesced"),
      KernelCategory::kReduceScatter);
  EXPECT_EQ(classifier.classify("ncclDevKernel_Generic_4(ncclDevComm*)", false, ""),
            KernelCategory::kOtherComm);
  // Metadata never turns a compute kernel into communication.
  EXPECT_EQ(classifier.classify("void at::native::CatArrayBatchedCopy<float>", false, "allgather"),
            KernelCategory::kElementwise);
  EXPECT_EQ(classifier.classify("Memcpy DtoD (Device -> Device)", true, ""), KernelCategory::kElementwise);
  for (auto category : kAllKernelCategories) EXPECT_EQ(parse_kernel_category(to_string(category)), category);
}

TEST(Breakdown, IntervalUnionAndOverlap) {
  auto merged = interval_union({{10, 20}, {15, 30}, {40, 50}, {30, 35}, {60, 60}});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0], std::make_pair(int64_t{10}, int64_t{35}));
  EXPECT_EQ(overlap_with_union(merged, 0, 100), 35);
  EXPECT_EQ(overlap_with_union(merged, 33, 45), 7);
  EXPECT_EQ(overlap_with_union(merged, 35, 40), 0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(KernelCategory::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(KernelCategory::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(KernelCategory::kSendRecv, 4), 1.0);
}

// Numbers below are worked out by hand from tests/fixtures/kineto_rank{0,1}.json (fixture notes:
// docs/REPORTS.md "Fixtures"): every interval is listed in the fixture with its ts/dur in µs.
TEST(TraceIngest, HandCheckedTwoRankFixture) {
  auto data = ingest_traces({kFixtures / "kineto_rank0.json", kFixtures / "kineto_rank1.json"});
  ASSERT_EQ(data.lanes.size(), 2u);
  EXPECT_EQ(data.lanes[0].rank, 0);
  EXPECT_EQ(data.lanes[1].rank, 1);
  EXPECT_EQ(data.lanes[1].device, 1);
  EXPECT_EQ(data.lanes[0].device_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(data.world_size, 2);
  EXPECT_EQ(data.kernels.size(), 19u);  // 15 on rank 0 (14 kernels + 1 memcpy), 4 on rank 1 (3 + memset)
  // Origin: rank 1's ProfilerStep#1 at ts 990 µs is the earliest event.
  EXPECT_EQ(data.origin_unix_ns, 1763800000000000000 + 990'000);
  EXPECT_EQ(data.kernels.front().t_begin_ns, 20'000);  // rank 0 gemm at ts 1010 µs
  ASSERT_EQ(data.steps.size(), 2u);
  EXPECT_EQ(data.steps[0].step, 1);
  EXPECT_EQ(data.steps[0].t_end_ns - data.steps[0].t_begin_ns, 900'000);

  auto lanes = breakdown_of(data);
  const auto& rank0 = lanes[0];
  EXPECT_NEAR(us(rank0, KernelCategory::kGemm), 220.0, 1e-9);  // 100 + 80 (nvjet) + 40 (cutlass)
  EXPECT_NEAR(us(rank0, KernelCategory::kAttention), 50.0, 1e-9);
  EXPECT_NEAR(us(rank0, KernelCategory::kNorm), 10.0, 1e-9);
  EXPECT_NEAR(us(rank0, KernelCategory::kElementwise), 85.5, 1e-9);  // 5.5 add + 5 memcpy + 70 adam + 5 norm2
  EXPECT_NEAR(us(rank0, KernelCategory::kOther), 12.0, 1e-9);        // cub radix sort
  EXPECT_NEAR(us(rank0, KernelCategory::kAllReduce), 80.0, 1e-9);
  EXPECT_NEAR(us(rank0, KernelCategory::kAllToAll), 40.0, 1e-9);  // SendRecv kernel, alltoall_base metadata
  EXPECT_NEAR(us(rank0, KernelCategory::kSendRecv), 30.0, 1e-9);  // metadata via External id 500 ("send")
  EXPECT_NEAR(us(rank0, KernelCategory::kAllGather), 50.0, 1e-9);
  EXPECT_NEAR(us(rank0, KernelCategory::kReduceScatter), 60.0, 1e-9);
  // AllReduce [1100,1180] covered by gemm 10 + flash 50 + layer norm 10 + add 5.5.
  EXPECT_NEAR(overlapped_us(rank0, KernelCategory::kAllReduce), 75.5, 1e-9);
  EXPECT_NEAR(exposed_us(rank0, KernelCategory::kAllReduce), 4.5, 1e-9);
  EXPECT_NEAR(overlapped_us(rank0, KernelCategory::kAllToAll), 20.0, 1e-9);
  EXPECT_NEAR(exposed_us(rank0, KernelCategory::kSendRecv), 25.0, 1e-9);   // memcpy covers 5 of 30
  EXPECT_NEAR(exposed_us(rank0, KernelCategory::kAllGather), 50.0, 1e-9);  // adam starts as it ends
  EXPECT_NEAR(overlapped_us(rank0, KernelCategory::kReduceScatter), 20.0, 1e-9);
  EXPECT_NEAR(rank0.compute_union_s * 1e6, 377.5, 1e-9);
  EXPECT_NEAR(rank0.comm_union_s * 1e6, 260.0, 1e-9);
  EXPECT_NEAR(rank0.comm_exposed_union_s * 1e6, 139.5, 1e-9);
  EXPECT_NEAR(rank0.gpu_busy_union_s * 1e6, 517.0, 1e-9);
  EXPECT_NEAR(rank0.window_s * 1e6, 660.0, 1e-9);
  // Bandwidths: AllReduce 1048576 bf16 = 2 MiB in 80 µs; AllGather 2097152 bf16 out in 50 µs, n = 2.
  EXPECT_NEAR(rank0.algbw_gbps[static_cast<std::size_t>(KernelCategory::kAllReduce)], 26.2144, 1e-9);
  EXPECT_NEAR(rank0.busbw_gbps[static_cast<std::size_t>(KernelCategory::kAllReduce)], 26.2144, 1e-9);
  EXPECT_NEAR(rank0.algbw_gbps[static_cast<std::size_t>(KernelCategory::kAllGather)], 83.88608, 1e-9);
  EXPECT_NEAR(rank0.busbw_gbps[static_cast<std::size_t>(KernelCategory::kAllGather)], 41.94304, 1e-9);
  EXPECT_NEAR(rank0.busbw_gbps[static_cast<std::size_t>(KernelCategory::kAllToAll)], 13.1072, 1e-9);
  EXPECT_NEAR(rank0.algbw_gbps[static_cast<std::size_t>(KernelCategory::kSendRecv)], 1048576 / 30e-6 / 1e9,
              1e-9);

  const auto& rank1 = lanes[1];
  EXPECT_NEAR(us(rank1, KernelCategory::kGemm), 200.0, 1e-9);
  EXPECT_NEAR(us(rank1, KernelCategory::kElementwise), 11.5, 1e-9);  // fill 10 + memset 1.5
  EXPECT_NEAR(overlapped_us(rank1, KernelCategory::kAllReduce), 50.0, 1e-9);
  EXPECT_NEAR(exposed_us(rank1, KernelCategory::kAllReduce), 50.0, 1e-9);
  EXPECT_NEAR(rank1.gpu_busy_union_s * 1e6, 261.5, 1e-9);
  EXPECT_NEAR(rank1.window_s * 1e6, 281.75, 1e-9);
}

TEST(TraceIngest, ErrorsNameTheFileAndTheFix) {
  std::string text = R"({"traceEvents": [ {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": )";
  TraceData data;
  try {
    parse_kineto_json(text.data(), text.size(), "broken.json", 0, data);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("broken.json"), std::string::npos);
  }
  EXPECT_THROW(ingest_traces({kFixtures / "does-not-exist.json"}), InputError);
  EXPECT_THROW(ingest_traces({kFixtures / "trace.json.gz"}), InputError);
}

TEST(TraceIngest, GzipTracesIngestDirectlyAndEqualTheirJson) {
  // PyTorch's profiler writes .json.gz by default: gzip the two-rank fixture and ingest both forms.
  const auto dir = calo::testing::scratch_path("gz");
  std::filesystem::create_directories(dir);
  std::vector<std::filesystem::path> gzipped;
  for (const char* name : {"kineto_rank0.json", "kineto_rank1.json"}) {
    const auto target = dir / (std::string(name) + ".gz");
    const std::string command = "gzip -c " + (kFixtures / name).string() + " > " + target.string();
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    gzipped.push_back(target);
  }
  const TraceData plain = ingest_traces({kFixtures / "kineto_rank0.json", kFixtures / "kineto_rank1.json"});
  const TraceData compressed = ingest_traces(gzipped);
  ASSERT_EQ(compressed.kernels.size(), plain.kernels.size());
  ASSERT_FALSE(plain.kernels.empty());
  for (std::size_t index = 0; index < plain.kernels.size(); ++index) {
    EXPECT_EQ(compressed.kernels[index].t_begin_ns, plain.kernels[index].t_begin_ns);
    EXPECT_EQ(compressed.kernels[index].t_end_ns, plain.kernels[index].t_end_ns);
  }
  EXPECT_EQ(compressed.bytes_read, plain.bytes_read) << "bytes read counts the decompressed JSON";
  // A truncated gzip names the file and the fix.
  const auto truncated = dir / "truncated.json.gz";
  const std::string cut = "head -c 40 " + gzipped[0].string() + " > " + truncated.string();
  ASSERT_EQ(std::system(cut.c_str()), 0);
  try {
    ingest_traces({truncated});
    FAIL() << "a truncated gzip must be refused";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("truncated.json.gz"), std::string::npos) << error.what();
  }
  std::filesystem::remove_all(dir);
}

// Times beyond int64 ns (tests/fuzz/regressions/kineto_trace/ts-overflows-int64.json) overflowed the digit
// loop and then base + ts - origin + dur (undefined behaviour); they are refused, naming the value.
TEST(TraceIngest, TimesOutOfRangeAreBadInput) {
  std::ifstream file(std::string(CALO_SOURCE_DIR) +
                     "/tests/fuzz/regressions/kineto_trace/ts-overflows-int64.json");
  const std::string overflow((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(overflow.empty());
  const std::string event =
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": TS, "dur": 1}]})";
  auto with_ts = [&](const std::string& ts) {
    return event.substr(0, event.find("TS")) + ts + event.substr(event.find("TS") + 2);
  };
  for (const std::string& text : {overflow, with_ts("-5"), with_ts("1e300"), with_ts("-1e300"),
                                  with_ts("NaN"), with_ts("3000000000000001")}) {
    TraceData data;
    try {
      parse_kineto_json(text.data(), text.size(), "t.json", 0, data);
      FAIL() << "accepted " << text;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("t.json"), std::string::npos) << error.what();
    }
  }
  const std::string base = R"({"baseTimeNanoseconds": -1, "traceEvents": []})";
  TraceData data;
  EXPECT_THROW(parse_kineto_json(base.data(), base.size(), "b.json", 0, data), InputError);
  // The largest accepted time still merges exactly (3e18 ns: Unix time in 2065).
  const std::string edge = with_ts("2999999999999999.5");
  TraceData ok;
  parse_kineto_json(edge.data(), edge.size(), "edge.json", 0, ok);
  ASSERT_EQ(ok.kernels.size(), 1u);
  EXPECT_EQ(ok.origin_unix_ns, 2'999'999'999'999'999'500);
  EXPECT_EQ(ok.kernels[0].t_end_ns, 1000);
}

// parse_kineto_json takes gzip bytes too (the fuzzer feeds both forms); concatenated gzip members are one
// trace, as gzip(1) reads them.
TEST(TraceIngest, GzipBytesInMemoryIncludingConcatenatedMembers) {
  const std::string json =
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 2}]})";
  const auto dir = calo::testing::scratch_path("gzm");
  std::filesystem::create_directories(dir);
  const auto half = json.size() / 2;
  {
    std::ofstream(dir / "a") << json.substr(0, half);
    std::ofstream(dir / "b") << json.substr(half);
  }
  const std::string command = "cd " + dir.string() + " && gzip -c a > t.gz && gzip -c b >> t.gz";
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::ifstream file(dir / "t.gz", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  TraceData data;
  parse_kineto_json(bytes.data(), bytes.size(), "t.json.gz", 0, data);
  ASSERT_EQ(data.kernels.size(), 1u);
  EXPECT_EQ(data.kernels[0].t_end_ns - data.kernels[0].t_begin_ns, 2000);
  EXPECT_EQ(data.bytes_read, json.size());
  std::filesystem::remove_all(dir);
}

TEST(TraceIngest, EscapesArrayFormAndTrailingComma) {
  std::string text =
      R"([{"ph": "X", "cat": "kernel", "name": "gemm_\"q\"\u00e9\n\t\r\b\f\/\\", "pid": 0, "tid": 3, "ts": 5, "dur": 2.5},)"
      R"( {"ph": "X", "cat": "Kernel", "name": "elementwise_kernel", "pid": 0, "tid": 3, "ts": 8, "dur": 1e0},])";
  TraceData data;
  parse_kineto_json(text.data(), text.size(), "array.json", 3, data);
  ASSERT_EQ(data.kernels.size(), 2u);
  EXPECT_EQ(data.names[static_cast<std::size_t>(data.kernels[0].name_id)], "gemm_\"q\"\xc3\xa9\n\t\r\b\f/\\");
  EXPECT_EQ(data.kernels[0].category, KernelCategory::kGemm);
  EXPECT_EQ(data.kernels[0].t_end_ns - data.kernels[0].t_begin_ns, 2500);
  EXPECT_EQ(data.kernels[1].t_begin_ns, 3000);
  EXPECT_EQ(data.kernels[1].t_end_ns - data.kernels[1].t_begin_ns, 1000);
  EXPECT_EQ(data.lanes[0].rank, 3);
}

// The real multi-GPU trace made by bench/gpu/make_trace.py on the GPU host (committed by the lead).
TEST(TraceIngest, RealMultiGpuTraceHasEveryCollectiveKind) {
  auto directory = kFixtures / "kineto_real";
  if (!std::filesystem::exists(directory)) {
    GTEST_SKIP()
        << "tests/fixtures/kineto_real/ not committed yet: run bench/gpu/make_trace.py on a GPU host";
  }
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  ASSERT_GE(paths.size(), 2u);
  auto data = ingest_traces(paths);
  ASSERT_EQ(data.lanes.size(), paths.size());
  auto lanes = breakdown_of(data);
  for (const auto& lane : lanes) {
    SCOPED_TRACE("lane " + std::to_string(lane.lane));
    for (auto category : {KernelCategory::kGemm, KernelCategory::kElementwise, KernelCategory::kAllReduce,
                          KernelCategory::kAllGather, KernelCategory::kReduceScatter,
                          KernelCategory::kAllToAll, KernelCategory::kSendRecv}) {
      EXPECT_GT(lane.count[static_cast<std::size_t>(category)], 0) << to_string(category);
    }
    double comm_s = 0;
    for (auto category : kAllKernelCategories) {
      auto slot = static_cast<std::size_t>(category);
      if (!is_comm(category)) continue;
      comm_s += lane.busy_s[slot];
      EXPECT_NEAR(lane.exposed_s[slot] + lane.overlapped_s[slot], lane.busy_s[slot], 1e-9);
    }
    EXPECT_LE(lane.comm_union_s, comm_s + 1e-9);
    EXPECT_LE(lane.gpu_busy_union_s, lane.window_s + 1e-9);
    EXPECT_GT(lane.busbw_gbps[static_cast<std::size_t>(KernelCategory::kAllReduce)], 0.0);
  }
  EXPECT_EQ(data.steps.size() % paths.size(), 0u);
}

// Hand-checked against the JSON itself (a dozen lines of Python over traceEvents, independent of calo): per
// rank, the NCCL kernels by their "Collective name" metadata — allreduce, _allgather_base,
// _reduce_scatter_base, all_to_allv (run by NCCL as SendRecv kernels: it is the metadata, not the kernel
// name, that makes them all-to-all), and metadata-less SendRecv kernels (batch_isend_irecv) — with the sum of
// their "dur" in µs; per rank 136 kernels + 8 gpu_memset + 2 gpu_memcpy = 146 GPU activities.
TEST(TraceIngest, RealTraceBreakdownMatchesHandCheckedNumbers) {
  auto directory = kFixtures / "kineto_real";
  if (!std::filesystem::exists(directory / "rank0.json")) {
    GTEST_SKIP() << "tests/fixtures/kineto_real/ not committed: run bench/gpu/make_trace.py on a GPU host";
  }
  auto data = ingest_traces({directory / "rank0.json", directory / "rank1.json"});
  auto lanes = breakdown_of(data);
  ASSERT_EQ(lanes.size(), 2u);
  struct Expected {
    KernelCategory category;
    int count;
    double busy_us[2];  // rank 0, rank 1
  };
  const Expected expected[] = {
      {KernelCategory::kAllReduce, 16, {1270.307, 349.762}},
      {KernelCategory::kAllGather, 2, {772.322, 108.128}},
      {KernelCategory::kReduceScatter, 2, {246.912, 101.824}},
      {KernelCategory::kAllToAll, 2, {532.098, 24.160}},
      {KernelCategory::kSendRecv, 2, {3767.752, 30.944}},
  };
  for (int rank = 0; rank < 2; ++rank) {
    const auto& lane = lanes[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    int total = 0;
    for (auto category : kAllKernelCategories) total += lane.count[static_cast<std::size_t>(category)];
    EXPECT_EQ(total, 146);
    for (const auto& row : expected) {
      const auto slot = static_cast<std::size_t>(row.category);
      EXPECT_EQ(lane.count[slot], row.count) << to_string(row.category);
      EXPECT_NEAR(lane.busy_s[slot] * 1e6, row.busy_us[rank], 0.01) << to_string(row.category);
    }
  }
}

TEST(TraceIngest, RealKernelsLinkToTheAtenOpThatLaunchedThemWithItsShapes) {
  // The 2 x H200 trace (record_shapes=True): every nvjet GEMM kernel was launched by an aten::mm whose inputs
  // are [m,k] x [k,n]; the cuDNN SDPA forward kernels by aten::_cudnn_attention_forward with q [b,h,s,d] and
  // is_causal (its 11th input) True.
  const TraceData data = ingest_traces({kFixtures / "kineto_real" / "rank1.json"}, /*keep_op_shapes=*/true);
  EXPECT_TRUE(ingest_traces({kFixtures / "kineto_real" / "rank1.json"}).ops.empty()) << "only when asked";
  int gemms = 0, attention = 0;
  for (const TraceKernel& kernel : data.kernels) {
    const std::string& name = data.names[static_cast<std::size_t>(kernel.name_id)];
    if (name.starts_with("nvjet_sm90")) {
      ASSERT_GE(kernel.op, 0) << name;
      const TraceOp& op = data.ops[static_cast<std::size_t>(kernel.op)];
      EXPECT_EQ(op.name, "aten::mm");
      ASSERT_EQ(op.input_dims.size(), 2u);
      ASSERT_EQ(op.input_dims[0].size(), 2u);
      EXPECT_EQ(op.input_dims[0][1], op.input_dims[1][0]) << "inner dimensions agree";
      EXPECT_EQ(op.input_types[0], "c10::BFloat16");
      gemms += 1;
    } else if (name.find("sdpa_sm90_flash_fprop") != std::string::npos) {
      ASSERT_GE(kernel.op, 0) << name;
      const TraceOp& op = data.ops[static_cast<std::size_t>(kernel.op)];
      EXPECT_EQ(op.name, "aten::_cudnn_attention_forward");
      EXPECT_EQ(op.input_dims[0], (std::vector<int64_t>{2, 16, 512, 64}));
      ASSERT_GT(op.concrete_inputs.size(), 10u);
      EXPECT_EQ(op.concrete_inputs[10], "True");
      attention += 1;
    } else if (is_comm(kernel.category)) {
      EXPECT_EQ(kernel.op, -1) << "NCCL kernels hang off record_param_comms, not an aten op";
    }
  }
  EXPECT_EQ(gemms, 34);
  EXPECT_EQ(attention, 4);
}

/// `text` with every `from` replaced by `to`, written to a fresh temporary file.
std::filesystem::path rewritten_copy(const std::filesystem::path& source, const std::string& name,
                                     const std::vector<std::pair<std::string, std::string>>& edits) {
  std::ifstream in(source);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : edits) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  }
  const auto path = calo::testing::scratch_path(name + ".json");
  std::ofstream(path) << text;
  return path;
}

TEST(TraceIngest, CollectivesKeepTheRanksOfTheirProcessGroup) {
  // The 2 x H200 trace's record_param_comms carry "Process Group Ranks": "[0, 1]" (and "[]" on barriers).
  const auto data =
      ingest_traces({kFixtures / "kineto_real" / "rank0.json", kFixtures / "kineto_real" / "rank1.json"});
  ASSERT_EQ(data.groups.size(), 1u);
  EXPECT_EQ(data.groups[0], (std::vector<int32_t>{0, 1}));
  int grouped = 0;
  for (const auto& kernel : data.kernels) {
    if (kernel.group < 0) continue;
    ++grouped;
    EXPECT_EQ(kernel.group, 0);
    EXPECT_EQ(kernel.group_size, 2);
  }
  EXPECT_EQ(grouped, 2 * 22)
      << "the 16 all-reduces, 2 all-gathers, 2 reduce-scatters, 2 all-to-alls per rank";
  // Ranks 0 and 8 of a 16-rank job (one rank per node of 8 GPUs) stay as recorded.
  const auto far =
      rewritten_copy(kFixtures / "kineto_real" / "rank0.json", "far-group",
                     {{"\"[0, 1]\"", "\"[0, 8]\""}, {"\"world_size\": 2", "\"world_size\": 16"}});
  const auto far_data = ingest_traces({far});
  ASSERT_EQ(far_data.groups.size(), 1u);
  EXPECT_EQ(far_data.groups[0], (std::vector<int32_t>{0, 8}));
  std::filesystem::remove(far);
}

TEST(TraceIngest, TracesOfDifferentJobsAreRefusedNamingBothFiles) {
  const auto rank0 = kFixtures / "kineto_real" / "rank0.json";
  const auto rank1 = kFixtures / "kineto_real" / "rank1.json";
  auto message_of = [](const std::vector<std::filesystem::path>& paths) {
    try {
      ingest_traces(paths);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  // The same rank twice: two jobs' rank-0 traces (here literally the same file).
  std::string message = message_of({rank0, rank0});
  EXPECT_NE(message.find("both hold rank 0 (distributedInfo.rank)"), std::string::npos) << message;
  EXPECT_NE(message.find("one file per rank"), std::string::npos) << message;
  // Rank 1 of a 4-rank job beside rank 0 of a 2-rank job.
  const auto other_job = rewritten_copy(rank1, "other-job", {{"\"world_size\": 2", "\"world_size\": 4"}});
  message = message_of({rank0, other_job});
  EXPECT_NE(message.find("a job of 2 ranks but " + other_job.string() + " from one of 4"), std::string::npos)
      << message;
  // A rank outside its world.
  const auto outside = rewritten_copy(rank1, "outside", {{"\"rank\": 1,", "\"rank\": 5,"}});
  message = message_of({rank0, outside});
  EXPECT_NE(message.find("rank 5 of a world of 2"), std::string::npos) << message;
  for (const auto& path : {other_job, outside}) std::filesystem::remove(path);
  EXPECT_EQ(ingest_traces({rank0, rank1}).lanes.size(), 2u);  // the real pair still reads
}

}  // namespace
}  // namespace calo::analyze
