"""Fit the attention time model (`dse.perf.forms.attention`) to TensorRT-LLM's measured prefill and
decode attention kernels (`attention/trtllm/*/context_attention_perf` and
`generation_attention_perf`).

One Fit per GPU and KV-cache precision: "bf16" (bf16 attention over a bf16 cache) and "fp8" (an FP8
cache, with bf16 or FP8 context FMHA: both run FP8 MMAs, so efficiencies are fractions of the FP8
peak). A Fit holds both phases, the parameters prefixed `prefill_` and `decode_` (the decode
compute term reuses `prefill_efficiency_max`: same tensor cores, same MMA).

Table columns: `isl` is the prompt length of a prefill row; a decode row attends from one new token
to `step` cached tokens plus itself (kv_len = isl + step, as AIConfigurator's SOL reads it).
`window_size` 0 is full attention. Rows of the `torch_flow_flashinfer` kernel source are left out:
they exist only on Blackwell, only for Gemma-4 shapes (head_dim 512, or 256 with window 1024) that
the main kernel never measured, through a second kernel family (FlashInfer trtllm-gen).

The decode fit (`fit_decode`) also chooses the form's discrete dispatch parameters: whether the
grouped kernel is gated (`decode_grouped_min_items`: TensorRT-LLM's XQA needs a quarter of the SMs
in (sequence x KV head x 128-key block) items on Hopper with a bf16 cache; its FP8-cache kernel,
Blackwell's trtllm-gen and the A100 tables show no gate) and the effective SM count
(`decode_sm_count`: the waves and the split heuristic step with it; the fit recovers Hopper's 132).

AIConfigurator's collector before TensorRT-LLM 1.3.0rc20 (here: the A100 tables, 1.0.0) allocated
the dense KV cache as K-only (`CacheType.SELFKONLY`, replaced by `SELF` in its rc20 rewrite): its
kernels read and write half the KV bytes of a serving cache, so those rows are fitted with half.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse.calibrate import Fit
from dse.calibrate.tables import KernelData, _version_key
from dse.perf.forms import attention as form

FAMILY = "attention"
FULL_KV_CACHE_FROM = "1.3.0rc20"   # first collector version with a K and V cache (module docstring)
FIT_POINTS = 4000                  # shapes per least-squares fit (keeps all GPUs to seconds)
KERNEL_SOURCE = "torch_flow"
# kv_cache_dtype -> (dse precision, bytes per KV element, catalog peak column)
KV_PRECISIONS = {"bfloat16": ("bf16", 2.0, "peak_bf16_flops_per_s"),
                 "fp8": ("fp8", 1.0, "peak_fp8_flops_per_s")}

# (name, start, lower, upper): the parameters of each phase, in the order the fit passes them.
PREFILL_PARAMS = (("prefill_efficiency_max", 0.5, 0.01, 1.0), ("prefill_softmax_dim", 30.0, 0.0, 512.0),
                  ("prefill_tile_s", 20e-9, 0.0, 1e-6), ("prefill_floor_s", 10e-6, 0.0, 1e-3),
                  ("prefill_memory_efficiency", 0.6, 0.01, 1.0))
WINDOW_PARAMS = (("prefill_window_extra_keys", 64.0, 0.0, 4096.0),)
NO_WINDOW_EXTRA = {"prefill_window_extra_keys": 0.0}
DECODE_PARAMS = (("decode_floor_s", 6e-6, 0.0, 1e-3), ("decode_head_floor_s", 1e-6, 0.0, 1e-4),
                 ("decode_cta_s", 2e-6, 0.0, 1e-4), ("decode_key_s", 5e-9, 0.0, 1e-6),
                 ("decode_query_s", 0.1e-6, 0.0, 1e-5), ("decode_head_cta_s", 1e-6, 0.0, 1e-4),
                 ("decode_head_key_s", 5e-9, 0.0, 1e-6), ("decode_bandwidth_efficiency", 0.8, 0.01, 1.0),
                 ("decode_reread_fraction", 0.5, 0.0, 1.0), ("decode_split_s", 1e-6, 0.0, 1e-4),
                 ("decode_head_split_s", 1e-6, 0.0, 1e-4), ("decode_empty_split_s", 1e-6, 0.0, 1e-4))
# The grouped (XQA) kernel runs only where (sequence x KV head x 128-key block) items reach a
# quarter of the SMs (TensorRT-LLM's XQA dispatch), or always (FP8 caches, Blackwell, the A100 tables).
GATES = ({"gate": 0.25}, {"gate": 0.0})
SM_START = 128.0                   # decode_sm_count the kernel-choice fits are made at
SM_STEP = 8.0                      # decode_sm_count scan: this step over the SM counts in reach,
SM_CANDIDATES = np.arange(64.0, 201.0, SM_STEP)   # then half a step either side of the best
GATE_POINTS = 1000                 # shapes per fit while choosing the kernel gate / split mode


def read_table(data: KernelData, gpu: str, family: str, name: str, framework: str = "trtllm") -> pd.DataFrame:
    """All rows of one table (`KernelData.table`: newest version first on duplicate shapes, `step`
    kept as a shape key, so the generation tables keep every KV length), with `latency_s`."""
    return data.table(gpu, family, name, framework)


def has_units(system, peak_col: str) -> bool:
    """Whether the GPU runs the format natively: an FP8 peak no higher than BF16 (Ampere) means no
    FP8 tensor cores, so rows labelled fp8 there time a bf16 kernel (they match the bf16 rows)."""
    peak = float(system[peak_col])
    bf16 = float(system["peak_bf16_flops_per_s"])
    return bool(np.isfinite(peak)) and (peak_col == "peak_bf16_flops_per_s" or peak > bf16)


def sig3(x: float) -> float:
    """Round to 3 significant digits (the catalog's precision, so its predictions reproduce)."""
    return float(f"{float(x):.3g}")


def fit_log(model, specs, shapes: dict, measured_s: np.ndarray, points: int = FIT_POINTS, gradient=None,
            warm: dict | None = None):
    """Robust least squares of log(model(params, shapes) / measured) over the parameters `specs`
    (name, start, lower, upper). Fits on at most FIT_POINTS shapes (an even, deterministic stride:
    the tables are regular grids) and returns ({name: value rounded to 3 digits}, predictions of
    every shape with the rounded values). `gradient(params, shapes)`, if given, returns (seconds,
    {name: d seconds / d parameter}) for an analytic Jacobian (fewer model evaluations);
    `warm` overrides start values (a warm start from an earlier fit of the same parameters)."""
    names = [s[0] for s in specs]
    start = np.array([s[1] for s in specs])
    scale = np.where(start > 0, start, 1.0)   # fit in units of the start values (seconds vs fractions)
    lower, upper = np.array([s[2] for s in specs]) / scale, np.array([s[3] for s in specs]) / scale
    rows = np.arange(0, len(measured_s), -(-len(measured_s) // points))
    sub = {k: v[rows] for k, v in shapes.items()}
    resid = lambda x: np.log(model(dict(zip(names, x * scale)), sub) / measured_s[rows])
    jac = "2-point"
    if gradient is not None:
        def jac(x):
            seconds, grad = gradient(dict(zip(names, x * scale)), sub)
            return np.column_stack([np.broadcast_to(grad[n], seconds.shape) for n in names]) * (scale / seconds[:, None])
    # tolerances of 1e-4: the parameters are kept to 3 significant digits anyway
    x0 = np.ones(len(specs)) if warm is None else np.array([warm.get(n, sp[1]) for n, sp in zip(names, specs)]) / scale
    x0 = np.clip(x0, lower, upper)
    x = least_squares(resid, x0, jac=jac, bounds=(lower, upper), loss="soft_l1", f_scale=0.05,
                      ftol=1e-4, xtol=1e-4, gtol=1e-4, tr_solver="lsmr").x
    x = np.where(x - lower < 1e-3, lower, x)   # within 0.1% of its start above the bound: unused, at the bound
    params = {n: sig3(v) for n, v in zip(names, x * scale)}
    return params, model(params, shapes)


def fit_prefill(model, shapes: dict, measured_s: np.ndarray, specs=PREFILL_PARAMS):
    """`fit_log` of the prefill parameters for each query-tile height; keeps the height whose fit
    has the smaller 90th-percentile error (the kernels use one tile height, unknown here)."""
    best = None
    for rows in form.Q_TILE_ROWS:
        params, pred = fit_log(lambda q, x: model(q | {"prefill_q_tile_rows": float(rows)}, x),
                               specs, shapes, measured_s)
        p90 = np.percentile(np.abs(pred / measured_s - 1.0), 90)
        if best is None or p90 < best[0]:
            best = (p90, params | {"prefill_q_tile_rows": float(rows)}, pred)
    return best[1], best[2]


def _p90_log(pred, measured_s) -> float:
    return float(np.percentile(np.abs(np.log(pred / measured_s)), 90))


def fit_decode(terms, combine, shapes: dict, measured_s: np.ndarray, specs=DECODE_PARAMS, choices=None,
               sm_refit=()):
    """Fit of the decode parameters (`fit_log`) with the kernel-dispatch constants chosen from the
    data. The model is split as the form is (`decode_shape_terms` / `decode_from_terms`):
    `terms(shapes, fixed)` the parameter-free part for the dispatch constants `fixed`, computed once
    per subset, and `combine(terms, params)` the seconds. Each of `choices` (dicts of fixed
    parameters, e.g. the grouped-kernel gate on or off; "gate" gives `decode_grouped_min_items` as a
    fraction of the SM count) is fitted on GATE_POINTS shapes at SM_START and the best kept; then
    `decode_sm_count` is scanned over SM_CANDIDATES with the other parameters held (the wave and
    split arithmetic is piecewise constant in it, so least squares cannot move it) and the
    parameters refitted at the best. `sm_refit`: SM counts each choice is fitted at instead of
    SM_START, for kernels whose other parameters trade off against the SM count (a scan that holds
    them cannot leave a poor start; affordable for small tables). Returns (parameters
    rounded to 3 digits, the fixed ones included; the model's predictions of every shape with them)."""
    choices = choices or [{}]

    def fixed(c, sm):
        f = {k: v for k, v in c.items() if k != "gate"} | {"decode_sm_count": sm}
        return f | ({"decode_grouped_min_items": c["gate"] * sm} if "gate" in c else {})

    def model(f, gradient=False):
        cache = {}
        def seconds(q, x):
            if id(x) not in cache:
                cache[id(x)] = (x, terms(x, f))   # keeps x alive, so its id stays its own
            return combine(cache[id(x)][1], f | q, gradient=gradient)
        return seconds

    def fit_at(c, sm, points, warm=None):
        f = fixed(c, sm)
        # parameters the shapes never exercise (say, the empty-split cost without sliding windows) are 0
        _, grad = model(f, gradient=True)({sp[0]: sp[1] for sp in specs} | (warm or {}), shapes)
        f |= {sp[0]: 0.0 for sp in specs if sp[0] not in f and not np.any(grad[sp[0]])}
        free = [sp for sp in specs if sp[0] not in f]
        params, pred = fit_log(model(f), free, shapes, measured_s, points, model(f, gradient=True), warm)
        return {k: sig3(v) for k, v in f.items()} | params, pred

    best = None
    for c in choices:
        for sm in sm_refit or (SM_START,):
            params, pred = fit_at(c, float(sm), GATE_POINTS)
            score = _p90_log(pred, measured_s)
            if best is None or score < best[0]:
                best = (score, c, params)
    _, choice, params = best
    rows = np.arange(0, len(measured_s), -(-len(measured_s) // FIT_POINTS))
    sub = {k: v[rows] for k, v in shapes.items()}
    score = lambda sm: _p90_log(combine(terms(sub, fixed(choice, sm)), params | fixed(choice, sm)), measured_s[rows])
    sm = min(SM_CANDIDATES, key=score)
    sm = min((sm - SM_STEP / 2, sm, sm + SM_STEP / 2), key=score)
    return fit_at(choice, float(sm), FIT_POINTS, params)


def kv_cache_share(t: pd.DataFrame) -> np.ndarray:
    """Fraction of a serving KV cache the measured kernels touched: 1, or 1/2 for K-only legacy rows."""
    first = _version_key(FULL_KV_CACHE_FROM)
    share = {v: 0.5 if _version_key(str(v)) < first else 1.0 for v in t["version"].unique()}
    return t["version"].map(share).to_numpy(float)


def _shapes(t: pd.DataFrame, kv_bytes: float) -> dict:
    col = lambda c: t[c].to_numpy(float)
    return {"b": col("batch_size"), "s": col("isl"), "step": col("step"), "h": col("num_heads"),
            "kv": col("num_key_value_heads"), "d": col("head_dim"), "w": col("window_size"),
            "kv_bytes": kv_bytes * kv_cache_share(t)}


def prefill_s(p: dict, x: dict, peak: float, bandwidth: float):
    """Predicted seconds of the measured prefill shapes `x` under parameters `p`."""
    return form.attention_prefill_time_s(x["b"], x["s"], x["h"], x["kv"], x["d"], x["w"], x["kv_bytes"],
                                         peak, bandwidth, p)


def decode_s(p: dict, x: dict, peak: float, bandwidth: float):
    """Predicted seconds of the measured decode shapes `x` (kv_len = isl + step) under `p`."""
    return form.attention_decode_time_s(x["b"], x["s"] + x["step"], x["h"], x["kv"], x["d"], x["w"],
                                        x["kv_bytes"], peak, bandwidth, p)


def decode_terms(x: dict, fixed: dict) -> dict:
    """`form.decode_shape_terms` of the measured decode shapes `x` for the dispatch constants `fixed`."""
    kv_len = x["s"] + x["step"]
    return form.decode_shape_terms(x["b"], kv_len, x["h"], x["kv"], x["d"], x["d"], x["w"], 2.0 * x["d"] * x["kv_bytes"],
                                   form.gqa_grouped(x["h"], x["kv"]), fixed["decode_sm_count"],
                                   fixed.get("decode_grouped_min_items", 0.0),
                                   fixed.get("decode_split_keys", form.SPLIT_KEYS), per_head=True)


def fit(data: KernelData, gpu: str) -> list[Fit]:
    """One attention Fit per KV-cache precision the GPU has measurements (and units) for."""
    system = data.system(gpu)
    bandwidth = float(system["memory_bandwidth_bytes_per_s"])
    ctx = read_table(data, gpu, FAMILY, "context_attention_perf")
    gen = read_table(data, gpu, FAMILY, "generation_attention_perf")
    fits = []
    for kv_dtype, (precision, kv_bytes, peak_col) in KV_PRECISIONS.items():
        c = ctx[(ctx.kernel_source == KERNEL_SOURCE) & (ctx.kv_cache_dtype == kv_dtype)] if len(ctx) else ctx
        g = gen[(gen.kernel_source == KERNEL_SOURCE) & (gen.kv_cache_dtype == kv_dtype)] if len(gen) else gen
        peak = float(system[peak_col])
        if len(c) == 0 or len(g) == 0 or not has_units(system, peak_col):
            continue
        pre, dec = _shapes(c, kv_bytes), _shapes(g, kv_bytes)
        # Prefill first (it alone pins the MMA efficiency), then decode with that efficiency fixed.
        # No sliding-window rows (A100): keep the bare window + one tile (extra keys 0).
        specs = PREFILL_PARAMS + (WINDOW_PARAMS if (c.window_size > 0).any() else ())
        p_pre, pre_s = fit_prefill(lambda q, x: prefill_s(NO_WINDOW_EXTRA | q, x, peak, bandwidth),
                                   pre, c["latency_s"].to_numpy(), specs)
        p_pre = NO_WINDOW_EXTRA | p_pre
        combine = lambda t, q, gradient=False: form.decode_from_terms(t, peak, bandwidth, p_pre["prefill_efficiency_max"],
                                                                      q, gradient)
        p_dec, _ = fit_decode(decode_terms, combine, dec, g["latency_s"].to_numpy(), choices=GATES)
        dec_s = decode_s(p_pre | p_dec, dec, peak, bandwidth)
        fits.append(Fit(FAMILY, gpu, precision, p_pre | p_dec,
                        np.concatenate([c["latency_s"].to_numpy(), g["latency_s"].to_numpy()]),
                        np.concatenate([pre_s, dec_s]),
                        basis=f"{len(c)} prefill + {len(g)} decode TensorRT-LLM attention kernels "
                              f"(kv cache {kv_dtype}, kernel source {KERNEL_SOURCE})"))
    return fits

