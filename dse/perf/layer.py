"""The per-layer op inventory shared by training and inference: every kernel of a decoder layer
(and of the output head) described once, by its GEMM shape or its FLOPs and bytes.

An `Op` says what a kernel does, for one layer and one micro-batch (training) or one stage pass
(inference) on one GPU; dse.perf.roofline turns it into (compute, memory) seconds. `weight` is the
share of the model's layers that run it (dense MLP on dense layers, experts on MoE layers, flash
or unfused attention per row) times any multiplier (the MoE load imbalance), `backward` the
backward-pass time in units of the forward (training).

Phases differ only where the physics does: dropout and FP8 input casts exist in training, RoPE is
a kernel of its own in training (mixers.rope_op), the KV-cache write is counted in serving, decode
attention streams the KV cache, the training head computes the loss in FP32 while serving computes
logits of the last token only.
"""
from __future__ import annotations

from copy import copy
from dataclasses import dataclass, is_dataclass

import numpy as np

from dse import catalog
from dse.columns import divides
from dse.catalog.precision import ELEMENT_BYTES as GEMM_OPERAND_BYTES  # noqa: F401 (re-exported)
from dse.perf.forms import moe as MOE

K = catalog.constants()
ACT_BYTES = K["activation_bytes"]
LOGITS_BYTES = K["logits_bytes"]


@dataclass
class Op:
    name: str
    kind: str                 # gemm (a linear layer) | attention | elementwise | head
    timing: str               # gemm | fused | stream | moe: how roofline.py times it
    m: object = 0.0           # GEMM shape (m x k) @ (k x n), `count` of them
    n: object = 0.0
    k: object = 0.0
    count: object = 1.0
    operand_bytes: object = 2.0
    low_precision: bool = False   # runs at the GEMM precision's peak (else BF16)
    flops: object = 0.0       # fused and stream ops: given directly
    bytes: object = 0.0
    weight: object = 1.0
    backward: object = 2.0
    moe: object = None        # timing "moe": the MoE layer's shape (dse.perf.forms.moe), a dict
    head_dims: object = 256.0  # timing "fused": qk + v head dims of the attention kernel
    per_head_kv: object = True  # fused: K and V per head (MHA, GQA, up-projected MLA), not one absorbed latent
    prefill_kv: object = None  # serving/inference prefill attention: 1 over a 16-bit KV cache, 2 over an
                               # FP8 one (the fitted prefill form, dse.perf.attention_kernels), 0 the pooled efficiency
    decode_kv: object = None   # serving/inference decode attention: the same codes, for the decode kernel form
    decode: object = None      # its shape (dse.perf.forms.attention.decode_time_s), a dict
    calls: object = 1.0        # fused kernels: launches per pass, below 1 where a share of the passes runs it


@dataclass
class Shape:
    """What one pass computes on one GPU: `seqs` sequences each adding `q_len` tokens that attend to
    `ctx` keys, under tensor parallelism `tp` and expert parallelism `ep`."""
    seqs: object
    q_len: object
    ctx: object
    tp: object
    ep: object

    @property
    def tokens(self):
        return self.seqs * self.q_len


def expert_fold(ep, dp):
    """Serving: the TP ranks each expert-parallel group takes in beyond the replicas. With ep | dp
    the EP ranks are whole replicas (attention data parallel; fold 1); an ep of dp times a divisor
    of tp also spreads the experts over the TP group (TensorRT-LLM's moe_ep_size under attention TP,
    vLLM and SGLang expert parallelism over TP), each expert split over tp / fold ranks."""
    return np.maximum(ep / dp, 1.0)


def serving_ep_valid(ep, dp, tp):
    """EP carved out of the replicas (ep | dp), or whole replicas times a divisor of tp."""
    return divides(ep, dp) | (divides(dp, ep) & divides(ep / dp, tp))


