// CPU attention unit: per (batch, head) S = Q K^T * scale, causal mask, P = softmax(S), O = P V with OpenBLAS
// (and the backward's dV, dP, dS, dQ, dK); --check recomputes rows of the last (batch, head) in double
// (AttentionReference).
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "exec/cpu_internal.h"

namespace calo::exec::cpu {
namespace {

// Query rows per attention block on the CPU (a causal block of rows [r0, r1) needs keys [0, r1) only).
constexpr std::int64_t kAttentionBlockRows = 64;

/// The (batch, head) of an attention op that check_attention recomputes in double: the last one, its shape
/// and the reference values of its rows.
struct AttentionReference {
  /// Takes the shape and buffers of `op` (kept by reference).
  explicit AttentionReference(const CpuOp& op)
      : prepared(op),
        shape(op.rank_op.op.attention),
        sq(shape.seq),
        sk(shape.keys()),
        shift(shape.causal ? sk - sq : 0),
        d(shape.head_dim),
        group(std::max(1, shape.heads / std::max(1, shape.kv_heads))),
        batch(shape.batch - 1),
        head(shape.heads - 1),
        kv_head(head / group),
        scale(1.0 / std::sqrt(static_cast<double>(d))) {}

  /// Row 0 of query head `query_head` of the checked batch in a query-shaped buffer (Q, O, dO, dQ).
  const float* query_rows(int buffer, std::int64_t query_head) const {
    return prepared.buffers[buffer]->data() + ((batch * shape.heads + query_head) * sq * d);
  }

  /// Row 0 of the checked kv head in a key-shaped buffer (K, V, dK, dV).
  const float* key_rows(int buffer) const {
    return prepared.buffers[buffer]->data() + ((batch * shape.kv_heads + kv_head) * sk * d);
  }

  /// Softmax probabilities of query row `row` of `queries` over all sk keys (0 where masked).
  std::vector<double> probabilities(const float* queries, std::int64_t row) const {
    const float* k = key_rows(1);
    std::vector<double> p(static_cast<size_t>(sk), 0.0);
    const std::int64_t visible = shape.causal ? shift + row + 1 : sk;
    double max_score = -INFINITY;
    for (std::int64_t col = 0; col < visible; ++col) {
      double dot = 0;
      for (std::int64_t x = 0; x < d; ++x) dot += static_cast<double>(queries[row * d + x]) * k[col * d + x];
      p[static_cast<size_t>(col)] = dot * scale;
      max_score = std::max(max_score, p[static_cast<size_t>(col)]);
    }
    double sum = 0;
    for (std::int64_t col = 0; col < visible; ++col)
      sum += (p[static_cast<size_t>(col)] = std::exp(p[static_cast<size_t>(col)] - max_score));
    for (auto& value : p) value /= sum;
    return p;
  }

  /// Forward: the expected O row `row` = P V.
  std::vector<double> output_row(std::int64_t row) const {
    const auto p = probabilities(query_rows(0, head), row);
    const float* v = key_rows(2);
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    for (std::int64_t col = 0; col < sk; ++col)
      for (std::int64_t x = 0; x < d; ++x)
        want[static_cast<size_t>(x)] += p[static_cast<size_t>(col)] * v[col * d + x];
    return want;
  }

  /// Backward: the expected dQ row `row` = dS K with dS = P (dO V^T - rowsum(dO o O)) * scale.
  std::vector<double> d_query_row(std::int64_t row) const {
    const auto p = probabilities(query_rows(0, head), row);
    const float* k = key_rows(1);
    const float* v = key_rows(2);
    const float* o = query_rows(3, head);
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    const float* d_out = query_rows(6, head);
    double row_dot = 0;
    for (std::int64_t x = 0; x < d; ++x) row_dot += static_cast<double>(d_out[row * d + x]) * o[row * d + x];
    for (std::int64_t col = 0; col < sk; ++col) {
      double dp = 0;
      for (std::int64_t x = 0; x < d; ++x) dp += static_cast<double>(d_out[row * d + x]) * v[col * d + x];
      const double ds = p[static_cast<size_t>(col)] * (dp - row_dot) * scale;
      for (std::int64_t x = 0; x < d; ++x) want[static_cast<size_t>(x)] += ds * k[col * d + x];
    }
    return want;
  }

