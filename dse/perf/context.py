"""Context parallelism in training: the exposed communication of one layer per micro-batch under
the framework's `cp_comm` (Megatron-Core cp_comm_type, Transformer Engine's implementations), and
the re-sharding all-to-alls of state-space and linear-attention layers."""
from __future__ import annotations

import numpy as np

from dse import catalog
from dse.columns import only_where
from dse.perf import memory as M
from dse.perf import roofline as R
from dse.perf.collectives import ranks_per_domain

K = catalog.constants()


def ring_steps(m, cp):
    """K/V ring steps per attention layer on average: cp - 1 on full layers; a window or chunk that
    spans fewer sequence shards needs only the steps that reach it."""
    steps = cp - 1
    shard = m.seq_len / np.maximum(cp, 1)
    for fraction, limit in ((m.window_fraction, m.window), (m.chunk_fraction, m.chunk)):
        if np.any(fraction > 0):
            reach = np.where(limit > 0, np.minimum(np.ceil(limit / shard), cp - 1), cp - 1)
            steps = steps + fraction * (reach - (cp - 1))
    return steps


def recurrent_cp_bytes(m, tokens, tp):
    """Bytes each rank re-shards per Mamba-2 / Gated DeltaNet layer under context parallelism (all
    of the in_proj output from sequence to heads, the scan output back), averaged over the layers."""
    per_token = 0.0
    if m.mamba is not None:
        per_token = per_token + m.mamba_fraction * (m.mamba.in_proj + m.mamba.inner)
    if m.linear is not None:
        per_token = per_token + m.linear_fraction * (m.linear.in_proj + m.linear.value_dim)
    return tokens * per_token / tp * M.ACT_BYTES


def cp_a2a_group(domain, cp, tp, kind):
    """CP ranks of one all-to-all group: all of them for a2a, the scale-up domain's share for
    a2a+p2p (whose ring then crosses cp / that many domains); 1 for p2p and all_gather."""
    return np.select([kind == 2, kind == 3], [cp, ranks_per_domain(cp, tp, domain)], 1.0)


def cp_attention_comm(net, place, m, w, cp, tp, tokens, layer):
    """Exposed (forward, backward) communication of one attention layer under context parallelism,
    by the framework's `cp_comm` (Megatron-Core cp_comm_type; Transformer Engine's implementations):
      p2p       K/V chunks pass around a ring (ring_steps), each step hidden behind the attention of
                the chunk at hand where that is long enough, plus a softmax-correction pass over the
                output per step; the backward passes K/V and their gradients (twice the traffic);
      all_gather every rank gathers the whole K/V before attention (backward: reduce-scatter of
                their gradients), not overlapped;
      a2a       (Ulysses) all-to-alls of Q, K, V before and of O after attention switch from
                sequence to head sharding (backward: the same volume), not overlapped;
      a2a+p2p   an all-to-all among the CP ranks of one scale-up domain, then a ring across domains.
    GQA shrinks the K/V terms (kv_dim, v_dim), absorbed MLA (DeepSeek Sparse Attention) to its latent,
    compressed attention (DeepSeek-V4) to one key per ratio tokens on its compressed layers."""
    kind = w["cp_comm"]
    # absorbed MLA (DeepSeek Sparse Attention) exchanges the latent every head shares, whole on each TP rank
    kv = tokens * np.where(m.absorbed, m.kv_lora + m.rope_dim, (m.kv_dim + m.v_dim) / tp) * M.ACT_BYTES
    if np.any(m.csa_fraction + m.hca_fraction > 0):   # DeepSeek-V4's compressed layers pass their compressed keys
        kv = kv * m.compressed_kv_share
    qkvo = tokens * (m.q_dim + m.kv_dim + m.v_dim + m.o_dim) / tp * M.ACT_BYTES
    attn_fwd, attn_bwd = layer.attn_fwd, layer.attn_bwd
    g = cp_a2a_group(place.domain, cp, tp, kind)
    ring_ranks = np.where(kind == 0, cp, cp / g)         # the ring of p2p, or of a2a+p2p across domains
    steps = ring_steps(m, ring_ranks) if np.any(kind != 2) else 0.0
    stride = np.where(kind == 0, place.cp_stride, place.cp_stride * g)
    # after a2a+p2p's all-to-all a rank holds heads/g for g x tokens: its K/V chunk is as large
    ring = m.attention_fraction * steps * net.p2p_s(stride, kv)
    correction = m.attention_fraction * steps * R.stream_time_s(
        tokens * m.o_dim / tp * K["cp_correction_bytes"], w["memory_bandwidth_bytes_per_s"], w["memory_efficiency"])
    ring_fwd, ring_bwd = np.maximum(ring - attn_fwd, 0.0) + correction, np.maximum(2 * ring - attn_bwd, 0.0) + correction
    a2a = m.attention_fraction * net.all_to_all_s(g, g, qkvo) if np.any(kind >= 2) else 0.0
    gather = (m.attention_fraction * net.all_gather_s(cp, ranks_per_domain(cp, tp, place.domain), kv * cp)
              if np.any(kind == 1) else 0.0)
    scatter = (m.attention_fraction * net.reduce_scatter_s(cp, ranks_per_domain(cp, tp, place.domain), kv * cp)
               if np.any(kind == 1) else 0.0)
    fwd = np.select([kind == 1, kind == 2, kind == 3], [gather, a2a, a2a + ring_fwd], ring_fwd)
    bwd = np.select([kind == 1, kind == 2, kind == 3], [gather + scatter, a2a, a2a + ring_bwd], ring_bwd)
    return fwd, bwd


def cp_comm(net, place, m, w, cp, tp, tokens, layer):
    """Exposed context-parallel communication (forward, backward) of one layer: attention layers as
    `cp_attention_comm` says. State-space and linear-attention layers cannot pass a ring (their scan
    carries a state along the sequence): Megatron-Core re-shards them from sequence to heads with
    all-to-alls before the conv and scan and back after it (ssm/mamba_context_parallel.py,
    gated_delta_net/gdn.py; heads must divide tp x cp), not overlapped; the backward repeats them."""
    fwd, bwd = only_where(cp > 1, lambda: cp_attention_comm(net, place, m, w, cp, tp, tokens, layer), (0.0, 0.0))
    like = np.result_type(layer.attn_fwd)
    fwd = np.where(cp > 1, fwd, 0.0).astype(like, copy=False)   # a cp = 1 row: the same type alone or not
    bwd = np.where(cp > 1, bwd, 0.0).astype(like, copy=False)
    if m.mamba is not None or m.linear is not None:
        a2a = only_where(cp > 1, lambda: net.all_to_all_s(cp, ranks_per_domain(cp, tp, place.domain),
                                                           recurrent_cp_bytes(m, tokens, tp)))
        recurrent = (cp > 1) & (m.mamba_fraction + m.linear_fraction > 0)   # a zero-byte all-to-all still pays latency
        a2a = np.where(recurrent, a2a, 0.0).astype(like, copy=False)   # as if alone in the block
        fwd, bwd = fwd + a2a, bwd + a2a
    return fwd, bwd
