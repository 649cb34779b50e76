"""Time of one MoE layer on one GPU: routing, permute, both grouped GEMMs, activation, unpermute.

Shapes (numpy-broadcastable arrays):
  num_tokens T   tokens entering the layer on this GPU. Under attention data parallelism every
                 rank's tokens are gathered onto each expert-parallel GPU, so T is the batch of the
                 whole EP group (AIConfigurator's `x * attention_dp_size`), not a per-rank batch.
  hidden_size h, inter_size I (one expert's FFN width), topk k, num_experts E,
  tp_size        each expert's FFN split tp ways (I/tp per GPU); ep_size: E_l = E/ep local experts,
  gated          2 = SwiGLU (first GEMM is up+gate, 2*I/tp wide), 1 = non-gated (ReLU^2).

Routing. The busiest EP rank computes R = k*T/ep * skew (token, expert) pairs. Its skew follows
from the busiest expert's load over the mean, m (1 = balanced routing): that rank holds the
busiest expert and E_l - 1 others, which are themselves heavier than average, so
skew = 1 + (m - 1) / E_l**RANK_SKEW_EXPONENT (the exponent is 1 if the others were average; the
per-GPU fits gave 0.84-0.98), with m capped at E/k (an expert sees each token at most once) and
R within [1, T*min(k, E_l)]. Experts the rank must read: evenly spread routing touches
min(E_l, R); random or skewed routing touches E_a*(1 - (1 - 1/E_a)^R), where
E_a = active_expert_fraction * E_l are the experts that get any traffic.

    time = floor_s + routing_step_s * k + routing_s_per_selection * T*k
         + expert_overhead_s * touched + local_expert_overhead_s * E_l
         + (4*T*h + routed_bytes_per_element * R*h) / (memory_efficiency * HBM bandwidth)
         + max(weights / (memory_efficiency * HBM bandwidth), FLOPs / (efficiency * peak))

  weights = touched * (gated+1) * h * I/tp * weight_bytes (only touched experts are read);
  FLOPs = 2 * R * h * (gated+1) * I/tp; efficiency = efficiency_max * x/(x + HALF_TOKENS) with
  x = R/touched tokens per touched expert; 4*T*h: bf16 input read and output written for every
  token on the GPU, routed here or not; routed_bytes_per_element: the permute, GEMM input and
  output and unpermute passes of each routed token, bytes per hidden element over all passes.

How each parameter carries over to an accelerator derived from technology (no kernel data):
  floor_s                  fixed per-layer cost (launches, synchronisation): seconds carry over.
  routing_step_s           per top-k step of the router (k sequential arg-max passes): seconds.
  routing_s_per_selection  routing and index bookkeeping per (token, expert) selection: seconds;
                           scale inversely with the SM count.
  expert_overhead_s        per touched expert (group setup, pipeline fill and tail of its GEMMs):
                           seconds; scale with the tile time of the part.
  local_expert_overhead_s  per local expert, touched or not (offsets, scale factors, group
                           bookkeeping over all local experts): seconds carry over.
  efficiency_max           fraction of the format's catalog peak a large grouped GEMM reaches:
                           carries over unchanged.
  memory_efficiency        fraction of catalog HBM bandwidth of the weight and activation
                           streams: carries over unchanged.
  routed_bytes_per_element a property of the kernels' data flow: carries over unchanged.
  busiest_expert_ratio, active_expert_fraction: properties of the routing (model and data),
                           not of the GPU: carry over unchanged.
HALF_TOKENS is fixed at the grouped GEMM's tile height: the measured layers do not resolve it
(they are weight-bound wherever few tokens reach an expert).
"""
from __future__ import annotations

import numpy as np

from dse.catalog import precision as catalog_formats

