"""Time of one attention kernel (prefill and decode; MHA/GQA/MQA and DeepSeek MLA), in the forms
`dse calibrate` fits to measured kernels (families "attention" and "mla").

Prefill (context) attention is a causal FlashAttention-style kernel. Its time is

    floor_s + tiles * tile_s + bytes / (bandwidth * memory_efficiency)
            + 2 * b * h * rows * span * (qk_dim + v_dim + 2 * softmax_dim) / (peak * efficiency_max)

- `rows = ceil(s / q_tile_rows) * q_tile_rows`: query rows rounded up to the query tile one CTA
  owns (64 or 128 rows, whichever fits the kernels: a discrete parameter); `tiles = b * h * rows /
  q_tile_rows` such tiles each pay `tile_s` (prologue, Q load, softmax rescale and output
  epilogue; the whole cost of a short prompt).
- `span`: the keys one query row is computed against, tile-quantised: about (rows + q_tile_rows) / 2
  under the causal mask, at most `window + q_tile_rows + window_extra_keys` with a sliding window
  (`window_extra_keys`: the partial key blocks a kernel computes at the band's edges; about 700 for
  Hopper's FP8 kernels, 0-150 elsewhere).
- `softmax_dim`: the exponentials and rescaling of each score element, counted as extra head
  dimensions of MMA work (a fixed cost per score, so small heads and FP8 MMAs reach a smaller
  fraction of peak).
- bytes: the passes that do not overlap the MMAs, per token: for MHA/GQA the fused RoPE/KV-cache
  pass and the FMHA's own Q, K, V reads and O write (`mha_prefill_bytes_per_token`); for MLA only
  the RoPE of the 64-wide rope part and the latent-cache write (`mla_prefill_bytes_per_token`).
  `memory_efficiency` also absorbs what such a pass computes (FP8 quantisation of the cache).

Decode (generation) attention reads each sequence's whole KV cache for one new token:

    floor_s + (items_s**4 + memory_s**4 + compute_s**4) ** (1/4)

- items_s = b * (kv_heads * group_item_s + heads * query_item_s) for the grouped kernel (2 to 32
  query heads per KV head share one CTA and one KV read; MLA's heads all share its one latent KV
  head), b * heads * head_item_s for per-head kernels (MHA, or groups too large to pack, where
  each query head reads its KV head again).
- memory_s = KV (and Q/O) bytes / (bandwidth * bandwidth_efficiency) * (1 + half_streams / streams),
  streams = concurrent (sequence x KV head) work items: few streams cannot keep HBM busy (kernels
  that split long sequences over several CTAs fit a small `half_streams`).
- compute_s = 2 * b * h * kv_len * (qk_dim + v_dim) / (peak * efficiency_max), with the prefill's
  MMA efficiency; it binds only for MLA, whose 128 heads share one latent KV.
- The 4-norm is a smooth max: the limits overlap almost completely (kernels pipeline loads, MMAs
  and per-item work), but not at the seams.

MLA (DeepSeek-V3: kv_lora_rank 512, q_lora_rank 1536, nope 128, rope 64, v 128) uses the same two
forms: prefill runs as MHA with qk 192 / v 128 per head and writes the 576-element latent cache;
decode runs absorbed, every head reading the shared compressed KV (512 + 64 per token) with head
dims 576 (scores) and 512 (values).

How the parameters carry over to an accelerator derived from technology (no kernel data):
efficiency_max, memory_efficiency and bandwidth_efficiency are fractions of the catalog peak and
bandwidth: carry them over unchanged. floor_s is a launch-and-drain latency: carry it over.
q_tile_rows and window_extra_keys are kernel design choices: carry them over.
tile_s and the item costs are GPU-wide seconds per work item (one CTA's time over the CTAs in
flight): scale them by old/new SM count (and clock). half_streams is the work items needed to
keep the memory system busy: scale it with the SM count. softmax_dim is the ratio of MMA to
special-function (exponential) throughput in head-dimension units: carry it over for the same
format, raise it when a format speeds up MMAs but not exponentials (FP8 fits about twice the BF16
value).
"""
from __future__ import annotations

import numpy as np

Q_TILE_ROWS = (64, 128)    # query rows per CTA tile the prefill kernels use (a fitted choice)
GROUP_MAX_HEADS = 32       # query heads per KV head the grouped decode kernel packs into one CTA
ACT_BYTES = 2.0            # Q, K, V inputs and the output are bf16

