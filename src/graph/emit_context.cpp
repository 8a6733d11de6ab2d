// ContextEmitter: context-parallel attention, the p2p ring and the all-gather (builder_internal.h).
#include "graph/builder_internal.h"

namespace calo::graph::detail {

/// All-gather context parallel (TransformerEngine's AttnFuncWithCPAndKVAllGather, Megatron-LM
/// --cp-comm-type all_gather): gather every rank's K/V over the cp group (again in backward: only the
/// local K/V is kept), run the early query chunk i against keys of chunks 0..i and the late chunk 2cp-1-i
/// against chunks 0..2cp-1-i (bottom-right causal; 2cp c^2 pairs per rank, as the ring), and in backward
/// reduce-scatter the gathered dK/dV back to their owners. The collectives block the attention they feed.
int ContextEmitter::gathered_attention(bool backward) {
  const std::int64_t chunk = dims_.seq / 2;
  const double gathered = static_cast<double>(dims_.cp) * kv_bytes();
  core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kCp, gathered,
                                            Stream::kCpComm, core_.phase));
  // cp index 0's key ranges: the early chunk sees 1 chunk, the late one all 2cp.
  core_.attention_op(backward, chunk, chunk, true, -1, 1);
  const int last = core_.attention_op(backward, chunk, 2 * chunk * dims_.cp, true, -1, 2);
  if (backward)
    core_.blocking(BuilderCore::collective_op(CollectiveKind::kReduceScatter, GroupKind::kCp, gathered,
                                              Stream::kCpComm, core_.phase));
  return last;
}

/// Bytes of this rank's K and V for one micro-batch (bf16, heads split over tp, the rank's seq/cp tokens).
double ContextEmitter::kv_bytes() const {
  return 2.0 * kBf16Bytes * static_cast<double>(dims_.tokens) * static_cast<double>(dims_.kv_size / dims_.tp);
}

/// One ring exchange on the cp stream: send to the next ring neighbour, receive from the previous one
/// (forward: cp index +1 / -1; backward runs the ring the other way, as TransformerEngine does). The send
/// waits for `after_compute` (what it carries was produced by then). Returns the receive's index.
int ContextEmitter::ring_exchange(double bytes, bool backward, int after_compute) {
  const int tag = cp_tag_++;
  Op send;
  send.kind = OpKind::kSend;
  send.stream = Stream::kCpComm;
  send.phase = core_.phase;
  send.group = GroupKind::kCp;
  send.peer_offset = backward ? -1 : 1;
  send.bytes = bytes;
  send.tag = tag;
  send.p2p_batch = core_.p2p_batch;
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.peer_offset = -send.peer_offset;
  core_.add(send, {after_compute});
  const int received = core_.add(recv, {});
  ++core_.p2p_batch;
  return received;
}

/// Context-parallel attention as Megatron-LM / TransformerEngine run it (p2p ring, causal load balance):
/// the sequence is cut into 2cp chunks of c tokens and rank i holds chunks i and 2cp-1-i. Step 0 is the
/// local causal block (2c x 2c, causal); each later step attends to the K/V of another rank: c queries x
/// 2c keys or 2c queries x c keys, 2c^2 pairs either way, so every step costs the same. While a step
/// computes, the K/V of the next step travels over the cp group (forward: cp-1 exchanges of K,V; backward:
/// cp exchanges carrying K,V (all but the last) and the accumulated dK,dV (all but the first)).
int ContextEmitter::ring_attention(bool backward) {
  const std::int64_t chunk = dims_.seq / 2;  // c = seq_length / (2 cp) tokens
  const int steps = static_cast<int>(dims_.cp);
  int last = -1;
  int received = -1;
  for (int step = 0; step < steps; ++step) {
    double bytes = 0;
    if (!backward) {
      if (step + 1 < steps) bytes = kv_bytes();
    } else {
      bytes = (step + 1 < steps ? kv_bytes() : 0.0) + (step > 0 ? kv_bytes() : 0.0);
    }
    // This step's K/V came with the previous exchange.
    if (received >= 0) core_.waits.push_back(received);
    received = bytes > 0 ? ring_exchange(bytes, backward, core_.last_compute) : -1;
    if (step == 0) {
      last = core_.attention_op(backward, 2 * chunk, 2 * chunk, true, 0);
    } else {
      last = core_.attention_op(backward, chunk, 2 * chunk, false, step);
    }
  }
  // Backward: the last exchange brings this rank's own dK, dV home; what follows needs it.
  if (received >= 0) core_.waits.push_back(received);
  return last;
}

