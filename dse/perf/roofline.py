"""Time of one op of the inventory: the only place GEMM and memory-bound kernel times are formed.

A GEMM (m x k) @ (k x n), repeated `count` times, takes the fitted GEMM form of the row's GPU and
number format (dse.perf.forms.gemm, fitted by `dse calibrate` from measured kernels): tensor-core
time with tile and wave quantization and a pipeline ramp, operand traffic at the fitted fraction of
HBM bandwidth, the two combined in quadrature (neither hides the other fully near the ridge), plus
a fixed floor per GEMM. The parameters are per GPU and format (`GemmParams`, model columns
`gemm_<parameter>_<format>`), never per row. Memory-bound kernels (norms, activations, optimizer)
stream their bytes at `memory_efficiency` of HBM bandwidth; fused attention is the roofline of its
FLOPs at `attention_efficiency` of the BF16 peak and its bytes, except serving and inference prefill,
and decode, which take the fitted attention kernel forms at their KV cache's format
(dse.perf.attention_kernels), and training, which takes cuDNN's training-kernel fit
(`training_attention_s`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse import catalog
from dse import schema
from dse.catalog.fitted import (MIN_LATENCY, MOE_PARAMS, TRAINING_ATTENTION_PARAMS, VLLM_MOE, VLLM_MOE_FORMATS,
                                gemm_column, vllm_moe_marker)
from dse.catalog.precision import CODE, peak_flops_per_s
from dse.perf import attention_kernels as AK
from dse.perf.fitted_params import Columns, GemmParams, per_format
from dse.perf.forms import attention as A
from dse.perf.forms import gemm as G
from dse.perf.forms import moe as MOE
from dse.perf.forms import training_attention as TA

OUTPUT_BYTES = catalog.constant("gemm_output_bytes")
MIN_LATENCY_COLUMNS = tuple(gemm_column(p, MIN_LATENCY, "moe") for p in MOE_PARAMS)
VLLM_KERNELS = schema.ENUMS["moe_kernels"].index("vllm")   # the moe_kernels code of vLLM's own MoE kernels


def gemm_peak_flops_per_s(precision, hw: dict):
    """Catalog peak FLOP/s a GEMM in number format `precision` (dse.catalog.precision) runs against;
    the fraction of it a GEMM reaches is the fitted `gemm_efficiency_max_<format>` and the shape terms."""
    return peak_flops_per_s(precision, hw)


def gemm_flops(m, n, k, count=1.0):
    return 2.0 * m * n * k * count


def gemm_bytes(m, n, k, operand_bytes, count=1.0):
    return ((m * k + k * n) * operand_bytes + m * n * OUTPUT_BYTES) * count


def stream_time_s(bytes_moved, memory_bandwidth_bytes_per_s, memory_efficiency):
    """A memory-bound kernel (norm, softmax, activation, dropout, residual, optimizer)."""
    return bytes_moved / (memory_bandwidth_bytes_per_s * memory_efficiency)


def gemm_compute_memory_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          p: GemmParams):
    """(compute time, memory time) of a batched GEMM of `count` products (m x k) @ (k x n) in one
    kernel (attention heads, grouped experts share its waves): the two sides `op_time_s` combines,
    for callers that report which side bounds each GEMM (inference breakdowns, roofline tables)."""
    compute, memory, _ = _gemm_sides_s(m, n, k, count, operand_bytes, peak_flops_per_s,
                                       memory_bandwidth_bytes_per_s, p)
    return compute, memory


def _on_live(live, x):
    """x on the live rows, 0 on the others (x itself when every row is live)."""
    return x if np.asarray(live).all() else np.where(live, x, 0.0)


def _gemm_sides_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: GemmParams,
                  output_bytes=OUTPUT_BYTES):
    """(compute time, memory time, live rows) of a batched GEMM (gemm_compute_memory_s)."""
    compute = G.gemm_compute_s(m, n, k, peak_flops_per_s, p.efficiency_max, p.tiles_per_wave, p.k_ramp,
                               p.split_k_min_depth, batch=count)
    memory = G.gemm_memory_s(m, n, k, memory_bandwidth_bytes_per_s, p.memory_efficiency, operand_bytes,
                             output_bytes) * count
    live = m * n * k * count > 0
    return _on_live(live, compute), _on_live(live, memory), live


def gemm_time_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: GemmParams,
                output_bytes=OUTPUT_BYTES):
    """Seconds of a batched GEMM of `count` products: one floor + quadrature of the two sides."""
    compute, memory, live = _gemm_sides_s(m, n, k, count, operand_bytes, peak_flops_per_s,
                                          memory_bandwidth_bytes_per_s, p, output_bytes)
    return _on_live(live, G.combined_s(p.floor_s, compute, memory))


@dataclass
class Rates:
    """Achievable rates of one GPU for one pass: peaks, bandwidth and fitted parameters per row."""
    peak_gemm: object        # FLOP/s peak of the GEMM format (gemm_peak_flops_per_s)
    peak_bf16: object
    bandwidth: object        # memory bandwidth, bytes/s
    memory_efficiency: object  # memory-bound kernels (streams)
    gemm: GemmParams         # GEMMs in the pass's format
    gemm_bf16: GemmParams    # GEMMs a recipe keeps in BF16
    attention_efficiency: object
    clock: object = 1.0      # sustained_clock_fraction: tensor work runs at this share of the fitted speed
    moe: dict | None = None  # fitted MoE-layer parameters in the pass's format (dse.perf.forms.moe)
    attention_softmax_dim: object = 0.0  # fitted softmax cost in head dims (dse.perf.forms.attention)
    experts: "Rates | None" = None  # the routed experts' rates where their format differs (expert_precision)
    train_attention: dict | None = None  # training attention's fitted forward/backward efficiency (training only)
    attention_forms: dict | None = None  # serving/inference attention kernel forms (attention_kernels.COLUMNS)
    moe_tiles: object = False  # MoE layers in TRTLLM-Gen token tiles (MXFP4 on parts with that fit)
    moe_min_latency: object = False   # rows whose small NVFP4 MoE layers run TensorRT-LLM's min-latency kernels
    min_latency: dict | None = None   # those kernels' fitted columns (moe_<param>_nvfp4_min_latency)
    vllm_moe: object = False          # rows whose MoE layers run vLLM's own kernels at their fit (moe_kernels vllm)
    vllm_params: dict | None = None   # that fit's parameters per row (moe_vllm_<param>_<format>)
    vllm_tiles: object = False        # rows whose vLLM fit is in TRTLLM-Gen token tiles
    wgrad_output_bytes: object = OUTPUT_BYTES  # training: bytes per weight-gradient element a wgrad GEMM moves (wgrad_s)
    moe_skew: dict | None = None  # the part's fitted power-law routing {busiest ratio, active share}: moe_skew_*

    @classmethod
    def of(cls, hw: dict, precision, memory_efficiency=None, peak_gemm=None, expert_precision=None,
           training=False, moe_min_latency=False, moe_kernels=0) -> "Rates":
        """The rates of `precision` on the part `hw`; `moe_min_latency` (per row, an engine setting):
        NVFP4 MoE layers of few tokens on TensorRT-LLM's min-latency kernels where the part has their fit;
        `moe_kernels` (per row, an engine setting, a schema code): vLLM's own MoE kernels where the part
        has their fit of the format (taking precedence over the min-latency kernels; never in training)."""
        peak_gemm = gemm_peak_flops_per_s(precision, hw) if peak_gemm is None else peak_gemm
        nvfp4 = np.asarray(precision) == CODE["nvfp4"]
        if training and np.any(nvfp4):
            # training's NVFP4 GEMMs (dense and per-expert) are Transformer Engine's cuBLASLt kernels, faster than
            # the tables' fallback tactic (serving takes the factor on its dense GEMMs: fitted_params._ServingParams)
            peak_gemm = peak_gemm * np.where(nvfp4, hw["nvfp4_tuned_gemm_speedup"], 1.0)
        mxfp8 = np.asarray(precision) == CODE["mxfp8"]
        if np.any(mxfp8):   # on the FP8 fit, slower by the block scales the tensor cores load and apply
            peak_gemm = peak_gemm * np.where(mxfp8, hw["mxfp8_gemm_speed"], 1.0)
        experts = None
        if expert_precision is not None and not np.array_equal(expert_precision, precision):
            experts = cls.of(hw, expert_precision, memory_efficiency, training=training, moe_min_latency=moe_min_latency,
                             moe_kernels=moe_kernels)
        train_attention = None
        if training:   # cuDNN's fit; FlashAttention-2 where the framework runs it (attention_fa2), at its speed
            train_attention = {p: hw[f"train_attention_{p}"] for p in TRAINING_ATTENTION_PARAMS}
            if "attention_fa2" in hw:   # a bare part (kernel tests) runs cuDNN's
                train_attention["speed"] = np.where(np.asarray(hw["attention_fa2"], bool), hw["fa2_attention_speed"], 1.0)
            if "fp8_attention" in hw and np.any(hw["fp8_attention"]):
                train_attention["fp8"] = fp8_attention_rows(hw, precision)
                train_attention["mxfp8"] = train_attention["fp8"] & mxfp8
                train_attention["fp8_peak_ratio"] = np.asarray(hw["peak_fp8_flops_per_s"]) / np.asarray(hw["peak_bf16_flops_per_s"])
        attention_forms = None if training else Columns(hw, AK.COLUMNS)
        mxfp4 = np.asarray(precision) == CODE["mxfp4"]
        moe_tiles = mxfp4 & (np.asarray(hw["moe_token_tiles_mxfp4"], float) > 0) if np.any(mxfp4) else False
        min_latency = False
        if np.any(moe_min_latency) and np.any(nvfp4):
            min_latency = nvfp4 & np.asarray(moe_min_latency, bool) & (np.asarray(hw["moe_min_latency_nvfp4"]) > 0)
        rates = cls(peak_gemm, hw["peak_bf16_flops_per_s"], hw["memory_bandwidth_bytes_per_s"],
                   hw["memory_efficiency"] if memory_efficiency is None else memory_efficiency,
                   GemmParams.of(hw, precision, serving=not training), GemmParams.of(hw, CODE["bf16"]),
                   hw["attention_efficiency"],
                   hw["sustained_clock_fraction"], per_format(hw, precision, "moe"), hw["attention_softmax_dim"],
                   experts, train_attention, attention_forms, moe_tiles, min_latency,
                   Columns(hw, MIN_LATENCY_COLUMNS) if np.any(min_latency) else None,
                   *(vllm_moe_rates(hw, precision, moe_kernels) if not training else ()))
        if "moe_skew_busiest_ratio" in hw:   # a bare part (kernel tests) routes as the tables' balanced rows
            rates.moe_skew = {"ratio": hw["moe_skew_busiest_ratio"], "active": hw["moe_skew_active_fraction"]}
        return rates


# The GEMM recipes Megatron-Core hands Transformer Engine's fp8_dpa (fp8_utils.get_fp8_recipe, fp4_utils
# get_fp4_recipe @d98e8a64dd: delayed and tensorwise FP8, MXFP8, NVFP4; blockwise FP8 takes no fp8_dpa).
FP8_ATTENTION_RECIPES = tuple(CODE[p] for p in ("fp8", "mxfp8", "nvfp4"))


def fp8_attention_rows(hw: dict, precision):
    """Rows whose training attention runs cuDNN's FP8 kernels: fp8_attention set, a recipe that takes
    it, and a part with that kernels' fit (the others keep the BF16 fit)."""
    return (np.asarray(hw["fp8_attention"], bool) & np.isin(precision, FP8_ATTENTION_RECIPES)
            & np.isfinite(np.asarray(hw["train_attention_fp8_fwd_efficiency_max"], float)))