def experts_shape(s: Shape, fold) -> Shape:
    """The routed experts' view of a serving pass whose EP groups fold `fold` TP ranks: those ranks
    hold the same tokens and split the experts among themselves, so each computes 1/fold of the
    pairs on experts split fold times less (the training model's etp Shape, dse.perf.training)."""
    return Shape(s.seqs / fold, s.q_len, s.ctx, s.tp / fold, s.ep)


def kv_width_local(m, tp):
    """K (or V) width per GPU: KV heads are sharded over TP and replicated when tp > kv_heads."""
    return m.head_dim * np.maximum(m.kv_heads / tp, 1.0)


def kv_pair_local(m, tp):
    """K plus V width per GPU (V heads may be narrower than K heads: MLA's v_head_dim; one tensor
    where K = V, DeepSeek-V4's)."""
    return (m.head_dim + m.v_head_dim * (1.0 - m.kv_shared)) * np.maximum(m.kv_heads / tp, 1.0)


def gqa_share(m):
    """Share of the layers that run GQA/MHA attention projections (attention layers that are not MLA)."""
    return m.attention_fraction * ~m.is_mla if np.any(m.is_mla) else m.attention_fraction


def projection_ops(m, s: Shape, operand) -> list:
    """The GQA attention layers' QKV projection (and output gate) and every full output projection
    (MLA's, a query rank's and a grouped low-rank output projection are in dse.perf.mixers)."""
    q_local = np.where(m.q_rank, 0.0, m.q_dim / s.tp)   # a query rank: its own GEMMs
    return [Op("qkv_proj", "gemm", "gemm", s.tokens, q_local + m.q_dim / s.tp * m.output_gate + kv_pair_local(m, s.tp),
               m.hidden, operand_bytes=operand, low_precision=True, weight=gqa_share(m)),
            Op("attn_out_proj", "gemm", "gemm", s.tokens, m.hidden, m.o_dim / s.tp, operand_bytes=operand,
               low_precision=True, weight=m.attention_fraction * (m.o_lora <= 0))]


def mlp_ops(m, s: Shape, operand, dense_share) -> list:
    up = m.mlp_mats - 1
    return [Op("mlp_up_gate", "gemm", "gemm", s.tokens, up * m.ffn / s.tp, m.hidden, operand_bytes=operand,
               low_precision=True, weight=dense_share),
            Op("mlp_down", "gemm", "gemm", s.tokens, m.hidden, m.ffn / s.tp, operand_bytes=operand,
               low_precision=True, weight=dense_share)]


def busiest_rank_load(m, imbalance, ep):
    """The busiest EP rank's routed load over the mean rank's, for a busiest-expert ratio
    `imbalance` (dse.perf.forms.moe.rank_skew: the excess dilutes over the rank's experts)."""
    return MOE.rank_skew(imbalance, m.experts, m.top_k, ep)


def capacity_load(imbalance, capacity, padded):
    """(busiest expert's load over the mean, tokens every expert computes over the mean) of routing
    with busiest-expert ratio `imbalance` under a capacity factor (Megatron-Core
    moe_expert_capacity_factor; 0 = dropless): an expert drops the tokens beyond `capacity` x the
    mean, so its load is min(imbalance, capacity); padded experts (moe_pad_expert_input_to_capacity),
    and all experts when the capacity is at most the mean, compute exactly their capacity."""
    dropping = capacity > 0
    full = dropping & (padded | (capacity <= 1.0))
    busiest = np.where(full, 1.0, np.where(dropping, np.minimum(imbalance, capacity), imbalance))
    return busiest, np.where(full, capacity, 1.0)