# dse precision -> (bytes per weight element including block scales, catalog peak column): the
# formats the MoE kernel tables measure. Expert weights' bytes are the catalog's stored-weight bytes
# (FP8 blocks of 128x128 carry one FP32 scale each); mxfp4 is MXFP4 weights with MXFP8 activations,
# at the FP4 peak (dse.catalog.precision.PEAK_COLUMN).
WEIGHT_BYTES = {name: float(catalog_formats.WEIGHT_BYTES[catalog_formats.CODE[name]])
                for name in ("bf16", "fp8", "fp8-block", "nvfp4", "mxfp4")}
FORMATS = {name: (weight_bytes, catalog_formats.PEAK_COLUMN[name]) for name, weight_bytes in WEIGHT_BYTES.items()}
LAYER_PARAMS = ("floor_s", "efficiency_max", "memory_efficiency", "routed_bytes_per_element", "expert_overhead_s",
                "local_expert_overhead_s", "routing_s_per_selection", "routing_step_s")
HALF_TOKENS = 128.0        # tokens per expert at half of efficiency_max (the GEMM tile height)
RANK_SKEW_EXPONENT = 0.9   # how fast the busiest rank's excess load dilutes with its expert count
TOKEN_IO_BYTES = 4.0       # bf16 input read + bf16 output written, per token and hidden element


def rank_skew(busiest_expert_ratio, num_experts, topk, ep_size):
    """Busiest EP rank's routed load over the mean rank load (1 for balanced routing)."""
    local = np.maximum(num_experts / ep_size, 1.0)
    m = np.minimum(np.maximum(busiest_expert_ratio, 1.0), num_experts / np.maximum(topk, 1.0))  # dense rows: finite
    return 1.0 + (m - 1.0) / local ** RANK_SKEW_EXPONENT


def expert_ratio_at_rank_load(rank_load, num_experts, ep_size):
    """The busiest-expert ratio whose rank_skew is `rank_load`: rank_skew's inverse."""
    local = np.maximum(num_experts / ep_size, 1.0)
    return 1.0 + (np.maximum(rank_load, 1.0) - 1.0) * local ** RANK_SKEW_EXPONENT


def active_fraction(busiest_expert_ratio, skew_ratio, skew_active):
    """Share of the experts that get any traffic under routing whose busiest expert carries
    `busiest_expert_ratio` times the mean: 1 under balanced routing, `skew_active` at the fitted
    power-law routing's own ratio `skew_ratio` (moe_skew_*), log-linear in the ratio between and
    beyond (the alpha-1.2 fits, at 16-21x, sit within 0.03 of that line); 1 where the part has no
    such fit (NaN)."""
    m = np.maximum(np.asarray(busiest_expert_ratio, dtype=float), 1.0)
    slope = np.nan_to_num((1.0 - np.asarray(skew_active, float)) / np.log(np.maximum(skew_ratio, 1.0 + 1e-9)))
    return np.clip(1.0 - slope * np.log(m), 1e-3, 1.0)


def routed_pairs(num_tokens, topk, num_experts, ep_size, busiest_expert_ratio=1.0):
    """(token, expert) pairs the busiest EP rank computes."""
    local = np.maximum(num_experts / ep_size, 1.0)
    r = num_tokens * topk / ep_size * rank_skew(busiest_expert_ratio, num_experts, topk, ep_size)
    return np.clip(r, 1.0, np.maximum(num_tokens * np.minimum(topk, local), 1.0))


def experts_touched(routed, local_experts, spread=True, active_expert_fraction=1.0):
    """Distinct local experts receiving at least one token: min(E_l, R) when routing spreads
    tokens evenly; E_a*(1-(1-1/E_a)^R) over the E_a = fraction*E_l active experts otherwise."""
    local_experts = np.maximum(local_experts, 1.0)
    active = np.maximum(local_experts * active_expert_fraction, 1.0)
    random = active * -np.expm1(routed * np.log1p(-1.0 / np.maximum(active, 1.0 + 1e-9)))
    random = np.where(active <= 1.0, 1.0, np.maximum(random, 1.0))
    return np.minimum(np.where(spread, np.minimum(local_experts, routed), random), np.maximum(routed, 1.0))


