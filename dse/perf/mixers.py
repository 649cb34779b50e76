"""The op inventory of the sequence mixers that are not plain GQA attention: multi-head latent
attention (MLA) projections and its absorbed decode kernel, Mamba-2 layers and gated linear
attention (Gated DeltaNet). Each op is weighted by the share of the layers (or of the attention
layers) that run it, so one list serves a block of rows that mixes model types (dse.perf.layer has
the `Op` and `Shape` these build and the GQA attention they replace).

MLA (DeepSeek-V2/V3, Kimi K2): training and prefill run the up-projected form (Megatron-Core
`MLASelfAttention`, FlashMLA prefill): queries through q_lora_rank, keys and values through the
kv_lora_rank latent, then attention with head_dim (qk_nope + qk_rope) keys and v_head_dim values.
The down-projections are replicated over TP ranks (Megatron builds them `duplicated`); the
up-projections are sharded by heads. Decode runs the absorbed form (FlashMLA, TensorRT-LLM): the
query's no-RoPE part is multiplied into W_UK, attention runs over the cached latent (an MQA with
kv_lora_rank + qk_rope_head_dim keys and kv_lora_rank values, one read of the cache for all heads)
and W_UV is applied to the result.

Mamba-2 and Gated DeltaNet: in/out projections are GEMMs; the causal conv and the gated norm are
memory-bound streams; the chunked scan is a fused kernel timed like attention (FLOPs from
dse.workload, bytes = its inputs and outputs plus the per-chunk states). Decode updates the
recurrent state in place: read and write it once per token (16-bit, RECURRENT_STATE_BYTES).
"""
from __future__ import annotations

import numpy as np

from dse import catalog
from dse.columns import divides
from dse.perf import layer as L
from dse.perf import memory as M
from dse.perf.layer import ACT_BYTES, Op, Shape

K = catalog.constants()
# The recurrent state (SSM state, delta-rule state, conv window) is kept at the activation width.
# vLLM keeps it in the model dtype unless a config asks for FP32 (`mamba_ssm_cache_dtype`).
RECURRENT_STATE_BYTES = ACT_BYTES
CHUNK_STATE_BYTES = 4.0   # per-chunk states of the chunked scans are written and read back in FP32
INDEXER_LOGIT_BYTES = K["indexer_logit_bytes"]


def _gemm(name, m, n, k, operand, weight, count=1.0) -> Op:
    return Op(name, "gemm", "gemm", m, n, k, count=count, operand_bytes=operand, low_precision=True, weight=weight)


def attention_projection_ops(m, s: Shape, operand, decode: bool = False) -> list:
    """The attention layers' projections: GQA (dse.perf.layer) and, for MLA rows, MLA's."""
    ops = L.projection_ops(m, s, operand) + output_projection_ops(m, s, operand)
    if np.any(m.q_rank):   # the down-projection whole on every TP rank (as MLA's), the up-projection by heads
        weight = L.gqa_share(m) * m.q_rank
        ops += [_gemm("q_down", s.tokens, m.q_lora, m.hidden, operand, weight),
                _gemm("q_up", s.tokens, m.q_dim / s.tp, m.q_lora, operand, weight)]
    if np.any(m.is_mla):
        ops += mla_projection_ops(m, s, operand, decode, m.attention_fraction * m.is_mla)
    if np.any(m.has_indexer > 0):
        ops += indexer_projection_ops(m, s, operand)
    if np.any(m.csa_fraction + m.hca_fraction > 0):
        ops += compressor_ops(m, s, operand)
    return ops


def output_projection_ops(m, s: Shape, operand) -> list:
    """DeepSeek-V4's grouped low-rank output projection (the full one is dse.perf.layer's): each local
    head group's outputs to o_lora_rank (one batched GEMM), then the groups' o_groups x o_lora_rank
    -> hidden, row-parallel over TP."""
    if not np.any(m.o_lora > 0):
        return []
    weight = m.attention_fraction * (m.o_lora > 0)
    return [_gemm("attn_out_group_proj", s.tokens, m.o_lora, m.o_dim / m.o_groups, operand, weight,
                  count=m.o_groups / s.tp),
            _gemm("attn_out_proj_low_rank", s.tokens, m.hidden, m.o_groups * m.o_lora / s.tp, operand, weight)]