def routing_load(m, w, ep):
    """capacity_load of a row's routing (moe_imbalance, its expert capacity) under its per-rank token
    budget (moe_rank_capacity_factor; Megatron-Core moe_expert_rank_capacity_factor: with HybridEP a
    rank drops the tokens beyond budget x the mean rank load): the busiest rank's load is at most the
    budget, so the busiest expert's at most the ratio whose rank skew reaches it; a budget below
    the mean cuts every rank's tokens to it."""
    busiest, full = capacity_load(w["moe_imbalance"], w["moe_capacity_factor"], w["moe_pad_to_capacity"])
    budget = w["moe_rank_capacity_factor"]
    if not np.any(budget > 0):
        return busiest, full
    limit = np.where(budget > 0, MOE.expert_ratio_at_rank_load(budget, m.experts, ep), np.inf)
    return np.minimum(busiest, limit), np.where((budget > 0) & (budget < 1.0), np.minimum(full, budget), full)


def moe_ops(m, s: Shape, operand, moe_share, imbalance, spread=None, token_scale=1.0, per_expert_gemms=False,
            expert_operand=None, expert_gemm_efficiency=1.0) -> list:
    """Router GEMM, the routed experts as one MoE layer kernel (permute, grouped GEMMs, activation,
    unpermute on this GPU's E/ep experts, each sharded over TP, paced by the busiest rank: the fitted
    form of dse.perf.forms.moe, `imbalance` its busiest expert's load over the mean) and the shared
    experts. The all-to-all dispatcher brings each GPU the routed pairs of its EP group's tokens; it
    routes, reads and writes only its own tokens. `spread`: tokens spread evenly over the experts
    (the default where imbalance is 1: balanced training routers) or routed at random (serving: R
    routed pairs touch E_l (1 - (1 - 1/E_l)^R) of the E_l local experts). `token_scale`: the routed
    pairs each expert computes over the mean where experts run full to a capacity (capacity_load).
    `expert_operand`: bytes per element of the routed experts' weights where their format differs
    (expert_precision; the router and shared experts keep `operand`). `per_expert_gemms`: the experts
    as one GEMM per local expert (training frameworks), at `expert_gemm_efficiency` of the dense fit."""
    expert_operand = operand if expert_operand is None else expert_operand
    up = m.mlp_mats - 1
    shared = m.shared_experts * m.moe_ffn / s.tp
    width = m.expert_width   # a routed token's width: the hidden size, or LatentMoE's latent
    shape = {"num_tokens": s.tokens * s.ep * token_scale, "local_tokens": s.tokens, "hidden_size": width, "inter_size": m.moe_ffn,
             "topk": m.top_k, "num_experts": m.experts, "tp_size": s.tp, "ep_size": s.ep, "gated": up,
             "weight_bytes": expert_operand, "busiest_expert_ratio": imbalance,
             "spread": imbalance <= 1.0 if spread is None else spread}
    if per_expert_gemms:   # training frameworks: one GEMM per local expert (dse.perf.roofline.moe_parts)
        shape["per_expert_gemms"] = True
        shape["expert_gemm_efficiency"] = expert_gemm_efficiency
    pairs = s.tokens * m.top_k  # (token, expert) pairs this GPU computes under balanced routing
    flops = 2.0 * pairs * m.mlp_mats * width * m.moe_ffn / s.tp
    # for roofline tables: every local expert's weights once, each pair's row permuted and unpermuted
    # (read + write 16 bit each way), each own token read and written
    nbytes = (m.experts / s.ep * m.mlp_mats * width * m.moe_ffn / s.tp * expert_operand
              + (8.0 * pairs + 4.0 * s.tokens) * width)
    latent = moe_share * (m.latent > 0)   # LatentMoE: hidden -> latent before dispatch, back after combine
    return [
        Op("router", "gemm", "gemm", s.tokens, m.experts, m.hidden, weight=moe_share),
        Op("latent_down", "gemm", "gemm", s.tokens, m.latent / s.tp, m.hidden, operand_bytes=operand,
           low_precision=True, weight=latent),
        Op("latent_up", "gemm", "gemm", s.tokens, m.hidden, m.latent / s.tp, operand_bytes=operand,
           low_precision=True, weight=latent),
        Op("experts", "gemm", "moe", low_precision=True, flops=flops, bytes=nbytes, operand_bytes=expert_operand,
           weight=moe_share, moe=shape),
        Op("shared_expert_up_gate", "gemm", "gemm", s.tokens, up * shared, m.hidden, operand_bytes=operand,
           low_precision=True, weight=moe_share),
        Op("shared_expert_down", "gemm", "gemm", s.tokens, m.hidden, shared, operand_bytes=operand,
           low_precision=True, weight=moe_share),
    ]