def routed_and_touched(num_tokens, topk, num_experts, ep_size, busiest_expert_ratio=1.0,
                       active_expert_fraction=1.0, spread=True, **_):
    """(routed pairs, touched local experts) of the busiest EP rank (the other keywords of an MoE
    layer's shape are ignored, so a shape dict can be passed whole)."""
    r = routed_pairs(num_tokens, topk, num_experts, ep_size, busiest_expert_ratio)
    return r, experts_touched(r, np.maximum(num_experts / ep_size, 1.0), spread, active_expert_fraction)


# TRTLLM-Gen's MoE kernels (TensorRT-LLM's W4A8 MXFP4 path on Blackwell) run each expert on whole
# tiles of tokens: calculate_tile_tokens_dim takes T*k/E_l to the next power of two, within these
TILE_TOKENS = (8.0, 256.0)  # smallest and largest tile of tokens per expert
# TensorRT-LLM on Blackwell runs NVFP4 gated MoE layers of at most this many tokens on TRTLLM-Gen's
# min-latency kernels (moe_backend TRTLLM; its Llama 4 / DeepSeek min-latency mode gates on
# num_tokens <= 128 on Blackwell, and AIConfigurator's MoE operator picks its measured
# moe_torch_flow_min_latency table under the same gate: aic-core operators/moe.rs @095f58a51);
# dse calibrate fits those kernels there, as "nvfp4-min-latency"
MIN_LATENCY_MAX_TOKENS = 128.0
# vLLM's own MoE kernels (dse calibrate family moe_vllm) are fitted and used on layers of at most this
# many tokens: the decode batches, where the engines' kernels differ (launch, routing, tile floors; the
# same shape runs 25/61/99 us at 4/16/64 tokens on vLLM's NVFP4 kernel against 95/198/296 on TensorRT-
# LLM's CUTLASS one, B200, 256 experts of 1536, tp 4); one form per format over prefill-sized layers as
# well misses whole shapes by 30-45% (p90 28-31%). Larger layers are grouped-GEMM bound and keep the
# TensorRT-LLM fit of their format.
VLLM_MAX_TOKENS = 256.0


def tile_tokens(num_tokens, topk, local_experts) -> np.ndarray:
    """TRTLLM-Gen's tile of tokens per expert: T*k/E_l to the next power of two, within TILE_TOKENS."""
    per_expert = np.maximum(np.asarray(num_tokens, float) * topk / np.maximum(local_experts, 1.0), 1.0)
    return np.clip(2.0 ** np.ceil(np.log2(per_expert) - 1e-9), *TILE_TOKENS)


def tiled_peak(peak_flops_per_s, tile, tokens_per_expert, spread=False):
    """The peak a tiled kernel's fit is stated against: a touched expert of x tokens computes whole
    tiles, folded into the peak the form divides by, peak * (x + HALF_TOKENS) / rows. Evenly spread
    (balanced) routing gives every expert the same x, so rows = tile * ceil(x / tile) (the tile is x
    to the next power of two up to its cap: one tile, unpadded at a power of two); random or skewed
    routing scatters the experts' counts, max(tile, x + tile/2) rows (one tile, beyond it half a
    tile of padding on average)."""
    exact = tile * np.ceil(tokens_per_expert / tile - 1e-9)
    rows = np.where(spread, np.maximum(exact, tile), np.maximum(tile, tokens_per_expert + tile / 2.0))
    return peak_flops_per_s * ((tokens_per_expert + HALF_TOKENS) / rows)