def compressor_ops(m, s: Shape, operand) -> list:
    """DeepSeek-V4's KV compressors: a key and a gate projection of every token (twice as wide on a
    CSA layer, whose pooling windows overlap, beside the indexer's own at indexer_head_dim), whole on
    every TP rank like the indexer's; the gated pooling into one key per ratio tokens is an
    element-wise pass over them (`elementwise`)."""
    csa = 4.0 * (m.head_dim + m.indexer_head_dim * m.has_indexer)
    return [_gemm("compressor_csa", s.tokens, csa, m.hidden, operand, m.attention_fraction * m.csa_fraction),
            _gemm("compressor_hca", s.tokens, 2.0 * m.head_dim, m.hidden, operand, m.attention_fraction * m.hca_fraction)]


def indexer_projection_ops(m, s: Shape, operand) -> list:
    """A sparse-attention indexer's projections, whole on every TP rank (Megatron-Core builds them
    `duplicated`; the top-k needs every indexer head): its queries from the query latent, its key
    and per-head weights from the hidden state (one GEMM: they read the same input)."""
    weight = m.attention_fraction * m.indexer_share
    q_in = np.where(m.q_lora > 0, m.q_lora, m.hidden)
    key = np.where(m.csa_fraction > 0, 0.0, m.indexer_head_dim)   # V4: the key is its compressor's
    return [_gemm("indexer_q", s.tokens, m.indexer_heads * m.indexer_head_dim, q_in, operand, weight),
            _gemm("indexer_k_weights", s.tokens, key + m.indexer_heads, m.hidden, operand, weight)]


def indexer_scores_op(m, s: Shape, decode: bool, fp8_scores: bool, training: bool = False) -> Op:
    """A sparse-attention indexer's scores: each query's heads against every cached indexer key (a
    causal prefill or training pass visits on average causal_skip of them), the heads' ReLU scores
    summed by their weights into one FP32 logit per key, which the top-k reads back. A fused kernel
    timed like attention; its MMAs run in FP8 where `fp8_scores` (the serving engines' DeepGEMM
    fp8_mqa_logits: twice the BF16 rate on Hopper and Blackwell), in BF16 in training (Megatron-Core's
    DSA indexer). Decode reads every cached indexer key of its sequences. In training the indexer
    learns from a KL objective over the selected keys only, so its backward is the forward's
    2x on the top-k share of the keys."""
    cached = m.indexer_keys(s.ctx)                            # V4's CSA layers: the compressed keys
    keys = cached if decode else cached * K["causal_skip"]
    scores = s.tokens * keys                                  # (query, key) pairs
    rate = np.where(fp8_scores, 2.0, 1.0)
    flops = 2.0 * scores * m.indexer_heads * m.indexer_head_dim / rate
    key_reads = s.seqs * cached * M.indexer_key_bytes_per_token(m)
    nbytes = key_reads + 2.0 * scores * INDEXER_LOGIT_BYTES + s.tokens * m.indexer_heads * (m.indexer_head_dim + 1) * ACT_BYTES
    selected = np.minimum(np.where(m.sparse_topk > 0, m.sparse_topk, keys), keys) / np.maximum(keys, 1.0)
    return Op("indexer_scores", "attention", "fused", s.q_len, keys, m.indexer_head_dim, flops=flops, bytes=nbytes,
              weight=m.attention_fraction * m.indexer_share, head_dims=m.indexer_head_dim,
              backward=2.0 * selected if training else 0.0)