# a token's partial sums of squares of its query and of its key projection, in FP32
QK_NORM_SUMS_BYTES = 8.0


def qk_norm_exchange_s(net, tp_in, m, tp, tokens):
    """Seconds per layer of the TP all-reduce a QK-norm over all heads needs (`qk_norm_across_heads`:
    MiniMax-M2's RMSNorm of the whole q and k projections, whose heads the TP ranks split): each rank
    sums the squares of its share and one all-reduce adds both sums for every token (vLLM and SGLang
    MiniMaxText01RMSNormTP), on the attention layers; 0 at tp 1 and for per-head norms. A latency-bound
    collective: at decode sizes it costs about what the layer's two activation all-reduces do."""
    on = (tp > 1) & (m.qk_norm_across_heads > 0)
    if not np.any(on):
        return 0.0
    return np.where(on, net.all_reduce_s(tp, tp_in, tokens * QK_NORM_SUMS_BYTES), 0.0) * m.attention_fraction


def attention_flops(m, seqs, q_len, ctx, tp):
    """Score and attention x V FLOPs of one attention layer over `ctx` keys (no causal saving):
    2 s_q s_k (d_qk + d_v) per head, 4 s_q s_k d when K and V heads are as wide; absorbed MLA
    (DeepSeek Sparse Attention) scores over its latent and rotary key and sums its latent values."""
    return 2.0 * seqs * (m.heads / tp) * q_len * ctx * m.score_dims


def kernel_keys(m, ctx, documents=0.0):
    """Keys per query a causal prefill/training kernel visits, in units of ctx x causal_skip (so a
    full layer gives ctx): a sliding window as causal_capped says, a chunk C < ctx (ctx a multiple of
    C) causal_skip C, a sparse-attention layer's top k as a window of k. Packed sequences of
    `documents`-token documents attend within their document, as a chunk of that length does."""
    keys = ctx
    if np.any(m.window_fraction > 0):
        keys = keys + m.window_fraction * (causal_capped(m.window, ctx) - ctx)
    if np.any(m.chunk_fraction > 0):
        keys = keys + m.chunk_fraction * (np.minimum(np.where(m.chunk > 0, m.chunk, ctx), ctx) - ctx)
    if np.any(m.sparse_topk > 0):   # a query attends to the indexer's top k of the keys before it: a window's count
        keys = keys + m.full_fraction * (causal_capped(m.sparse_topk, ctx) - ctx)
    if np.any(m.csa_fraction + m.hca_fraction > 0):   # V4: the raw window; c compressed keys (c causal_skip), CSA's top k
        raw = np.where(m.window > 0, causal_capped(m.window, ctx), 0.0)
        csa = m.compressed_keys(ctx, m.csa_ratio)
        keys = (keys + m.csa_fraction * (raw + causal_capped(m.sparse_topk, csa) - ctx)
                + m.hca_fraction * (raw + m.compressed_keys(ctx, m.hca_ratio) - ctx))
    if np.any(documents > 0):
        keys = np.where(documents > 0, np.minimum(keys, documents), keys)
    return keys


def causal_capped(limit, n):
    """Mean keys of causal queries 1..n each seeing at most `limit` (> 0; else all) keys, in units of
    causal_skip: W - (1 - causal_skip) W^2 / n for W = min(limit, n) (exact for causal_skip 1/2)."""
    skip = K["causal_skip"]
    w = np.minimum(np.where(limit > 0, limit, n), n)
    return (w - (1.0 - skip) * w * w / np.maximum(n, 1.0)) / skip