def moe_time_parts(num_tokens, hidden_size, inter_size, topk, num_experts, tp_size, ep_size, gated,
                   weight_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                   floor_s, efficiency_max, memory_efficiency, routed_bytes_per_element,
                   expert_overhead_s, local_expert_overhead_s, routing_s_per_selection, routing_step_s,
                   busiest_expert_ratio=1.0, active_expert_fraction=1.0, spread=True, local_tokens=None):
    """(fixed, activation-stream, weight-stream, grouped-GEMM compute) seconds of one MoE layer on the
    busiest GPU of its EP group; the layer takes fixed + activations + max(weights, compute).
    `local_tokens`: the tokens this GPU routes and reads and writes itself when an all-to-all
    dispatcher brings it only its routed pairs (training, DeepEP serving): num_tokens / ep; None
    for the measured layout, where every GPU holds all num_tokens tokens (attention DP gathered)."""
    local = np.maximum(num_experts / ep_size, 1.0)
    inter_local = inter_size / tp_size
    mats = gated + 1.0  # up(+gate) and down projections, in units of h x I/tp
    r, touched = routed_and_touched(num_tokens, topk, num_experts, ep_size, busiest_expert_ratio,
                                    active_expert_fraction, spread)
    bw = memory_bandwidth_bytes_per_s * memory_efficiency
    own = num_tokens if local_tokens is None else local_tokens
    activations = (TOKEN_IO_BYTES * own + routed_bytes_per_element * r) * hidden_size / bw
    weights = touched * mats * hidden_size * inter_local * weight_bytes / bw
    x = r / touched
    compute = 2.0 * r * hidden_size * mats * inter_local / (
        peak_flops_per_s * efficiency_max * x / (x + HALF_TOKENS))
    fixed = (floor_s + routing_step_s * topk + routing_s_per_selection * own * topk
             + expert_overhead_s * touched + local_expert_overhead_s * local)
    return fixed, activations, weights, compute


def moe_time_s(num_tokens, hidden_size, inter_size, topk, num_experts, tp_size, ep_size, gated,
               weight_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
               floor_s, efficiency_max, memory_efficiency, routed_bytes_per_element,
               expert_overhead_s, local_expert_overhead_s, routing_s_per_selection, routing_step_s,
               busiest_expert_ratio=1.0, active_expert_fraction=1.0, spread=True):
    """Seconds of one MoE layer on the busiest GPU of its EP group (see the module docstring).
    `weight_bytes`: bytes per weight element with block scales (bf16 2, fp8 1, nvfp4 0.5625,
    mxfp4 0.53125); `peak_flops_per_s`: the catalog peak of the format; `spread`: True for evenly
    spread (balanced) routing, False for random or skewed routing (busiest_expert_ratio > 1)."""
    fixed, activations, weights, compute = moe_time_parts(
        num_tokens, hidden_size, inter_size, topk, num_experts, tp_size, ep_size, gated, weight_bytes,
        peak_flops_per_s, memory_bandwidth_bytes_per_s, floor_s, efficiency_max, memory_efficiency,
        routed_bytes_per_element, expert_overhead_s, local_expert_overhead_s, routing_s_per_selection,
        routing_step_s, busiest_expert_ratio, active_expert_fraction, spread)
    return fixed + activations + np.maximum(weights, compute)


def moe_time_for(precision, num_tokens, hidden_size, inter_size, topk, num_experts, tp_size, ep_size,
                 peak_flops_per_s, memory_bandwidth_bytes_per_s, params: dict, gated=2.0, routing=None):
    """`moe_time_s` for a dse precision with the fitted parameters of one catalog row: `params`
    holds LAYER_PARAMS; `routing` None for evenly spread (balanced) routing, or
    (busiest_expert_ratio, active_expert_fraction) of a skewed routing."""
    skew = {} if routing is None else dict(busiest_expert_ratio=routing[0], active_expert_fraction=routing[1],
                                           spread=False)
    return moe_time_s(num_tokens, hidden_size, inter_size, topk, num_experts, tp_size, ep_size, gated,
                      FORMATS[precision][0], peak_flops_per_s, memory_bandwidth_bytes_per_s,
                      **{k: params[k] for k in LAYER_PARAMS}, **skew)