def rope_op(m, s: Shape, eager) -> Op:
    """The rotary embedding of the local queries and keys in training, on the attention layers of a
    model without learned position embeddings (of a model with chunked attention, Llama 4's, only its
    chunked layers: the global ones have no position encoding): one fused kernel (Transformer Engine's
    fused RoPE reads and writes each 16-bit element, its backward the same over the gradients:
    constants rope_fwd_bytes, rope_bwd_bytes), or, on the rows where `eager` (a YaRN RoPE the
    framework cannot fuse: Megatron-Core's `_apply_rotary_pos_emb_bshd`), its eager ops
    (yarn_rope_fwd_bytes, yarn_rope_bwd_bytes)."""
    elements = s.tokens * (m.q_dim + m.kv_dim) / s.tp
    forward = np.where(eager, K["yarn_rope_fwd_bytes"], K["rope_fwd_bytes"]).astype(np.float32)
    backward = np.where(eager, K["yarn_rope_bwd_bytes"], K["rope_bwd_bytes"]).astype(np.float32)
    rotated = np.where(m.chunk_fraction > 0, m.chunk_fraction, 1.0)   # of the attention layers
    weight = (m.attention_fraction * rotated * ~m.learned_pos).astype(np.float32)
    return Op("rope", "elementwise", "stream", elements, 1.0, 1.0, bytes=elements * forward, weight=weight,
              backward=backward / forward)


def decode_attention_ops(m, s: Shape, kv_cache_token, kv_reads, decode_kv=None) -> list:
    """Decode attention over the KV cache: GQA (FlashDecoding) and, for MLA rows, absorbed MLA."""
    ops = [L.decode_attention_op(m, s, kv_cache_token, kv_reads, decode_kv)]
    if np.any(m.is_mla):
        ops.append(mla_decode_attention_op(m, s, kv_cache_token, m.attention_fraction * m.is_mla))
    return ops


def mla_projection_ops(m, s: Shape, operand, decode: bool, weight) -> list:
    """MLA's query and KV projections for the rows with `weight` > 0 (attention share x is_mla)."""
    heads_local = m.heads / s.tp
    nope = m.head_dim - m.rope_dim
    q_in = np.where(m.q_lora > 0, m.q_lora, m.hidden)
    # the query and KV down-projections read the same input: one GEMM (fused_qkv_a_proj)
    ops = [_gemm("mla_qkv_down", s.tokens, m.q_lora + m.kv_lora + m.rope_dim, m.hidden, operand, weight),
           _gemm("mla_q_up", s.tokens, heads_local * m.head_dim, q_in, operand, weight)]
    if decode:  # absorbed: W_UK into the query, W_UV after attention, per local head
        ops += [_gemm("mla_q_absorb", s.tokens, m.kv_lora, nope, operand, weight, count=heads_local),
                _gemm("mla_v_absorb", s.tokens, m.v_head_dim, m.kv_lora, operand, weight, count=heads_local)]
    else:
        ops.append(_gemm("mla_kv_up", s.tokens, heads_local * (nope + m.v_head_dim), m.kv_lora, operand, weight))
    return ops   # the output projection is the attention layers' (dse.perf.layer.projection_ops)


def mla_decode_attention_op(m, s: Shape, kv_cache_token, weight) -> Op:
    """Absorbed MLA decode: every local head attends over the cached latent + rotary key (scores
    over kv_lora + rope, values over kv_lora), one read of the cache shared by all heads."""
    keys = m.attention_span(s.ctx)
    latent = m.kv_lora + m.rope_dim
    heads_local = m.heads / s.tp
    flops = 2.0 * s.seqs * heads_local * keys * (latent + m.kv_lora)
    nbytes = s.seqs * keys * kv_cache_token + s.seqs * (heads_local * (latent + m.kv_lora) * ACT_BYTES + kv_cache_token)
    return Op("attention", "attention", "fused", heads_local, keys, latent, flops=flops, bytes=nbytes, weight=weight)