def vllm_moe_rates(hw: dict, precision, moe_kernels):
    """(rows on vLLM's own MoE fit, its parameters per row, rows whose fit is in token tiles): the rows
    asking for vLLM's kernels (moe_kernels) whose format the part has a vLLM fit of (moe_vllm_<format>);
    (False, None, False) where none does, so a block without them reads no column. MXFP4 experts on a
    part without TensorRT-LLM's own MXFP4 MoE fit (Hopper) take vLLM's fit of the same format at decode
    sizes before another format's: TensorRT-LLM's W4A16 MXFP4 MoE table on H100 and H200 is 7-20%
    slower than vLLM's OpenAI Triton kernel (median ratio) up to 512 tokens on GPT-OSS's shapes, where
    the block-FP8 fallback's 128-row tiles cost about twice (prefill-sized layers keep that fallback:
    TensorRT-LLM's kernel is 1.6-1.9x slower than Triton's there)."""
    codes = np.asarray(precision)
    mxfp4_unfitted = (codes == CODE["mxfp4"]) & (np.asarray(hw["moe_token_tiles_mxfp4"], float) <= 0)
    on = (np.asarray(moe_kernels) == VLLM_KERNELS) | mxfp4_unfitted
    rows, params, tiles = False, None, False
    if not np.any(on):
        return rows, params, tiles
    for fmt in VLLM_MOE_FORMATS:
        mine = on & (codes == CODE[fmt])
        if not np.any(mine):
            continue
        mine = mine & (np.asarray(hw[vllm_moe_marker(fmt)]) > 0)
        if not np.any(mine):
            continue
        tiles = np.where(mine, np.asarray(hw[vllm_moe_marker(fmt, "tiles")]) > 0, tiles)
        params = {p: np.where(mine, hw[gemm_column(p, fmt, VLLM_MOE)], np.nan if params is None else params[p])
                  for p in MOE_PARAMS}
        rows = rows | mine
    return rows, params, tiles