# DeepSeek-V3 multi-head latent attention.
MLA_KV_LORA_RANK = 512
MLA_ROPE_DIM = 64
MLA_NOPE_DIM = 128
MLA_V_HEAD_DIM = 128
MLA_LATENT_DIM = MLA_KV_LORA_RANK + MLA_ROPE_DIM      # 576 elements per token per layer


def prefill_rows_span(seq, window, tile_rows, window_extra_keys=0.0):
    """(query rows computed, keys per query row) of a causal prefill, quantised to `tile_rows`; a
    sliding window costs `window_extra_keys` beyond window + tile (the band's partial key tiles)."""
    seq = np.asarray(seq, float)
    rows = np.ceil(seq / tile_rows) * tile_rows
    span = np.clip((rows + tile_rows) / 2.0, tile_rows, rows)
    window = np.asarray(window, float)
    return rows, np.where(window > 0, np.minimum(span, window + tile_rows + window_extra_keys), span)


def prefill_flops(batch, seq, heads, qk_dim, v_dim, window):
    """Useful FLOPs of causal prefill attention (QK^T and PV over the keys each query sees: i + 1
    for query i, at most `window`)."""
    seq, window = np.asarray(seq, float), np.asarray(window, float)
    capped = (window > 0) & (seq > window)
    keys = np.where(capped, window - window * (window - 1.0) / (2.0 * np.maximum(seq, 1.0)), (seq + 1.0) / 2.0)
    return 2.0 * batch * heads * seq * keys * (qk_dim + v_dim)


def prefill_time_s(batch, seq, heads, qk_dim, v_dim, window, bytes_per_token,
                   peak_flops_per_s, memory_bandwidth_bytes_per_s,
                   efficiency_max, softmax_dim, tile_s, tile_rows, floor_s, memory_efficiency,
                   window_extra_keys=0.0):
    """Seconds of one prefill attention kernel over `batch` prompts of `seq` tokens (module docstring).
    `window` 0 is full causal attention; `bytes_per_token` is the memory traffic of the passes that
    do not overlap the MMAs (RoPE and the KV-cache write: `mha_prefill_bytes_per_token`)."""
    batch, seq = np.asarray(batch, float), np.asarray(seq, float)
    rows, span = prefill_rows_span(seq, window, tile_rows, window_extra_keys)
    mma = 2.0 * batch * heads * rows * span * (qk_dim + v_dim + 2.0 * softmax_dim) / (peak_flops_per_s * efficiency_max)
    tiles = batch * heads * rows / tile_rows * tile_s
    moved = batch * seq * bytes_per_token
    return floor_s + tiles + moved / (memory_bandwidth_bytes_per_s * memory_efficiency) + mma


def mha_prefill_bytes_per_token(heads, kv_heads, head_dim, kv_bytes):
    """Bytes per token of MHA/GQA prefill outside the MMAs: Q, K, V read and O written once in bf16
    (the fused RoPE pass and the FMHA's loads overlap imperfectly), plus the K, V cache write."""
    return ACT_BYTES * (heads + kv_heads) * 2.0 * head_dim + 2.0 * kv_heads * head_dim * kv_bytes


def mla_prefill_bytes_per_token(heads, kv_bytes):
    """Bytes per token of MLA prefill outside the FMHA main loop: RoPE of the rope part of Q and K
    (read and written) and the latent-cache write."""
    return ACT_BYTES * 2.0 * (heads + 1.0) * MLA_ROPE_DIM + MLA_LATENT_DIM * kv_bytes


def gqa_grouped(heads, kv_heads):
    """True where the grouped decode kernel runs (2..32 query heads per KV head)."""
    group = np.asarray(heads, float) / np.asarray(kv_heads, float)
    return (group > 1) & (group <= GROUP_MAX_HEADS)