def mamba_ops(m, s: Shape, operand, decode: bool) -> list:
    """One Mamba-2 layer on its share of the layers (heads and groups sharded over TP)."""
    mb, tp, w = m.mamba, s.tp, m.mamba_fraction
    inner = mb.inner / tp
    ops = [_gemm("mamba_in_proj", s.tokens, mb.in_proj / tp, m.hidden, operand, w)]
    if decode:
        state = mb.state_elements() / tp * RECURRENT_STATE_BYTES
        flops = s.tokens * (6.0 * mb.heads * mb.head_dim * mb.state + 2.0 * mb.conv_dim * mb.conv_kernel) / tp
        io = s.tokens * (mb.in_proj + mb.inner) / tp * ACT_BYTES
        ops.append(Op("mamba_state_update", "scan", "fused", s.tokens, inner, mb.state, flops=flops,
                      bytes=2.0 * s.seqs * state + io, weight=w, backward=0.0))
    else:
        chunk_states = mb.heads * mb.head_dim * mb.state / np.minimum(mb.chunk, np.maximum(s.q_len, 1.0))
        nbytes = s.tokens * ((2.0 * mb.inner + mb.bc + mb.heads) * ACT_BYTES + 2.0 * chunk_states * CHUNK_STATE_BYTES) / tp
        ops.append(Op("mamba_scan", "scan", "fused", s.q_len, inner, mb.state, flops=s.tokens * mb.scan_flops_per_token(s.q_len) / tp,
                      bytes=nbytes, weight=w, backward=K["flash_backward_factor"]))
    # the causal conv (read and write x, B, C; prefill and training) and the gated RMSNorm (read y and z, write)
    conv = 0.0 if decode else 2.0 * mb.conv_dim / tp
    ops += [Op("mamba_conv_norm", "elementwise", "stream", s.tokens, inner, 1.0,
               bytes=s.tokens * (conv + 3.0 * inner) * ACT_BYTES, weight=w),
            _gemm("mamba_out_proj", s.tokens, m.hidden, inner, operand, w)]
    return ops


def linear_attention_ops(m, s: Shape, operand, decode: bool) -> list:
    """One Gated DeltaNet layer on its share of the layers (heads sharded over TP)."""
    la, tp, w = m.linear, s.tp, m.linear_fraction
    value_local = la.value_dim / tp
    ops = [_gemm("linear_in_proj", s.tokens, la.in_proj / tp, m.hidden, operand, w)]
    state_matrix = la.value_heads * la.key_head_dim * la.value_head_dim
    if decode:
        state = la.state_elements() / tp * RECURRENT_STATE_BYTES
        flops = s.tokens * (6.0 * state_matrix + 2.0 * la.conv_dim * la.conv_kernel) / tp
        io = s.tokens * (la.in_proj + la.value_dim) / tp * ACT_BYTES
        ops.append(Op("linear_state_update", "scan", "fused", s.tokens, value_local, la.key_head_dim, flops=flops,
                      bytes=2.0 * s.seqs * state + io, weight=w, backward=0.0))
    else:
        chunk_states = state_matrix / np.minimum(la.chunk, np.maximum(s.q_len, 1.0))
        nbytes = s.tokens * ((la.conv_dim + 2.0 * la.value_heads + la.value_dim) * ACT_BYTES
                             + 2.0 * chunk_states * CHUNK_STATE_BYTES) / tp
        ops.append(Op("linear_scan", "scan", "fused", s.q_len, value_local, la.key_head_dim,
                      flops=s.tokens * la.scan_flops_per_token(s.q_len) / tp, bytes=nbytes, weight=w,
                      backward=K["flash_backward_factor"]))
    conv = 0.0 if decode else 2.0 * la.conv_dim / tp     # the causal conv; then the gated RMSNorm
    ops += [Op("linear_conv_norm", "elementwise", "stream", s.tokens, value_local, 1.0,
               bytes=s.tokens * (conv + 3.0 * value_local) * ACT_BYTES, weight=w),
            _gemm("linear_out_proj", s.tokens, m.hidden, value_local, operand, w)]
    return ops


def recurrent_ops(m, s: Shape, operand, decode: bool) -> list:
    """The state-space and linear-attention layers of the rows that have them (none otherwise)."""
    ops = []
    if m.mamba is not None:
        ops += mamba_ops(m, s, operand, decode)
    if m.linear is not None:
        ops += linear_attention_ops(m, s, operand, decode)
    return ops


def recurrent_heads_indivisible(m, tp):
    """Rows whose Mamba-2 heads and groups or Gated DeltaNet heads tp does not divide (Megatron-Core
    shards them over the TP ranks and asserts it)."""
    bad = np.zeros(np.shape(tp), dtype=bool)
    if m.mamba is not None:
        bad |= (m.mamba_fraction > 0) & ~(divides(tp, m.mamba.heads) & divides(tp, m.mamba.groups))
    if m.linear is not None:
        bad |= (m.linear_fraction > 0) & ~(divides(tp, m.linear.key_heads) & divides(tp, m.linear.value_heads))
    return bad