  /// Backward: the expected dK and dV of key row `key` of the checked kv head, summed over the heads of its
  /// group and over the query rows that see that key.
  void key_gradient_rows(std::int64_t key, std::vector<double>& want_dk, std::vector<double>& want_dv) const {
    const float* v = key_rows(2);
    want_dk.assign(static_cast<size_t>(d), 0.0);
    want_dv.assign(static_cast<size_t>(d), 0.0);
    for (std::int64_t member = kv_head * group;
         member < std::min<std::int64_t>((kv_head + 1) * group, shape.heads); ++member) {
      const float* q_member = query_rows(0, member);
      const float* o_member = query_rows(3, member);
      const float* d_out = query_rows(6, member);
      for (std::int64_t row = shape.causal ? key - shift : 0; row < sq; ++row) {
        const auto p = probabilities(q_member, row);
        double row_dot = 0;
        double dp = 0;
        for (std::int64_t x = 0; x < d; ++x) {
          row_dot += static_cast<double>(d_out[row * d + x]) * o_member[row * d + x];
          dp += static_cast<double>(d_out[row * d + x]) * v[key * d + x];
        }
        const double p_key = p[static_cast<size_t>(key)];
        const double ds = p_key * (dp - row_dot) * scale;
        for (std::int64_t x = 0; x < d; ++x) {
          want_dv[static_cast<size_t>(x)] += p_key * d_out[row * d + x];
          want_dk[static_cast<size_t>(x)] += ds * q_member[row * d + x];
        }
      }
    }
  }

  /// Counts the d values of `got` against `want` into `check` (tolerance grows with the key count).
  void compare_row(OpCheck& check, const float* got, const std::vector<double>& want,
                   const std::string& what) const {
    for (std::int64_t x = 0; x < d; ++x) {
      const double expected = want[static_cast<size_t>(x)];
      const bool correct =
          !(std::abs(got[x] - expected) > 1e-3 * (1.0 + std::abs(expected)) + 1e-4 * static_cast<double>(sk));
      check.count(correct, [&] {
        return fmt::format("op {} ({}): {} col {} = {} but the reference says {}", prepared.index,
                           graph::describe(prepared.rank_op.op), what, x, got[x], expected);
      });
    }
  }