def fused_attention_op(m, s: Shape, kv_write_bytes_per_token, weight, backward, documents=0.0,
                       prefill_kv=None) -> Op:
    """FlashAttention-class prefill/training kernel on the attention layers: HBM load of Q, K, V,
    tile GEMMs on chip, HBM store of O (and, serving, the new KV-cache entries); causal masking
    skips half the tiles, windows, chunks and packed documents the tiles outside them.
    `prefill_kv` (serving and inference prefill): the KV cache's format for the fitted prefill form."""
    nbytes = s.tokens * (((m.q_dim + m.o_dim) / s.tp + kv_pair_local(m, s.tp)) * ACT_BYTES + kv_write_bytes_per_token)
    keys = kernel_keys(m, s.ctx, documents)
    return Op("attention", "attention", "fused", s.q_len, keys, m.head_dim,
              flops=attention_flops(m, s.seqs, s.q_len, keys, s.tp) * K["causal_skip"], bytes=nbytes,
              weight=weight * m.attention_fraction, backward=backward, head_dims=m.score_dims,
              per_head_kv=~m.absorbed, prefill_kv=prefill_kv, calls=np.minimum(s.seqs, 1.0))   # serving: prompts per iteration


def unfused_attention_ops(m, s: Shape, dropout, weight) -> list:
    """Megatron-LM's unfused attention: scores GEMM, softmax (+ dropout) over the stored scores,
    attention x V GEMM, all in 16 bit."""
    batch = s.seqs * m.heads / s.tp
    score_bytes = K["unfused_score_bytes"] + K["unfused_dropout_score_bytes"] * dropout
    weight = weight * m.attention_fraction   # every score is computed, windows and chunks masked
    return [Op("attention_scores", "attention", "gemm", s.q_len, s.ctx, m.head_dim, count=batch, weight=weight),
            Op("attention_av", "attention", "gemm", s.q_len, m.v_head_dim, s.ctx, count=batch, weight=weight),
            Op("attention_softmax", "attention", "stream", s.q_len, s.ctx, 1.0,
               bytes=batch * s.q_len * s.ctx * score_bytes, weight=weight)]


def decode_attention_op(m, s: Shape, kv_cache_token, kv_reads, decode_kv=None) -> Op:
    """One query token per sequence against its KV cache (FlashDecoding / XQA: the query heads of a
    KV group share one read of K and V unless `kv_reads` says otherwise), on the GQA attention
    layers; windowed and chunked layers read at most their window or chunk. `decode_kv` (1 over a
    16-bit cache, 2 over an FP8 one) times it in the fitted decode kernel form (dse.perf.attention_kernels)."""
    keys = m.attention_span(s.ctx)
    flops = attention_flops(m, s.seqs, 1.0, keys, s.tp)
    nbytes = s.seqs * keys * kv_cache_token * kv_reads + s.seqs * ((m.q_dim + m.o_dim) / s.tp * ACT_BYTES + kv_cache_token)
    kv_heads = np.maximum(m.kv_heads / s.tp, 1.0)
    shape = None if decode_kv is None else {
        "batch": s.seqs, "kv_len": keys, "heads": m.heads / s.tp, "kv_heads": kv_heads, "qk_dim": m.head_dim,
        "v_dim": m.v_head_dim, "kv_head_bytes_per_token": kv_cache_token / kv_heads, "shared": kv_reads <= 1.0}
    return Op("attention", "attention", "fused", m.heads / np.maximum(m.kv_heads, 1), keys, m.head_dim,
              flops=flops, bytes=nbytes, weight=gqa_share(m), head_dims=m.head_dim + m.v_head_dim,
              decode_kv=decode_kv, decode=shape)