def op_compute_memory_s(op, r: Rates):
    """(compute seconds, memory seconds) of one op of the inventory (dse.perf.layer), unweighted.
    Tensor work runs at `r.clock` of the speed the kernel fits measured: a long training or serving
    run holds its power-limited clock, the short kernel benchmarks behind the fits a burst above it."""
    return _op_sides_s(op, r)[:2]


def _op_sides_s(op, r: Rates):
    """(compute seconds, memory seconds, live rows of a GEMM (else None)) of one op, unweighted."""
    if op.timing == "gemm":
        peak, p = (r.peak_gemm, r.gemm) if op.low_precision else (r.peak_bf16, r.gemm_bf16)
        return _gemm_sides_s(op.m, op.n, op.k, op.count, op.operand_bytes, peak * r.clock, r.bandwidth, p)
    if op.timing == "moe":
        fixed, streams, weights, compute = moe_parts(op, r)
        return fixed + compute, streams + weights, None
    memory = stream_time_s(op.bytes, r.bandwidth, r.memory_efficiency)
    if op.timing == "stream":
        return 0.0, memory, None
    efficiency = r.attention_efficiency * A.head_dims_scale(r.attention_softmax_dim, op.head_dims)
    compute = op.flops / (r.peak_bf16 * r.clock * efficiency)
    if op.prefill_kv is not None and r.attention_forms is not None:
        compute = AK.prefill_attention_s(op, r, compute, efficiency)
    if op.decode_kv is not None and r.attention_forms is not None:
        return AK.decode_attention_sides_s(op, r, compute, memory)
    return compute, memory, None