  const CpuOp& prepared;
  const graph::AttentionShape& shape;
  const std::int64_t sq;       // query rows
  const std::int64_t sk;       // key rows
  const std::int64_t shift;    // bottom-right causal: row r sees keys <= shift + r
  const std::int64_t d;        // head dimension
  const std::int64_t group;    // query heads per kv head
  const std::int64_t batch;    // the checked sequence: the last
  const std::int64_t head;     // the checked query head: the last
  const std::int64_t kv_head;  // its kv head
  const double scale;          // 1 / sqrt(d)
};

// Buffers: Q, K, V, O, S, P (S and P one (batch, head)'s scores); backward adds dO, dQ, dK, dV. Shared by
// attentions of the same shapes.
void prepare_attention(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  const auto& shape = prepared.rank_op.op.attention;
  const std::int64_t q_elements = std::int64_t{shape.batch} * shape.heads * shape.seq * shape.head_dim;
  const std::int64_t kv_elements = std::int64_t{shape.batch} * shape.kv_heads * shape.keys() * shape.head_dim;
  const std::int64_t scores = std::int64_t{shape.seq} * shape.keys();
  prepared.buffers = {
      context.shared("attn.q", q_elements, seed),      context.shared("attn.k", kv_elements, seed + 1),
      context.shared("attn.v", kv_elements, seed + 2), context.shared("attn.o", q_elements, seed + 3),
      context.shared("attn.s", scores, seed + 4),      context.shared("attn.p", scores, seed + 5)};
  if (shape.backward) {
    prepared.buffers.push_back(context.shared("attn.do", q_elements, seed + 6));
    prepared.buffers.push_back(context.shared("attn.dq", q_elements, seed + 7));
    prepared.buffers.push_back(context.shared("attn.dk", kv_elements, seed + 8));
    prepared.buffers.push_back(context.shared("attn.dv", kv_elements, seed + 9));
  }
}

/// Rows [first_row, end_row) of P = softmax(Q K^T * scale) over keys [0, keys) (row r sees keys
/// [0, shift + r] when causal); scores and probs point at row first_row of `stride`-wide buffers; masked
/// entries of P are 0.
void attention_probabilities(const float* q, const float* k, float* scores, float* probs,
                             std::int64_t first_row, std::int64_t end_row, std::int64_t keys,
                             std::int64_t stride, std::int64_t d, float scale, bool causal,
                             std::int64_t shift) {
  const auto S = static_cast<blasint>(stride);
  const auto D = static_cast<blasint>(d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(end_row - first_row),
              static_cast<blasint>(keys), D, scale, q + first_row * d, D, k, D, 0.0f, scores, S);
  for (std::int64_t row = 0; row < end_row - first_row; ++row) {
    const std::int64_t visible = causal ? shift + first_row + row + 1 : keys;
    float max_score = -INFINITY;
    for (std::int64_t col = 0; col < visible; ++col)
      max_score = std::max(max_score, scores[row * stride + col]);
    double sum = 0;
    for (std::int64_t col = 0; col < visible; ++col) {
      probs[row * stride + col] = std::exp(scores[row * stride + col] - max_score);
      sum += probs[row * stride + col];
    }
    const auto inverse = static_cast<float>(1.0 / sum);
    for (std::int64_t col = 0; col < visible; ++col) probs[row * stride + col] *= inverse;
    for (std::int64_t col = visible; col < keys; ++col) probs[row * stride + col] = 0.0f;
  }
}

/// Attention of one (batch, head): S = Q K^T * scale, causal mask, P = softmax(S), O = P V; backward
/// recomputes P and forms dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o O)), dQ = dS K, dK = dS^T Q.
/// Query rows go in blocks of kAttentionBlockRows; with the causal mask block [r0, r1) multiplies only keys
/// [0, r1), so the masked half of S is never computed (half the FLOPs of a full s×s at long sequences).
/// A context-parallel ring step attends `seq` query rows to `keys()` key rows without a mask (or, on the
/// diagonal step, with the causal mask of the square block).
void run_attention(CpuContext& context, CpuOp& prepared) {
  const auto& shape = prepared.rank_op.op.attention;
  const std::int64_t sq = shape.seq;
  const std::int64_t sk = shape.keys();
  const std::int64_t shift = shape.causal ? sk - sq : 0;  // bottom-right causal: row r sees keys <= shift + r
  const std::int64_t d = shape.head_dim;
  const std::int64_t group = std::max(1, shape.heads / std::max(1, shape.kv_heads));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* scores = prepared.buffers[4]->data();
  float* probs = prepared.buffers[5]->data();
  const auto SK = static_cast<blasint>(sk);
  const auto D = static_cast<blasint>(d);
  for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
    for (std::int64_t head = 0; head < shape.heads; ++head) {
      const std::int64_t kv_head = head / group;
      const std::int64_t q_offset = (batch * shape.heads + head) * sq * d;
      const std::int64_t kv_offset = (batch * shape.kv_heads + kv_head) * sk * d;
      const float* q = prepared.buffers[0]->data() + q_offset;
      const float* k = prepared.buffers[1]->data() + kv_offset;
      const float* v = prepared.buffers[2]->data() + kv_offset;
      float* o = prepared.buffers[3]->data() + q_offset;
      const float* d_out = shape.backward ? prepared.buffers[6]->data() + q_offset : nullptr;
      float* d_q = shape.backward ? prepared.buffers[7]->data() + q_offset : nullptr;
      float* d_k = shape.backward ? prepared.buffers[8]->data() + kv_offset : nullptr;
      float* d_v = shape.backward ? prepared.buffers[9]->data() + kv_offset : nullptr;
      if (shape.backward && head % group == 0) {  // GQA: the heads of a group sum into dK, dV
        std::fill(d_k, d_k + sk * d, 0.0f);
        std::fill(d_v, d_v + sk * d, 0.0f);
      }
      for (std::int64_t first_row = 0; first_row < sq; first_row += kAttentionBlockRows) {
        const std::int64_t end_row = std::min(sq, first_row + kAttentionBlockRows);
        const auto rows = static_cast<blasint>(end_row - first_row);
        const std::int64_t keys = shape.causal ? shift + end_row : sk;  // keys any row of this block sees
        const auto K = static_cast<blasint>(keys);
        float* score_rows = scores + first_row * sk;
        float* prob_rows = probs + first_row * sk;
        attention_probabilities(q, k, score_rows, prob_rows, first_row, end_row, keys, sk, d, scale,
                                shape.causal, shift);
        if (!shape.backward) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, K, 1.0f, prob_rows, SK, v, D, 0.0f,
                      o + first_row * d, D);
          continue;
        }
        const float* d_out_rows = d_out + first_row * d;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, D, rows, 1.0f, prob_rows, SK, d_out_rows, D,
                    1.0f, d_v, D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, D, 1.0f, d_out_rows, D, v, D, 0.0f,
                    score_rows, SK);
        for (std::int64_t row = first_row; row < end_row; ++row) {
          double dot = 0;
          for (std::int64_t col = 0; col < d; ++col)
            dot += static_cast<double>(d_out[row * d + col]) * o[row * d + col];
          for (std::int64_t col = 0; col < keys; ++col)
            scores[row * sk + col] =
                probs[row * sk + col] * (scores[row * sk + col] - static_cast<float>(dot)) * scale;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, K, 1.0f, score_rows, SK, k, D, 0.0f,
                    d_q + first_row * d, D);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, D, rows, 1.0f, score_rows, SK,
                    q + first_row * d, D, 1.0f, d_k, D);
      }
    }
  }
  // An injected fault corrupts row 0 of the last (batch, head): the one check_attention verifies.
  if (context.inject("attention")) {
    const std::int64_t checked_head = std::int64_t{shape.batch} * shape.heads - 1;
    prepared.buffers[shape.backward ? 7 : 3]->at(static_cast<size_t>(checked_head * sq * d)) += 1.0f;
  }
}