/// E, the values of this rank's attention output (or of its Q, or of its K or V at query heads): the rank's
/// tokens x query heads over tp x head dimension.
double ContextEmitter::query_head_values() const {
  return static_cast<double>(dims_.tokens) * static_cast<double>(dims_.q_size / dims_.tp);
}

/// Bytes of torch's per-step fp32 bookkeeping after step `step` on the busiest rank, cp index cp-1, whose
/// later steps all see its whole query block (docs/METRICS.md "Context parallel", torch): forward, out to
/// fp32 (6 E) and from step 1 the merge out - sigmoid(lse_b - lse) (out - out_b) (32 E); backward, dK, dV +=
/// (20 E; from step 1 into their first halves and concatenated again, 26 E), dQ += (10 E) and the dK/dV
/// concatenation sent on (16 E), the fp32 zeros at step 0 (12 E); every step but the last concatenates K and
/// V for the rotater (8 E); the last casts back to bf16 (out 6 E; dQ, dK, dV 18 E).
double ContextEmitter::torch_merge_bytes(bool backward, int step) const {
  const int steps = static_cast<int>(dims_.cp);
  double per_value = 0;
  if (!backward) {
    per_value = step == 0 ? 6.0 : 38.0;
    if (step + 1 == steps) per_value += 6.0;
  } else {
    per_value = step == 0 ? 46.0 + 12.0 : 52.0;
    if (step + 1 == steps) per_value += 18.0;
  }
  if (step + 1 < steps) per_value += 8.0;
  return per_value * query_head_values();
}

/// PyTorch's experimental context parallel as torchtitan ran it (torch.distributed.tensor.experimental
/// _attention.py: pass-KV with the default all-gather rotater and round-robin load balance, the ring's steps
/// and shapes). SDPA gets K and V already repeated to the query heads (torchtitan's Llama repeat_kv), so
/// those travel: one all-gather of every rank's K/V per pass on the cp stream, overlapping step 0 (step 1
/// waits for it). Each step's output is merged into an fp32 running result; backward gathers K/V again,
/// accumulates dQ, dK, dV in fp32 and passes the accumulated dK, dV (fp32, query heads) to the next cp rank
/// after every step, the accumulation of step j waiting for what step j-1 sent.
int ContextEmitter::torch_ring_attention(bool backward) {
  const std::int64_t chunk = dims_.seq / 2;  // c = seq_length / (2 cp) tokens
  const int steps = static_cast<int>(dims_.cp);
  const double gathered = static_cast<double>(steps) * 2.0 * kBf16Bytes * query_head_values();
  const int gather = core_.add(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kCp,
                                                          gathered, Stream::kCpComm, core_.phase),
                               {core_.last_compute});
  int last = -1;
  int received = -1;
  for (int step = 0; step < steps; ++step) {
    if (step == 1) core_.waits.push_back(gather);
    last = step == 0 ? core_.attention_op(backward, 2 * chunk, 2 * chunk, true, 0)
                     : core_.attention_op(backward, chunk, 2 * chunk, false, step);
    if (received >= 0) core_.waits.push_back(received);
    core_.elementwise(ElementwiseKind::kCpMerge, torch_merge_bytes(backward, step), 0.0);
    // torch's dK/dV rotater permutes to cp index + 1 whichever pass it is.
    if (backward) received = ring_exchange(2.0 * kFp32Bytes * query_head_values(), false, core_.last_compute);
  }
  // Backward: the last exchange brings this rank's own dK, dV home; what follows needs it.
  if (received >= 0) core_.waits.push_back(received);
  return last;
}

}  // namespace calo::graph::detail