def elementwise_op(m, s: Shape, dense_share, moe_share, hidden_split, *, dropout=0.0, rope=0.0, quantize_bytes=0.0,
                   expert_quantize_bytes=None) -> Op:
    """Norms, residual adds, activation (and dropout, RoPE, and the quantization of low-precision
    GEMM inputs where the phase has them: `quantize_bytes` of HBM traffic per element of each 16-bit
    GEMM input, dse.catalog.precision, `expert_quantize_bytes` for the routed experts' inputs where
    their format differs); `hidden_split` divides the hidden-size terms (sequence parallelism)."""
    expert_quantize_bytes = quantize_bytes if expert_quantize_bytes is None else expert_quantize_bytes
    ffn_local = (dense_share * m.ffn + moe_share * m.moe_ffn * (m.top_k + m.shared_experts)) / s.tp
    activation = 2 * m.mlp_mats * ffn_local          # GeLU: read f, write f; gated: read 2f, write f
    blocks = m.blocks_per_layer / 2.0                 # the constants are per transformer layer (2 blocks)
    # DeepSeek-V4 mHC: a block reads n streams to mix its input, reads and writes n to add its output (x2 blocks)
    streams = 2.0 * 3.0 * (m.residual_streams - 1.0) * ACT_BYTES
    hidden_bytes = ((K["norm_residual_hidden_bytes"] + K["dropout_hidden_bytes"] * dropout + streams) * blocks
                    + K["rope_hidden_bytes"] * rope * m.attention_fraction)
    # 16-bit inputs of the low-precision GEMMs: each block's normed input, the attention output, and
    # the MLP's hidden layer; in an MoE layer every routed copy of a token (the grouped GEMM
    # quantizes its permuted rows) and each expert's hidden layer
    mlp_inputs = dense_share * m.ffn + moe_share * m.shared_experts * m.moe_ffn
    routed_inputs = moe_share * m.top_k * (m.expert_width + m.moe_ffn)
    casts = (quantize_bytes * (2 * blocks * m.hidden / hidden_split + (m.attention_fraction * m.q_dim + mlp_inputs) / s.tp)
             + expert_quantize_bytes * routed_inputs / s.tp)
    per_token = activation + hidden_bytes * m.hidden / hidden_split + casts
    return Op("elementwise", "elementwise", "stream", s.tokens, m.hidden, 1.0, bytes=s.tokens * per_token)


def training_head_ops(m, tokens, tp) -> list:
    """Output layer over every token (BF16) and the FP32 cross entropy: forward + backward of the
    GEMM is 3 GEMMs, the loss's logits traffic is paid forward and backward."""
    logits_bytes = tokens * m.vocab / tp * LOGITS_BYTES * K["loss_passes"]
    return [Op("logits", "head", "gemm", tokens, m.vocab / tp, m.hidden, backward=2.0),
            Op("loss", "head", "stream", tokens, m.vocab / tp, 1.0, bytes=logits_bytes, backward=1.0)]


def mtp_projection_ops(m, tokens, tp) -> list:
    """A multi-token-prediction module's own ops besides its transformer layer and output head: the
    norms of the embedding and of the hidden state, their concatenation and eh_proj, the 2h -> h
    projection split over TP by its output (Megatron-Core MultiTokenPredictionLayer: enorm, hnorm,
    torch.cat, column-parallel eh_proj; megatron/core/transformer/multi_token_prediction.py
    @d98e8a64dd). Streams: each norm reads and writes h, the cat reads and writes 2h, 16-bit."""
    return [Op("mtp_eh_proj", "head", "gemm", tokens, m.hidden / tp, 2.0 * m.hidden, low_precision=True),
            Op("mtp_norms", "head", "stream", tokens, m.hidden, 1.0, bytes=tokens * 8.0 * m.hidden * ACT_BYTES, backward=1.0)]