/// Recomputes two output rows of the last (batch, head) in double and compares (O forward, dQ backward).
void check_attention(CpuContext& context, CpuOp& prepared) {
  const AttentionReference reference(prepared);
  const std::int64_t d = reference.d;
  const bool backward = reference.shape.backward;
  OpCheck check;
  for (std::int64_t row : {std::int64_t{0}, reference.sq - 1}) {
    const auto want = backward ? reference.d_query_row(row) : reference.output_row(row);
    const float* got = reference.query_rows(backward ? 7 : 3, reference.head) + row * d;  // dQ or O
    reference.compare_row(check, got, want, fmt::format("row {}", row));
  }
  if (backward) {
    // dK and dV of key row s-1 of the last kv head: summed over the heads of its group and over the query
    // rows that see that key (only row s-1 under the causal mask).
    const std::int64_t key = reference.sk - 1;
    std::vector<double> want_dk;
    std::vector<double> want_dv;
    reference.key_gradient_rows(key, want_dk, want_dv);
    reference.compare_row(check, reference.key_rows(8) + key * d, want_dk, fmt::format("dK row {}", key));
    reference.compare_row(check, reference.key_rows(9) + key * d, want_dv, fmt::format("dV row {}", key));
  }
  context.checks.add(check);
}

}  // namespace

const CpuOpUnit kAttentionUnit = {prepare_attention, run_attention, check_attention};

}  // namespace calo::exec::cpu
