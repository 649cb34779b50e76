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

Decode (generation) attention reads each sequence's whole KV cache for one new token. The kernels
(TensorRT-LLM's XQA and masked-MHA; trtllm-gen on Blackwell) run one CTA per work item and split
long KV over several CTAs when the items alone would leave SMs idle, so the time is that of waves
of CTAs, overlapped with the HBM stream:

    floor_s [+ head_floor_s] [+ split_s] + sqrt(latency_s**2 + sqrt(memory_s**4 + compute_s**4))

- Kernel choice. The grouped kernel gives one CTA to a (sequence, KV head) and its 2..32 query
  heads (MLA: all heads of the one latent KV head, at most GROUP_TILE_HEADS per CTA). It runs where
  it supports the shape and the (sequence x KV head x SPLIT_KEYS-key block) items reach
  `decode_grouped_min_items` (TensorRT-LLM's XQA dispatch: a quarter of the SMs; 0 where the
  grouped kernel always runs: FP8 caches, Blackwell, A100). Elsewhere (MHA, groups over 32, few
  items) the per-head kernel gives each (sequence, query head) a CTA, and every query head reads
  its KV head again: from L2 for all but the first, at `decode_reread_fraction` of an HBM read.
- Splits. The grouped kernel splits a sequence's history into one part per SPLIT_KEYS
  (`decode_split_keys`) keys, at most about sqrt(8 x that) (the final reduction must not
  dominate), and fewer when the CTAs would exceed SPLIT_WAVES waves (`grouped_splits`, TensorRT-LLM's
  multi-block heuristic). The splits span the whole history: under a sliding window only those
  overlapping it hold keys, the others cost `decode_empty_split_s` each (GPU-wide, per SM). The
  per-head kernel splits to give every SM a CTA, each at least PER_HEAD_SPLIT_ELEMENTS / head_dim
  keys (`per_head_splits`). A split launch pays `decode_split_s` (`decode_head_split_s`) once:
  the partial-result write and the reduction of the last CTA.
- latency_s = waves * CTA time, waves = ceil(CTAs / `decode_sm_count`) (one CTA per SM at a time:
  the steps along constant batch x KV-length diagonals), CTA time = `decode_cta_s` + keys per CTA
  * `decode_key_s` + query heads per CTA * qk_dim / 128 * `decode_query_s` (grouped) or
  `decode_head_cta_s` + keys per CTA * `decode_head_key_s` (per head).
- memory_s = KV (with the per-head re-reads) and Q/O bytes / (bandwidth * bandwidth_efficiency).
- compute_s = 2 * b * h * keys * (qk_dim + v_dim) / (peak * efficiency_max), with the prefill's
  MMA efficiency; it binds only for MLA, whose 128 heads share one latent KV.
- The norms are smooth maxima: loads and MMAs pipeline almost completely (4-norm), the per-CTA
  latency chain and the stream only partly (2-norm).
- Discrete parameters, chosen by the fit: `decode_sm_count` (effective CTA slots per wave, also
  the SM count of the split heuristic: 132 fits Hopper), `decode_grouped_min_items` (0 or
  decode_sm_count / 4) and, for MLA, `decode_split_keys` (128; 3000 for Blackwell's and Hopper's
  FP8-cache kernels; 0 for the A100 tables' one CTA per sequence).

MLA (DeepSeek-V3: kv_lora_rank 512, q_lora_rank 1536, nope 128, rope 64, v 128) uses the same two
forms: prefill runs as MHA with qk 192 / v 128 per head and writes the 576-element latent cache;
decode runs absorbed, every head reading the shared compressed KV (512 + 64 per token) with head
dims 576 (scores) and 512 (values).

How the parameters carry over to an accelerator derived from technology (no kernel data):
efficiency_max, memory_efficiency and bandwidth_efficiency are fractions of the catalog peak and
bandwidth: carry them over unchanged. floor_s is a launch-and-drain latency: carry it over.
q_tile_rows, window_extra_keys, decode_split_keys and decode_grouped_min_items (as a fraction of
decode_sm_count) are kernel design choices: carry them over; decode_sm_count is the SM count: set
it to the new part's. tile_s is GPU-wide seconds per work item (one CTA's time over the CTAs in
flight): scale it by old/new SM count (and clock), and so decode_empty_split_s. The other decode
CTA, key, query and split costs are one CTA's (or one launch's) latencies: scale them by the clock
only. decode_reread_fraction is an L2 to HBM cost ratio: carry it over. softmax_dim is the ratio of MMA to special-function (exponential)
throughput in head-dimension units: carry it over for the same format, raise it when a format
speeds up MMAs but not exponentials (FP8 fits about twice the BF16 value).
"""
from __future__ import annotations

import numpy as np

Q_TILE_ROWS = (64, 128)    # query rows per CTA tile the prefill kernels use (a fitted choice)
GROUP_MAX_HEADS = 32       # query heads per KV head the grouped decode kernel packs into one CTA
GROUP_TILE_HEADS = 64      # query heads one grouped decode CTA computes at most (MLA tiles its heads)
SPLIT_KEYS = 128.0         # history keys per KV split of the grouped decode kernel (and per gate block)
SPLIT_WAVES = 8.0          # the grouped kernel splits the KV at most to this many waves of CTAs
PER_HEAD_SPLIT_ELEMENTS = 32768.0   # keys x head_dim one per-head decode CTA processes at least
ACT_BYTES = 2.0            # Q, K, V inputs and the output are bf16

# DeepSeek-V3 multi-head latent attention.
MLA_KV_LORA_RANK = 512
MLA_ROPE_DIM = 64
MLA_NOPE_DIM = 128
MLA_V_HEAD_DIM = 128
MLA_LATENT_DIM = MLA_KV_LORA_RANK + MLA_ROPE_DIM      # 576 elements per token per layer


def mma_fraction(efficiency_max, softmax_dim, head_dims):
    """Fraction of the peak a long prefill's attention FLOPs reach at qk + v head dims `head_dims`:
    the softmax costs `softmax_dim` extra head dimensions of MMA time per score element, twice
    (exponentials and rescaling), so narrow heads reach less of efficiency_max."""
    return efficiency_max * head_dims / (head_dims + 2.0 * softmax_dim)


def head_dims_scale(softmax_dim, head_dims):
    """`mma_fraction` at `head_dims` over its value at 128 + 128, the head dims the catalog's
    attention_efficiency is stated at (dse.catalog.fitted)."""
    return mma_fraction(1.0, softmax_dim, head_dims) / mma_fraction(1.0, softmax_dim, 256.0)


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
    """True where the grouped decode kernel can run (2..32 query heads per KV head)."""
    group = np.asarray(heads, float) / np.asarray(kv_heads, float)
    return (group > 1) & (group <= GROUP_MAX_HEADS)


def _real(x):
    """`x` as a float array: float32 stays float32 (the model's row blocks), anything else float64."""
    x = np.asarray(x)
    return x if x.dtype == np.float32 else x.astype(float)


def grouped_splits(history, items, sm_count, split_keys=SPLIT_KEYS):
    """KV splits per (sequence, KV head) of the grouped kernel: one per `split_keys` keys of history,
    at most about sqrt(8 x that) (the final reduction must not dominate), and fewer when the
    CTAs would exceed SPLIT_WAVES waves of `sm_count`. `split_keys` 0: no split-KV mode."""
    history, items = _real(history), _real(items)
    if split_keys <= 0:
        return np.ones(np.broadcast(history, items).shape)
    n = np.maximum(np.floor(history / split_keys), 1.0)
    n = np.maximum(np.minimum(n, np.round(np.sqrt(8.0 * n))), 1.0)
    waves = items * n / sm_count
    n = np.where(waves > SPLIT_WAVES, np.floor(n * SPLIT_WAVES / waves), n)
    return np.maximum(n, 1.0)


def per_head_splits(keys, items, sm_count, head_dim):
    """KV splits per (sequence, query head) of the per-head kernel: enough to give every SM a CTA,
    each at least PER_HEAD_SPLIT_ELEMENTS / head_dim keys."""
    keys, items = _real(keys), _real(items)
    return np.clip(np.ceil(sm_count / items), 1.0, np.maximum(np.ceil(keys * head_dim / PER_HEAD_SPLIT_ELEMENTS), 1.0))


def decode_shape_terms(batch, kv_len, heads, kv_heads, qk_dim, v_dim, window, kv_head_bytes_per_token, grouped_ok,
                       sm_count, grouped_min_items=0.0, split_keys=SPLIT_KEYS, per_head=True) -> dict:
    """The parameter-free part of `decode_time_s` (kernel choice, splits, waves, bytes, FLOPs) for
    given dispatch constants: `sm_count` (`decode_sm_count`), `grouped_min_items`
    (`decode_grouped_min_items`), `split_keys` (`decode_split_keys`); `per_head` False: the grouped
    kernel always runs (MLA)."""
    b, kv_len, kvh, h, window, qk_dim = (_real(x) for x in (batch, kv_len, kv_heads, heads, window, qk_dim))
    b, kv_len, kvh, h, window, qk_dim = np.broadcast_arrays(b, kv_len, kvh, h, window, qk_dim)
    history = np.maximum(kv_len - 1.0, 0.0)
    keys = np.where(window > 0, np.minimum(kv_len, window), kv_len)
    group = h / kvh
    if per_head:
        blocks = b * kvh * np.maximum(np.floor(history / SPLIT_KEYS), 1.0)
        grouped = np.asarray(grouped_ok, bool) & (blocks >= grouped_min_items)
    else:
        grouped = np.ones(b.shape, bool)
    # grouped kernel: a CTA per (sequence, KV head, split); the splits span the whole history, so
    # under a sliding window only those overlapping it have keys (the others are "empty")
    tiles = np.ceil(group / GROUP_TILE_HEADS)   # query-head tiles per KV head (MLA's 128 heads: 2)
    items_g = b * kvh * tiles
    splits_g = grouped_splits(history, items_g, sm_count, split_keys)
    active = np.minimum(splits_g, np.ceil(keys / np.maximum(history / splits_g, 1.0)) + 1.0)
    t = {"grouped": grouped, "group_dims": group / tiles * qk_dim / 128.0,
         "waves_g": np.ceil(items_g * active / sm_count), "keys_g": keys / active,
         "empty_g": items_g * (splits_g - active) / sm_count, "split_g": splits_g > 1,
         "kv_bytes": b * keys * kvh * kv_head_bytes_per_token, "act_bytes": b * ACT_BYTES * h * (qk_dim + v_dim),
         "flops": 2.0 * b * h * keys * (qk_dim + v_dim), "rereads": np.zeros(b.shape)}
    if per_head:
        # per-head kernel: a CTA per (sequence, query head, split); each query head reads its KV
        # head again (from L2 for all but the first)
        items_h = b * h
        splits_h = per_head_splits(keys, items_h, sm_count, qk_dim)
        t |= {"waves_h": np.ceil(items_h * splits_h / sm_count), "keys_h": keys / splits_h, "split_h": splits_h > 1,
              "rereads": np.where(grouped, 0.0, group - 1.0)}
    return t


def decode_from_terms(t: dict, peak_flops_per_s, memory_bandwidth_bytes_per_s, efficiency_max, p: dict,
                      gradient: bool = False):
    """`decode_time_s` from its `decode_shape_terms` and the `decode_*` parameters `p`; with
    `gradient` also {parameter: d seconds / d parameter} of the continuous parameters (for fits)."""
    grouped = t["grouped"]
    per_head = "waves_h" in t
    lat_g = t["waves_g"] * (p["decode_cta_s"] + t["keys_g"] * p["decode_key_s"] + t["group_dims"] * p["decode_query_s"]) \
        + t["empty_g"] * p.get("decode_empty_split_s", 0.0)
    split_s = np.where(t["split_g"], p["decode_split_s"], 0.0)
    floor = p["decode_floor_s"]
    reads = 1.0
    latency = lat_g
    if per_head:
        latency = np.where(grouped, lat_g, t["waves_h"] * (p["decode_head_cta_s"] + t["keys_h"] * p["decode_head_key_s"]))
        split_s = np.where(grouped, split_s, np.where(t["split_h"], p["decode_head_split_s"], 0.0))
        floor = floor + np.where(grouped, 0.0, p["decode_head_floor_s"])
        reads = 1.0 + t["rereads"] * p["decode_reread_fraction"]
    rate = memory_bandwidth_bytes_per_s * p["decode_bandwidth_efficiency"]
    memory = (t["kv_bytes"] * reads + t["act_bytes"]) / rate
    compute = t["flops"] / (peak_flops_per_s * efficiency_max)
    throughput = np.sqrt(memory ** 4 + compute ** 4)
    overlap = np.sqrt(latency ** 2 + throughput)      # smooth max (module docstring)
    seconds = floor + split_s + overlap
    if not gradient:
        return seconds
    d_lat = latency / overlap
    d_mem = memory ** 3 / (overlap * throughput)
    g = grouped.astype(float) if per_head else 1.0
    grad = {"decode_floor_s": np.ones_like(seconds), "decode_split_s": np.where(t["split_g"], g, 0.0),
            "decode_cta_s": d_lat * t["waves_g"] * g, "decode_key_s": d_lat * t["waves_g"] * t["keys_g"] * g,
            "decode_query_s": d_lat * t["waves_g"] * t["group_dims"] * g, "decode_empty_split_s": d_lat * t["empty_g"] * g,
            "decode_bandwidth_efficiency": -d_mem * memory / p["decode_bandwidth_efficiency"]}
    if per_head:
        h = 1.0 - g
        grad |= {"decode_head_floor_s": h, "decode_head_split_s": np.where(t["split_h"], h, 0.0),
                 "decode_head_cta_s": d_lat * t["waves_h"] * h, "decode_head_key_s": d_lat * t["waves_h"] * t["keys_h"] * h,
                 "decode_reread_fraction": d_mem * t["kv_bytes"] * t["rereads"] / rate}
    return seconds, grad


def decode_time_s(batch, kv_len, heads, kv_heads, qk_dim, v_dim, window, kv_head_bytes_per_token, grouped_ok,
                  peak_flops_per_s, memory_bandwidth_bytes_per_s, efficiency_max, p: dict):
    """Seconds of one decode attention kernel: `batch` sequences each attending from one new token
    to `kv_len` tokens (cached + new; `window` > 0 caps the keys read). `kv_head_bytes_per_token` is
    the cache of one KV head for one token; `grouped_ok` where the grouped kernel supports the shape
    (see `gqa_grouped`; MLA: always). `p` holds the `decode_*` parameters (module docstring); without
    the per-head ones (MLA) the grouped kernel always runs."""
    t = decode_shape_terms(batch, kv_len, heads, kv_heads, qk_dim, v_dim, window, kv_head_bytes_per_token, grouped_ok,
                           p["decode_sm_count"], p.get("decode_grouped_min_items", 0.0),
                           p.get("decode_split_keys", SPLIT_KEYS), "decode_head_cta_s" in p)
    return decode_from_terms(t, peak_flops_per_s, memory_bandwidth_bytes_per_s, efficiency_max, p)


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
                         2.0 * np.asarray(head_dim, float) * kv_bytes, gqa_grouped(heads, kv_heads),
                         peak_flops_per_s, memory_bandwidth_bytes_per_s, p["prefill_efficiency_max"], p)


def mla_prefill_time_s(batch, seq, heads, kv_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: dict):
    """Prefill MLA (DeepSeek-V3 dims, `heads` per GPU) with an "mla" Fit's `prefill_*` parameters."""
    return prefill_time_s(batch, seq, heads, MLA_NOPE_DIM + MLA_ROPE_DIM, MLA_V_HEAD_DIM, 0.0,
                          mla_prefill_bytes_per_token(heads, kv_bytes), peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          p["prefill_efficiency_max"], p["prefill_softmax_dim"], p["prefill_tile_s"],
                          p["prefill_q_tile_rows"], p["prefill_floor_s"], p["prefill_memory_efficiency"])


def mla_decode_time_s(batch, kv_len, heads, kv_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: dict):
    """Absorbed decode MLA: all `heads` (per GPU) read one shared latent KV of 576 elements per token
    (the grouped kernel with one KV head), with an "mla" Fit's `prefill_efficiency_max` and `decode_*`
    parameters."""
    return decode_time_s(batch, kv_len, heads, 1.0, MLA_LATENT_DIM, MLA_KV_LORA_RANK, 0.0,
                         MLA_LATENT_DIM * kv_bytes, True, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                         p["prefill_efficiency_max"], p)