def wgrad_s(op, r: Rates):
    """Seconds of a GEMM op's weight gradient in training, dW (k x n) = X^T (k x m) @ dY (m x n): a GEMM
    of its own shape, reducing over the op's m tokens, whose output is the gradient buffer it
    accumulates into (`r.wgrad_output_bytes` per element: Megatron-Core's gradient-accumulation fusion
    has the wgrad GEMM add into the FP32 main_grad, read and written). Where tokens are many (dense
    layers) this is the forward's time; few tokens per weight (routed experts) make it slower."""
    peak, p = (r.peak_gemm, r.gemm) if op.low_precision else (r.peak_bf16, r.gemm_bf16)
    return gemm_time_s(op.k, op.n, op.m, op.count, op.operand_bytes, peak * r.clock, r.bandwidth, p,
                       r.wgrad_output_bytes)


# Transformer Engine's compute streams for grouped GEMMs (common/util/multi_stream.cpp, d0067d0:
# num_compute_streams = 4): the per-expert GEMMs are issued round-robin over them
GEMM_STREAMS = 4.0


def moe_parts(op, r: Rates):
    """(fixed, token streams, weight stream, grouped-GEMM compute) seconds of an MoE layer op: the
    fitted layer form at the pass's format, its peak at the sustained clock. With `per_expert_gemms`
    (training: Transformer Engine's GroupedLinear runs one cuBLAS GEMM per local expert over a few
    streams, nvte_multi_tensor_gemm; its CUTLASS grouped kernel is Hopper-only and opt-in) the
    experts' GEMMs take the dense GEMM fit, batched over the touched experts, in place of the
    fused kernels' grouped-GEMM terms, at the framework's `expert_gemm_efficiency` of it (its
    grouped-GEMM kernel against per-expert cuBLAS); routing, permutation and per-expert costs keep
    the form."""
    if r.experts is not None:   # routed experts in their own number format (expert_precision)
        r = r.experts
    shape = skewed_shape(op.moe, r)
    per_expert = shape.pop("per_expert_gemms", False)
    efficiency = shape.pop("expert_gemm_efficiency", 1.0)
    peak = r.peak_gemm * r.clock
    params, tiled = {p: r.moe[p] for p in MOE_PARAMS}, r.moe_tiles
    if not per_expert:   # the fused MoE kernels the tables time
        if np.any(r.moe_min_latency):   # TensorRT-LLM's NVFP4 min-latency kernels, few tokens
            small = r.moe_min_latency & (np.asarray(shape["num_tokens"]) <= MOE.MIN_LATENCY_MAX_TOKENS)
            params = {p: np.where(small, r.min_latency[gemm_column(p, MIN_LATENCY, "moe")], v) for p, v in params.items()}
            tiled = tiled | small
        if np.any(r.vllm_moe):   # vLLM's own kernels at their fit on decode-sized layers, in token tiles where fitted so
            small = r.vllm_moe & (np.asarray(shape["num_tokens"]) <= MOE.VLLM_MAX_TOKENS)
            params = {p: np.where(small, r.vllm_params[p], v) for p, v in params.items()}
            tiled = np.where(small, r.vllm_tiles, tiled)
        if np.any(tiled):   # TRTLLM-Gen kernels pad each expert to whole token tiles
            r_pairs, touched = MOE.routed_and_touched(**shape)
            tile = MOE.tile_tokens(shape["num_tokens"], shape["topk"], shape["num_experts"] / shape["ep_size"])
            peak = np.where(tiled, MOE.tiled_peak(peak, tile, r_pairs / touched, shape.get("spread", True)), peak)
    fixed, streams, weights, compute = MOE.moe_time_parts(
        **shape, peak_flops_per_s=peak, memory_bandwidth_bytes_per_s=r.bandwidth, **params)
    if not per_expert:
        return fixed, streams, weights, compute
    return fixed, streams, 0.0, _per_expert_gemms_s(shape, r, efficiency)


