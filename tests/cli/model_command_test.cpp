// `calo model`: the printed tables (golden), the JSON numbers against hand-computed values, --list, and
// errors. Runs the real binary as a child process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../common/scratch.h"

namespace {

/// Exit status and combined stdout+stderr of `calo ARGS`.
struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run_calo(const std::string& args) {
  const std::string command = std::string(CALO_EXECUTABLE) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot start " + command);
  Outcome outcome;
  std::array<char, 4096> buffer{};
  size_t read = 0;
  while ((read = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    outcome.output.append(buffer.data(), read);
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

// Golden output; every number is hand-checked in tests/model and tests/parallel/memory_test.cpp
// (e.g. 484 KiB = 991,232 / 2 bytes per layer; stage 0 keeps 2 micro-batches x 2 layers = 1.89 MiB).
const char* kTinyGolden =
    R"GOLDEN(# model tiny-dense: 4 layers, hidden 256, FFN 688, 8 heads (4 KV, head dim 32), vocab 1024, seq 128; dense
# SwiGLU, RMSNorm, rotary positions, untied output, no biases
# layout TP2-PP2-DP1 mbs1 gbs4 1f1b: 4 GPUs, 4 micro-batches of 1 x 128 tokens, sequence parallel on, ZeRO 0, recompute none

parameters      count
total          3.43 M
embedding    262.14 k
output       262.14 k
per layer    725.50 k
  attention  196.61 k
  FFN        528.38 k
  norms       512.00

FLOPs                     per token  per iteration
forward                  6.59 MFLOP     3.37 GFLOP
  attention core       262.14 kFLOP   134.22 MFLOP
  logits               524.29 kFLOP   268.44 MFLOP
backward                13.17 MFLOP     6.74 GFLOP
recompute (none)          0.00 FLOP      0.00 FLOP
model (fwd+bwd)         19.76 MFLOP    10.12 GFLOP
hardware (+recompute)   19.76 MFLOP    10.12 GFLOP

activations per layer       bytes
recompute none *       484.00 KiB
recompute selective    482.00 KiB
recompute full          32.00 KiB
recompute op           232.00 KiB
(per micro-batch of 1 on one tp rank; flash attention, bf16)

memory per GPU by pipeline stage
stage   weights  gradients  optimizer  activations      total  in-flight
    0  1.63 MiB   1.63 MiB   9.81 MiB     1.89 MiB  14.97 MiB          2
    1  1.64 MiB   1.64 MiB   9.81 MiB     1.26 MiB  14.34 MiB          1
most loaded: stage 0, 14.97 MiB per GPU
activations at the peak, by kind          bytes   share
norm inputs (2)                      256.00 KiB  13.2 %
QKV and FFN inputs                   256.00 KiB  13.2 %
Q, K, V and attention output         384.00 KiB  19.8 %
softmax log-sum-exp (fp32)             8.00 KiB   0.4 %
FFN inner (gate, up, SwiGLU output)    1.01 MiB  53.3 %
(stage 0: 4 layer-micro-batches alive, each layer's terms × that count)
fits a GPU when the total is at most device × (1 − 3 % allocator fragmentation) − 4.00 GiB (CUDA context, libraries, NCCL): `calo sim --cluster` and `calo plan` apply it
)GOLDEN";

TEST(ModelCommand, TinyDenseTablesMatchGolden) {
  const Outcome outcome = run_calo("model tiny-dense --tp 2 --pp 2 --gbs 4 --sequence-parallel");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_EQ(outcome.output, kTinyGolden);
}

/// `value` as `calo model` prints it: three significant decimals of the SI prefix that keeps it in [1, 1000).
std::string si(double value) {
  const char* prefixes[] = {"", " k", " M", " G"};
  int prefix = 0;
  while (value >= 1000 && prefix < 3) {
    value /= 1000;
    ++prefix;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%s", value, prefixes[prefix]);
  return text;
}

TEST(ModelCommand, EveryNumberOfTheGoldenFollowsFromTinyDensesDimensions) {
  // data/models/tiny-dense.yaml: h 256, FFN 688, 8 heads of 32 (4 KV heads), vocab 1024, seq 128, 4 layers;
  // docs/METRICS.md "Model accounting" gives each formula. The golden above is the printed form of these.
  const double h = 256, f = 688, kv = 4 * 32, vocab = 1024, seq = 128, layers = 4, tokens = 4 * seq;
  const double attention = h * h + 2 * h * kv + h * h;  // Q, K, V, output projections (GQA: K, V of 4 heads)
  const double ffn = 3 * h * f;                         // SwiGLU: gate, up, down
  const double norms = 2 * h;
  const double layer = attention + ffn + norms;
  const double total = layers * layer + 2 * vocab * h + h;  // + embedding, untied output, final norm
  for (const auto& [what, value] : std::vector<std::pair<std::string, double>>{{"total", total},
                                                                               {"embedding", vocab * h},
                                                                               {"per layer", layer},
                                                                               {"  attention", attention},
                                                                               {"  FFN", ffn}}) {
    EXPECT_NE(std::string(kTinyGolden).find(what), std::string::npos) << what;
    EXPECT_NE(std::string(kTinyGolden).find(si(value)), std::string::npos) << what << " " << si(value);
  }
  // FLOPs per token: 2 per linear weight, causal attention's QK^T and PV at seq/2 keys on average, the
  // logits.
  const double core = layers * 2 * 2 * (seq / 2) * h;
  const double logits = 2 * h * vocab;
  const double forward = 2 * layers * (attention + ffn) + core + logits;
  for (const double flops : {forward, core, logits, 2 * forward, 3 * forward})
    EXPECT_NE(std::string(kTinyGolden).find(si(flops) + "FLOP"), std::string::npos) << si(flops);
  EXPECT_NE(std::string(kTinyGolden).find(si(forward * tokens) + "FLOP"), std::string::npos);
  // Memory per GPU of stage 0 (tp 2: the linears and the embedding split, the norms whole), bf16 weights and
  // gradients, 12 bytes of fp32 master weight and Adam moments per parameter.
  const double stage0 = vocab * h / 2 + 2 * ((attention + ffn) / 2 + norms);
  char weights[32], optimizer[32];
  std::snprintf(weights, sizeof weights, "%.2f MiB", 2 * stage0 / (1 << 20));
  std::snprintf(optimizer, sizeof optimizer, "%.2f MiB", 12 * stage0 / (1 << 20));
  EXPECT_NE(std::string(kTinyGolden).find(std::string("    0  ") + weights + "   " + weights),
            std::string::npos)
      << weights;
  EXPECT_NE(std::string(kTinyGolden).find(optimizer), std::string::npos) << optimizer;
  // Activations per layer under op-level checkpointing, 64 tokens per tp rank (sequence parallel): the layer
  // input and FFN output 2h each, Q and V 2q + 2c, the attention output 2q and its log-sum-exp 4a, the gate
  // 2f.
  const double q = 8 * 32, a = 8;
  char op[48];
  std::snprintf(op, sizeof op, "recompute op           %.2f KiB",
                64 * (2 * h + 2 * q + 2 * kv + 2 * q + 4 * a + 2 * f + 2 * h) / 1024);
  EXPECT_NE(std::string(kTinyGolden).find(op), std::string::npos) << op;
}

TEST(ModelCommand, JsonCarriesExactCounts) {
  const Outcome outcome = run_calo("model tiny-moe --dp 4 --ep 4 --zero 1 --json");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const nlohmann::json json = nlohmann::json::parse(outcome.output);
  EXPECT_DOUBLE_EQ(json["parameters"]["total"].get<double>(), 7608576.0);
  EXPECT_DOUBLE_EQ(json["parameters"]["active_per_token"].get<double>(), 4462848.0);
  // 2 x (attention 196,608 + 2 experts x 393,216 + router 1,024) + causal attention 65,536, 4 layers +
  // logits.
  EXPECT_DOUBLE_EQ(json["flops_per_token"]["forward"].get<double>(),
                   4 * (2.0 * (196608 + 2 * 393216 + 1024) + 65536) + 2.0 * 1024 * 256);
  EXPECT_DOUBLE_EQ(json["tokens_per_iteration"].get<double>(), 4 * 128.0);
  // Dense part 1,317,120 per rank, experts 4 x 393,216 (one expert of each layer per rank with ep = 4).
  EXPECT_DOUBLE_EQ(json["memory_per_gpu"]["weights_bytes"].get<double>(), 2 * (1317120.0 + 4 * 393216.0));
  EXPECT_EQ(json["memory_per_stage"].size(), 1u);
  EXPECT_EQ(json["layout"]["ep"].get<int>(), 4);
}

TEST(ModelCommand, Fp8DelayedShowsItsFp8WeightsAndFp8SavedInputs) {
  // tiny-dense, one GPU: 4 layers x (2 x 724,992 FP8 matrix parameters + 4 linears x 20,480 bytes of amax
  // history) = 6,127,616 bytes; its JSON carries the term, bf16's does not.
  const Outcome outcome = run_calo("model tiny-dense --precision fp8-delayed --json");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output);
  EXPECT_EQ(json["memory_per_gpu"]["fp8_weights_bytes"].get<double>(), 4 * (2 * 724'992.0 + 4 * 20'480.0));
  const Outcome bf16 = run_calo("model tiny-dense --json");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_FALSE(nlohmann::json::parse(bf16.output)["memory_per_gpu"].contains("fp8_weights_bytes"));
  // Per token and layer the inputs of QKV and the FFN (2 x 2 x 256 bytes) and the SwiGLU output (2 x 688)
  // are halved and an FP8 copy of the attention output (256) is added: 128 tokens x (512 + 688 - 256) less.
  const double saved = 128.0 * (2 * 256 + 688 - 256);
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(bf16.output)["activation_bytes_per_layer"]["none"].get<double>() -
                       json["activation_bytes_per_layer"]["none"].get<double>(),
                   saved);
  const Outcome text = run_calo("model tiny-dense --precision fp8-delayed");
  EXPECT_NE(text.output.find("FP8 weights"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("QKV and FFN inputs (FP8)"), std::string::npos) << text.output;
}

TEST(ModelCommand, ListShowsEveryPresetWithItsSize) {
  const Outcome outcome = run_calo("model --list");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  // Compare with runs of spaces collapsed: the values matter here, the column widths do not.
  auto squeeze = [](std::string text) {
    std::string out;
    for (char character : text) {
      if (character == ' ' && !out.empty() && out.back() == ' ') continue;
      out += character;
    }
    return out;
  };
  const std::string listed = squeeze(outcome.output);
  for (const char* line :
       {"llama3-70b 80 8192 - 70.55 B 70.55 B", "mixtral-8x7b 32 4096 8 top-2 46.70 B 12.88 B", "gpt3-175b",
        "llama3-8b", "llama3-405b", "mixtral-8x22b", "tiny-dense", "tiny-moe", "llama3-8b-4layers 4 4096",
        // the published runs' models (bench/published): their totals and active parameters as their papers
        // give
        "llama2-70b 80 8192 - 68.98 B 68.98 B", "nemotron4-15b 32 6144 - 15.63 B",
        "nemotron4-340b 96 18432 - 341.03 B", "qwen3-30b-a3b 48 2048 128 top-8 30.53 B 3.35 B",
        "qwen3-235b-a22b 94 4096 128 top-8 235.09 B 22.19 B", "llama2-7b", "llama2-13b",
        "grok1-314b 64 6144 8 top-2 316.45 B 84.53 B"}) {
    EXPECT_NE(listed.find(line), std::string::npos) << line << "\n" << outcome.output;
  }
  const Outcome json = run_calo("model --list --json");
  EXPECT_EQ(nlohmann::json::parse(json.output).size(), 17u);
}

TEST(ModelCommand, BadModelFileNamesTheKeyAndExitsTwo) {
  const std::string path = calo::testing::scratch_path("bad-model.yaml").string();
  {
    std::ofstream file(path);
    file << "name: broken\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 128\nnum_attention_heads: 4\n"
            "vocab_size: 100\nseq_length: 16\nactivation: relu\n";
  }
  const Outcome outcome = run_calo("model " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find(path + ": 'activation' must be one of gelu, swiglu"), std::string::npos)
      << outcome.output;
  const Outcome missing = run_calo("model no-such-model");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("unknown model 'no-such-model'; presets: gpt3-175b"), std::string::npos)
      << missing.output;
}

}  // namespace