def serving_head_op(m, seqs, tp) -> Op:
    """LM head on the last token of each sequence (last stage), in 16 bits whatever the layers'
    format: quantized checkpoints keep it unquantized (TensorRT Model Optimizer's default configs
    disable the "*lm_head*" and "*output_layer*" quantizers; vLLM's FP8 method quantizes linear
    layers and the LM head is a vocabulary embedding)."""
    return Op("lm_head", "head", "gemm", seqs, m.vocab / tp, m.hidden, operand_bytes=ACT_BYTES)


def layer_shares(m):
    """(dense-MLP share, MoE share) of the model's layers (they sum to mlp_layer_fraction)."""
    moe = np.where(m.layers > 0, m.moe_layers / m.layers, 0.0)
    return np.where(m.layers > 0, m.dense_layers / m.layers, 0.0), moe


# An op whose weight is zero on most rows of a block (the Mamba layers of a block mixing dense,
# MoE and hybrid models, the dense MLP of an all-MoE model) is timed on its live rows only.
SPARSE_ROWS_BELOW = 0.5


def rows_of(value, idx, n):
    """`value` restricted to rows `idx`: 1-D arrays of n rows are indexed, dataclasses (Op, Rates and
    what they hold) field by field, anything else (scalars, broadcast constants) kept."""
    if isinstance(value, np.ndarray):
        return value[idx] if value.ndim == 1 and len(value) == n else value
    if hasattr(value, "rows_of"):  # lazily read parameters (dse.perf.roofline.per_format)
        return value.rows_of(idx, n)
    if isinstance(value, dict):    # an op's shape (the MoE layer's)
        return {k: rows_of(v, idx, n) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        out = copy(value)
        for name, field_value in vars(value).items():
            restricted = isinstance(field_value, (np.ndarray, dict)) or is_dataclass(field_value)
            if restricted or hasattr(field_value, "rows_of"):
                object.__setattr__(out, name, rows_of(field_value, idx, n))
        return out
    return value


def weighted(fn, op: Op, rates, cache: dict | None = None):
    """fn(op, rates) (seconds, or a tuple of them) times op.weight, evaluated only on the rows where
    the weight is positive when those are a minority of the block; zero elsewhere. `cache` (one
    dict per block) keeps the live rows and the rates restricted to them per weight array."""
    w = op.weight
    if np.ndim(w) == 0 or len(w) == 0:
        out = fn(op, rates)
        return tuple(x * w for x in out) if isinstance(out, tuple) else out * w
    out = _weighted_rows(fn, op, rates, cache, w)
    if w.dtype.kind != "f":
        return out
    # in the weight's float type, so a row's sum does not depend on which other ops its block has
    return tuple(x.astype(w.dtype, copy=False) for x in out) if isinstance(out, tuple) else out.astype(w.dtype, copy=False)


def _times_weight(x, w, live):
    """x * w on the live rows (`live`: their indices), 0 on the others."""
    return x * w if len(live) == len(w) else np.where(w > 0, x * w, 0.0)


def _weighted_rows(fn, op: Op, rates, cache, w):
    n = len(w)
    key = id(w)
    if cache is not None and key in cache and cache[key][0] is w:
        _, live, sub_rates = cache[key]
    else:
        live = np.flatnonzero(w > 0)
        sub_rates = rows_of(rates, live, n) if len(live) < SPARSE_ROWS_BELOW * n else None
        if cache is not None:
            cache[key] = (w, live, sub_rates)
    if sub_rates is None:   # rows the op does not run on give 0, whatever fn says of them (0 x NaN)
        out = fn(op, rates)
        return tuple(_times_weight(x, w, live) for x in out) if isinstance(out, tuple) else _times_weight(out, w, live)
    sub = fn(rows_of(op, live, n), sub_rates)

    def scatter(x):
        full = np.zeros(n, dtype=np.result_type(x, w))
        full[live] = np.broadcast_to(x, live.shape) * w[live]
        return full
    return tuple(scatter(x) for x in sub) if isinstance(sub, tuple) else scatter(sub)