def _per_expert_gemms_s(shape: dict, r: Rates, efficiency, wgrad=False):
    """Seconds of the routed experts' GEMMs as training frameworks run them, one per touched local
    expert, in rounds of up to GEMM_STREAMS concurrent GEMMs sharing the GPU's waves, at
    `efficiency` of the dense fit: the forward (tokens x k) @ (k x n), or with `wgrad` the weight
    gradients (k x tokens) @ (tokens x n) written into the gradient buffer (wgrad_s)."""
    r_pairs, touched = MOE.routed_and_touched(**shape)
    tokens, h, inter = r_pairs / touched, shape["hidden_size"], shape["inter_size"] / shape["tp_size"]
    together = np.minimum(touched, GEMM_STREAMS)
    output = r.wgrad_output_bytes if wgrad else OUTPUT_BYTES
    return touched / together * sum(
        gemm_time_s(*((k, n, tokens) if wgrad else (tokens, n, k)), together, shape["weight_bytes"],
                    r.peak_gemm * r.clock, r.bandwidth, r.gemm, output)
        for n, k in ((shape["gated"] * inter, h), (h, inter))) / efficiency


def skewed_shape(moe: dict, r: Rates) -> dict:
    """An MoE op's shape with the share of experts its routing leaves any traffic: skewed routing
    (a busiest expert above the mean, not spread evenly) on the part's fitted power-law curve
    (dse.perf.forms.moe.active_fraction); balanced routing touches them all."""
    shape = dict(moe)
    skewed = ~np.asarray(shape.get("spread", True), bool)
    if np.any(skewed) and "busiest_expert_ratio" in shape and r.moe_skew is not None:
        active = MOE.active_fraction(shape["busiest_expert_ratio"], r.moe_skew["ratio"], r.moe_skew["active"])
        shape["active_expert_fraction"] = np.where(skewed, active, 1.0)
    return shape


def expert_wgrad_s(op, r: Rates):
    """Seconds of the routed experts' weight gradients in training (one GEMM per touched local expert,
    _per_expert_gemms_s), at the framework's `expert_gemm_efficiency`."""
    r = r.experts if r.experts is not None else r
    shape = skewed_shape(op.moe, r)
    shape.pop("per_expert_gemms", False)
    efficiency = shape.pop("expert_gemm_efficiency", 1.0)
    return _per_expert_gemms_s(shape, r, efficiency, wgrad=True)


def moe_backward_s(op, r: Rates):
    """(data-gradient, weight-gradient) seconds of an MoE layer op's backward: the grouped GEMMs
    once for each (so the weights are read and their gradients written), the permute/unpermute
    streams and the fixed costs with the data gradients."""
    fixed, streams, weights, compute = moe_parts(op, r)
    grouped = np.maximum(weights, compute)
    wgrad = expert_wgrad_s(op, r) if op.moe.get("per_expert_gemms", False) else grouped
    return fixed + streams + grouped, wgrad