def decode_time_s(batch, kv_len, heads, kv_heads, qk_dim, v_dim, window, kv_bytes_per_token, grouped,
                  peak_flops_per_s, memory_bandwidth_bytes_per_s, efficiency_max,
                  floor_s, group_item_s, query_item_s, head_item_s, bandwidth_efficiency, half_streams):
    """Seconds of one decode attention kernel: `batch` sequences each attending from one new token
    to `kv_len` tokens (cached + new; `window` > 0 caps it). `kv_bytes_per_token` is the KV cache
    of one token over all `kv_heads`; `grouped` (see `gqa_grouped`) picks the kernel kind."""
    batch, kv_heads = np.asarray(batch, float), np.asarray(kv_heads, float)
    window = np.asarray(window, float)
    keys = np.where(window > 0, np.minimum(kv_len, window), kv_len)
    group = heads / kv_heads
    streams = batch * np.where(grouped, kv_heads, heads)
    items = batch * np.where(grouped, kv_heads * group_item_s + heads * query_item_s, heads * head_item_s)
    reads = np.where(grouped, 1.0, group)   # a per-head kernel reads the shared KV head per query head
    moved = batch * (keys * kv_bytes_per_token * reads + ACT_BYTES * heads * (qk_dim + v_dim))
    memory = moved / (memory_bandwidth_bytes_per_s * bandwidth_efficiency) * (1.0 + half_streams / streams)
    compute = 2.0 * batch * heads * keys * (qk_dim + v_dim) / (peak_flops_per_s * efficiency_max)
    return floor_s + (items ** 4 + memory ** 4 + compute ** 4) ** 0.25   # smooth max (module docstring)


def attention_prefill_time_s(batch, seq, heads, kv_heads, head_dim, window, kv_bytes, peak_flops_per_s,
                             memory_bandwidth_bytes_per_s, p: dict):
    """Prefill of MHA/GQA/MQA attention with a Fit's `prefill_*` parameters (`p`); `kv_bytes` is
    the bytes per element of the KV cache (2 bf16, 1 fp8)."""
    return prefill_time_s(batch, seq, heads, head_dim, head_dim, window,
                          mha_prefill_bytes_per_token(heads, kv_heads, head_dim, kv_bytes),
                          peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          p["prefill_efficiency_max"], p["prefill_softmax_dim"], p["prefill_tile_s"],
                          p["prefill_q_tile_rows"], p["prefill_floor_s"], p["prefill_memory_efficiency"],
                          p["prefill_window_extra_keys"])


def attention_decode_time_s(batch, kv_len, heads, kv_heads, head_dim, window, kv_bytes, peak_flops_per_s,
                            memory_bandwidth_bytes_per_s, p: dict):
    """Decode of MHA/GQA/MQA attention with a Fit's `prefill_efficiency_max` and `decode_*` parameters."""
    return decode_time_s(batch, kv_len, heads, kv_heads, head_dim, head_dim, window,
                         2.0 * kv_heads * head_dim * kv_bytes, gqa_grouped(heads, kv_heads),
                         peak_flops_per_s, memory_bandwidth_bytes_per_s, p["prefill_efficiency_max"],
                         p["decode_floor_s"], p["decode_group_item_s"], p["decode_query_item_s"],
                         p["decode_head_item_s"], p["decode_bandwidth_efficiency"], p["decode_half_streams"])


def mla_prefill_time_s(batch, seq, heads, kv_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: dict):
    """Prefill MLA (DeepSeek-V3 dims, `heads` per GPU) with an "mla" Fit's `prefill_*` parameters."""
    return prefill_time_s(batch, seq, heads, MLA_NOPE_DIM + MLA_ROPE_DIM, MLA_V_HEAD_DIM, 0.0,
                          mla_prefill_bytes_per_token(heads, kv_bytes), peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          p["prefill_efficiency_max"], p["prefill_softmax_dim"], p["prefill_tile_s"],
                          p["prefill_q_tile_rows"], p["prefill_floor_s"], p["prefill_memory_efficiency"])


def mla_decode_time_s(batch, kv_len, heads, kv_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: dict):
    """Absorbed decode MLA: all `heads` (per GPU) read one shared latent KV of 576 elements per token
    (one work item per sequence), with an "mla" Fit's `prefill_efficiency_max` and `decode_*` parameters."""
    return decode_time_s(batch, kv_len, heads, 1.0, MLA_LATENT_DIM, MLA_KV_LORA_RANK, 0.0,
                         MLA_LATENT_DIM * kv_bytes, True, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                         p["prefill_efficiency_max"], p["decode_floor_s"], p["decode_group_item_s"],
                         p["decode_query_item_s"], 0.0, p["decode_bandwidth_efficiency"], p["decode_half_streams"])