def training_attention_s(op, r: Rates):
    """(forward, backward) seconds of a fused attention op in training. Where the part has a
    training-attention fit (dse.perf.forms.training_attention: cuDNN's forward and backward kernels)
    each pass runs at its efficiency for the keys a query visits (the local sequence, a window, a
    document or a context-parallel chunk, whichever is shortest); elsewhere the prefill-derived
    `attention_efficiency`, and the backward takes `op.backward` times the forward. Both passes run
    at the kernel's `speed` relative to that (FlashAttention-2's where the framework runs it:
    fa2_attention_speed; 1 for cuDNN's)."""
    compute, memory, _ = _op_sides_s(op, r)
    forward = np.maximum(compute, memory)
    p = r.train_attention
    if p is None:
        return forward, forward * op.backward
    keys = np.minimum(op.m, op.n)
    fitted = np.isfinite(p["fwd_efficiency_max"])
    def slower(name):   # this pass's compute time over the prefill-derived one (1 where no fit)
        narrow = TA.head_dim_factor(op.head_dims / 2.0, p[f"{name}_head_dim_k"])   # mean of the q/k and v head sizes
        if name == "bwd":   # heads wider than 128 crowd the backward's per-head accumulators (not one latent's)
            narrow = narrow * np.where(op.per_head_kv, TA.wide_head_factor(op.head_dims / 2.0, p["bwd_wide_head_k"]), 1.0)
        eff = TA.efficiency(keys, p[f"{name}_efficiency_max"], p[f"{name}_half_keys"]) * narrow
        if "fp8" in p:   # cuDNN's FP8 kernels (fp8_attention): their fit, a fraction of the FP8 peak
            fp8 = TA.efficiency(keys, p[f"fp8_{name}_efficiency_max"], p[f"fp8_{name}_half_keys"]) * narrow
            if np.any(p.get("mxfp8", False)):   # an MXFP8 recipe's attention runs cuDNN's MXFP8 kernels
                mx = TA.efficiency(keys, p[f"mxfp8_{name}_efficiency_max"], p[f"mxfp8_{name}_half_keys"]) * narrow
                fp8 = np.where(p["mxfp8"], mx, fp8)
            eff = np.where(p["fp8"], fp8 * p["fp8_peak_ratio"], eff)
        return np.where(fitted, r.attention_efficiency / np.where(fitted, eff, 1.0), 1.0) / p.get("speed", 1.0)
    return np.maximum(compute * slower("fwd"), memory), op.backward * np.maximum(compute * slower("bwd"), memory)


def op_time_s(op, r: Rates):
    """Seconds of one op: a GEMM's fitted form (floor + quadrature), the MoE layer's, else the
    longer side."""
    return _time_and_bound(op, r)[0]


def op_time_split_s(op, r: Rates):
    """(compute-bound seconds, memory-bound seconds) of one op: its whole time on the side that
    bounds it, the other zero (inference breakdowns)."""
    t, bound = _time_and_bound(op, r)
    bound = np.asarray(bound)
    if bound.all() or not bound.any():   # one side has it all
        t = np.broadcast_to(t, np.broadcast(bound, t).shape).astype(np.result_type(t, 0.0), copy=False)
        return (t, np.zeros_like(t)) if bound.all() else (np.zeros_like(t), t)
    return np.where(bound, t, 0.0), np.where(bound, 0.0, t)


def _time_and_bound(op, r: Rates):
    """(seconds, compute-bound?) of one op: the one place an op's time is formed."""
    if op.timing == "moe":
        fixed, streams, weights, compute = moe_parts(op, r)
        t = fixed + streams + np.maximum(weights, compute)
        bound = compute >= weights
    else:
        compute, memory, live = _op_sides_s(op, r)
        bound = compute >= memory
        if op.timing == "gemm":
            p = r.gemm if op.low_precision else r.gemm_bf16
            t = _on_live(live, G.combined_s(p.floor_s, compute, memory))
        else:
            t = np.maximum(compute, memory)
    return t, bound


def op_flops_bytes(op):
    """(FLOPs, bytes) of one op (for roofline tables)."""
    if op.timing == "gemm":
        live = op.m * op.n * op.k * op.count > 0
        return (np.where(live, gemm_flops(op.m, op.n, op.k, op.count), 0.0),
                np.where(live, gemm_bytes(op.m, op.n, op.k, op.operand_bytes, op.count), 0.0))
    return op.flops, op.bytes
