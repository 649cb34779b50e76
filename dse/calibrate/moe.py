"""Fit the MoE layer time model (`dse.perf.forms.moe`) to AIConfigurator's `moe_perf` tables.

Data: `<gpu>/moe/trtllm/*/moe_perf.parquet`, TensorRT-LLM's whole MoE layer on one GPU (vLLM's tables
of the same op are fitted by dse.calibrate.moe_vllm through `fit_table`, as family moe_vllm). Its
`num_tokens` is the batch of the whole EP group: the collector feeds every token to the GPU and
keeps its local experts' work (AIConfigurator multiplies the per-rank batch by the attention DP
size). Routing is `balanced` (tokens spread evenly over the experts) or `power_law_<alpha>`
(expert loads drawn from a power law, the busiest EP rank on the measured GPU, 5 draws timed).

Fits, per GPU:
  * one per precision: the layer parameters of the form (LAYER_PARAMS), first on its rows whose
    load on the measured GPU needs no routing skew (balanced rows; legacy power-law rows, below),
    then again on all its rows, the routing skew held. Its Fit holds the first kind of rows.
  * one routing fit (precision "all") on the power-law rows of every precision, the layer
    parameters held: per distribution `<dist>_busiest_expert_ratio` (busiest expert's load over
    the mean) and `<dist>_active_expert_fraction` (share of a rank's experts that get traffic).
Kernel dtypes map to dse precisions: bfloat16 bf16, fp8 fp8, fp8_block fp8-block, nvfp4 nvfp4,
w4a8_mxfp4_mxfp8 mxfp4 (FP4 peak); weight-only formats (w4a16_mxfp4, int4) are not fitted.
Non-gated kernels (ReLU^2, `..._nongated`) share their precision's fit with one GEMM fewer.

What the tables measure beyond the form:
  * legacy power-law rows (TensorRT-LLM before LEGACY_BEFORE: A100's 1.0.0 collection). The
    collector's generator of then (`power_law_logits_v3` before its 2026 rewrite) rounds the drawn
    shares to counts and hands the missing selections one each to the first experts in sort order
    (below ~E/k tokens almost all: consecutive experts, so each of a handful of tokens has all k
    on one EP rank), lets an expert get more draws than there are tokens (by top-k ties the
    surplus goes to the lowest-numbered experts: the measured rank's), and moves the busiest rank
    onto the measured GPU. No routing skew of the form describes that, so the measured GPU's load
    (pairs R, experts touched) is replayed from the generator (LEGACY_DRAWS seeded draws per shape,
    time averaged) and the layer parameters fitted at it; no routing skew is fitted from them.
  * TRTLLM-Gen tiles (mxfp4: w4a8_mxfp4_mxfp8's `moe_torch_flow` kernel on Blackwell): the tile of
    tokens per expert (calculate_tile_tokens_dim on the local experts) is T*k/E_l to the next power
    of two, within TILE_TOKENS, and a touched expert computes whole tiles of its x = R/touched
    tokens (balanced rows: exactly ceil(x / tile) tiles; power-law rows: max(tile, x + tile/2) rows,
    one tile, beyond it half a tile of padding on average): the time steps where T*k/E_l crosses a
    power of two. The padding is folded into the peak given to the form (peak * (x + HALF_TOKENS) /
    rows, dse.perf.forms.moe.tiled_peak); a model using mxfp4's parameters must pad the same way.

  * TensorRT-LLM's min-latency kernels (`moe_torch_flow_min_latency`, B200/GB200 nvfp4: the
    TRTLLM-Gen MoE backend, which the collector selects with moe_backend "TRTLLM"): every shape
    they measure is also measured with the default CUTLASS kernel, and one form per precision cannot
    describe two kernels, so they are fitted apart, in TRTLLM-Gen's token tiles, as precision
    `nvfp4-min-latency` (the layer parameters only: the routing skew is the CUTLASS rows' fit), on
    their rows of at most MIN_LATENCY_MAX_TOKENS tokens, where TensorRT-LLM serving runs them
    (dse.perf.forms.moe; dse.perf.roofline.moe_parts).

Points left out, and why:
  * mis-tuned series: a layer configuration (shape, precision, kernel, routing, tp, ep) whose median
    latency over its token counts is more than MISTUNED_FACTOR off the model fitted to all series.
    The collector's tuned-tactic cache is keyed by (dtype, hidden, inter/tp, experts/ep) only and
    matched by file-name prefix, so such configurations replay tactics tuned for another model
    (whole series 1.5-5x slower than neighbours with more work); DeepGEMM (fp8-block on
    Blackwell), which has no such cache, has none. Each Fit's `basis` says how many were left out.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse.calibrate import Fit, round_sig
from dse.calibrate.moe_legacy import LEGACY_DRAWS, legacy_power_law_loads, time_at_load
from dse.calibrate.tables import KernelData, _version_key
from dse.perf.forms import moe as form
from dse.perf.forms.moe import FORMATS, LAYER_PARAMS, MIN_LATENCY_MAX_TOKENS, moe_time_s, tile_tokens

FAMILY = "moe"
FRAMEWORK = "trtllm"
# kernel dtype -> dse precision (weight-only and smooth-quant formats are not fitted)
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "w4a8_mxfp4_mxfp8": "mxfp4",
          "nvfp4_min_latency": "nvfp4-min-latency",   # a pseudo dtype: SEPARATE
          # vLLM's default kernel of each dtype (dse.calibrate.moe_vllm)
          "vllm_bfloat16": "vllm-bf16", "vllm_fp8": "vllm-fp8", "vllm_fp8_block": "vllm-fp8-block",
          "vllm_nvfp4": "vllm-nvfp4", "vllm_mxfp4": "vllm-mxfp4"}
# kernels fitted apart from their dtype's default one: (dtype, kernel) -> the pseudo dtype they fit as
SEPARATE = {("nvfp4", "moe_torch_flow_min_latency"): "nvfp4_min_latency"}
# the number format of a pseudo dtype's weights and peak
KERNEL_FORMAT = {"nvfp4_min_latency": "nvfp4", "vllm_bfloat16": "bf16", "vllm_fp8": "fp8",
                 "vllm_fp8_block": "fp8-block", "vllm_nvfp4": "nvfp4", "vllm_mxfp4": "mxfp4"}
FIT_FORMAT = {DTYPES[d]: f for d, f in KERNEL_FORMAT.items()}   # ... by the precision its Fit is labelled
MISTUNED_FACTOR = 1.5
FIT_POINTS = 1000  # evenly spaced rows one least-squares problem sees (keeps the fit fast)
MAX_STEPS = 100    # model evaluations of one least-squares problem from the fixed starts
SERIES = ["moe_dtype", "kernel_source", "distribution", "hidden_size", "inter_size", "topk",
          "num_experts", "moe_tp_size", "moe_ep_size"]
LEGACY_BEFORE = "1.3"   # TensorRT-LLM versions below this were collected with the legacy power-law generator
TILED = {("w4a8_mxfp4_mxfp8", "moe_torch_flow"),   # (dtype, kernel) run by TRTLLM-Gen's token tiles
         ("nvfp4_min_latency", "moe_torch_flow_min_latency")}

# name -> (start, lower, upper, typical scale); fixed starts keep the fit deterministic
LAYER = {"floor_s": (3e-5, 0.0, 1e-3, 1e-5), "efficiency_max": (0.7, 0.02, 1.0, 0.1),
         "memory_efficiency": (0.8, 0.05, 1.0, 0.1), "routed_bytes_per_element": (12.0, 0.0, 200.0, 1.0),
         "expert_overhead_s": (1e-7, 0.0, 1e-5, 1e-7), "local_expert_overhead_s": (5e-8, 0.0, 1e-5, 1e-8),
         "routing_s_per_selection": (3e-10, 0.0, 1e-7, 1e-10), "routing_step_s": (5e-7, 0.0, 1e-5, 1e-7)}
assert tuple(LAYER) == LAYER_PARAMS
ROUTING = {"busiest_expert_ratio": (8.0, 1.0, 1e3, 1.0), "active_expert_fraction": (0.9, 0.05, 1.0, 0.1)}


class Block:
    """Rows of one precision under one routing, as arrays (built once, evaluated many times).
    `skewed`: the load on the measured GPU follows the fitted routing skew (power-law rows of the
    current generator); legacy power-law rows carry their replayed `load` instead."""

    def __init__(self, rows: pd.DataFrame, hw: dict, dtype: str, dist: str, legacy: bool = False):
        f = lambda c: rows[c].to_numpy(float)
        self.hw, self.dtype, self.dist = hw, dtype, dist
        self.shapes = dict(num_tokens=f("num_tokens"), hidden_size=f("hidden_size"),
                           inter_size=f("inter_size"), topk=f("topk"), num_experts=f("num_experts"),
                           tp_size=f("moe_tp_size"), ep_size=f("moe_ep_size"),
                           gated=np.where(rows["kernel_source"].str.contains("nongated").to_numpy(), 1.0, 2.0))
        self.measured_s = f("latency_s")
        self.series = rows["_series"].to_numpy()  # layer configuration (SERIES) of each row
        tiled = rows["_tiled"].to_numpy(bool)
        s = self.shapes
        self.tile = np.where(tiled, tile_tokens(s["num_tokens"], s["topk"], s["num_experts"] / s["ep_size"]),
                             np.nan) if tiled.any() else None
        self.load = None
        if legacy and dist != "balanced":
            alpha = float(dist.rsplit("_", 1)[1])
            routed, touched = np.zeros((len(rows), LEGACY_DRAWS)), np.zeros((len(rows), LEGACY_DRAWS))
            keys = rows[["num_experts", "topk", "moe_ep_size"]].to_numpy(np.int64)
            for key in np.unique(keys, axis=0):  # one replay per layer shape, over its token counts
                at = np.flatnonzero((keys == key).all(1))
                tokens, which = np.unique(s["num_tokens"][at], return_inverse=True)
                r, c = legacy_power_law_loads(tokens, *key, alpha)
                routed[at], touched[at] = r[which], c[which]
            self.load = (routed, touched)
        self.skewed = dist != "balanced" and self.load is None

    def predict(self, layers: dict, routing: dict) -> np.ndarray:
        if self.load is not None:
            return time_at_load(self.shapes, self.hw, layers[self.dtype], *self.load)
        ratio, active = routing[self.dist] if self.skewed else (1.0, 1.0)
        return _time(self.shapes, self.hw, layers[self.dtype], ratio, active, not self.skewed, self.tile)

    def take(self, rows) -> "Block":
        """The block restricted to a boolean mask or to positions."""
        out = object.__new__(Block)
        out.__dict__.update(self.__dict__, shapes={k: v[rows] for k, v in self.shapes.items()},
                            measured_s=self.measured_s[rows], series=self.series[rows],
                            tile=None if self.tile is None else self.tile[rows],
                            load=None if self.load is None else tuple(v[rows] for v in self.load))
        return out

    def mistuned(self, predicted: np.ndarray) -> np.ndarray:
        """Rows of series whose median latency is more than MISTUNED_FACTOR off the model."""
        off = pd.Series(np.log(predicted / self.measured_s))
        median = off.groupby(self.series).transform("median").to_numpy()
        return np.abs(median) > np.log(MISTUNED_FACTOR)


class _Stack:
    """Blocks without a replayed load evaluated as one: one call of the form per evaluation, with
    each row's layer and routing parameters (the least squares' inner loop)."""

    def __init__(self, blocks: list):
        self.parts, self.sizes = blocks, [len(b.measured_s) for b in blocks]
        self.shapes = {k: np.concatenate([b.shapes[k] for b in blocks]) for k in blocks[0].shapes}
        self.hw = {k: np.repeat([b.hw[k] for b in blocks], self.sizes) for k in blocks[0].hw}
        self.measured_s = np.concatenate([b.measured_s for b in blocks])
        tiles = [np.full(n, np.nan) if b.tile is None else b.tile for b, n in zip(blocks, self.sizes)]
        self.tile = np.concatenate(tiles) if any(b.tile is not None for b in blocks) else None
        self.spread = np.repeat([not b.skewed for b in blocks], self.sizes)

    def predict(self, layers: dict, routing: dict) -> np.ndarray:
        each = lambda values: values[0] if len(set(values)) == 1 else np.repeat(values, self.sizes)
        skews = [routing[b.dist] if b.skewed else (1.0, 1.0) for b in self.parts]
        return _time(self.shapes, self.hw, {n: each([layers[b.dtype][n] for b in self.parts]) for n in LAYER},
                     each([r for r, _ in skews]), each([a for _, a in skews]), self.spread, self.tile)


def _time(shapes: dict, hw: dict, layer: dict, ratio, active, spread, tile) -> np.ndarray:
    """The form's time under the routing skew; rows with a TRTLLM-Gen `tile` (not NaN) get its padding."""
    if tile is not None:
        at = np.flatnonzero(~np.isnan(tile))
        pick = lambda v: v[at] if np.ndim(v) else v
        s = {k: v[at] for k, v in shapes.items()}
        routed = form.routed_pairs(s["num_tokens"], s["topk"], s["num_experts"], s["ep_size"], pick(ratio))
        x = routed / form.experts_touched(routed, np.maximum(s["num_experts"] / s["ep_size"], 1.0), pick(spread),
                                          pick(active))
        peak = np.broadcast_to(np.asarray(hw["peak_flops_per_s"], float), tile.shape).copy()
        peak[at] = form.tiled_peak(peak[at], tile[at], x, pick(spread))
        hw = dict(hw, peak_flops_per_s=peak)
    return moe_time_s(**shapes, **hw, **layer, busiest_expert_ratio=ratio, active_expert_fraction=active,
                      spread=spread)


def _blocks(t: pd.DataFrame, system, legacy_before: str | None = LEGACY_BEFORE) -> dict:
    """(kernel dtype, distribution, legacy) -> Block, for the precisions the catalog has a peak for."""
    out = {}
    versions = t["version"].astype(str) if "version" in t else pd.Series("", index=t.index)
    old = {v: legacy_before is not None and _version_key(v) < _version_key(legacy_before) for v in versions.unique()}
    t = t.assign(_legacy=versions.map(old).to_numpy(bool),
                 _series=t.groupby(SERIES, sort=False).ngroup().to_numpy())
    for (dtype, dist, legacy), rows in t.groupby(["moe_dtype", "distribution", "_legacy"], sort=True):
        weight_bytes, peak = FORMATS[KERNEL_FORMAT.get(dtype, DTYPES[dtype])]
        if np.isfinite(float(system[peak])):
            hw = dict(weight_bytes=weight_bytes, peak_flops_per_s=float(system[peak]),
                      memory_bandwidth_bytes_per_s=float(system["memory_bandwidth_bytes_per_s"]))
            out[dtype, dist, bool(legacy)] = Block(rows, hw, dtype, dist, bool(legacy))
    return out


def _least_squares(blocks: list, free: list, unpack, start=None, steps=MAX_STEPS) -> np.ndarray:
    """Robust least squares on log(predicted/measured) over evenly spaced rows of `blocks`; `free`:
    [(name, (start, lo, hi, scale))]; `unpack(p) -> (layers, routing)`; `start` overrides the starts."""
    share = max(FIT_POINTS // len(blocks), 200)
    subs = [b if len(b.measured_s) <= share else
            b.take(np.unique(np.linspace(0, len(b.measured_s) - 1, share).round().astype(int))) for b in blocks]
    subs = [b for b in subs if b.load is not None] + ([_Stack([b for b in subs if b.load is None])]
                                                       if any(b.load is None for b in subs) else [])

    def residual(p):
        layers, routing = unpack(p)
        return np.concatenate([np.log(b.predict(layers, routing) / b.measured_s) for b in subs])

    first, lo, hi, scale = (np.array([s[i] for _, s in free]) for i in range(4))
    first = first if start is None else np.asarray(start, float)
    p = least_squares(residual, np.clip(first, lo, hi), bounds=(lo, hi), x_scale=scale, loss="soft_l1",
                      f_scale=0.1, max_nfev=steps, tr_solver="lsmr").x
    return np.where(p - lo < 1e-6 * scale, lo, p)  # a parameter the data push to its bound is the bound


def _robust(blocks: list, free: list, unpack, steps=MAX_STEPS):
    """Fit, leave out mis-tuned series and, if any, refit from there (a third of `steps`, the model
    evaluations of the first fit); parameters rounded to 3 significant digits."""
    p = _least_squares(blocks, free, unpack, steps=steps)
    layers, routing = unpack(p)
    off = [b.mistuned(b.predict(layers, routing)) for b in blocks]
    if any(o.any() for o in off):
        kept = [b.take(~o) for b, o in zip(blocks, off)]
        p = _least_squares([b for b in kept if len(b.measured_s)], free, unpack, start=p, steps=steps // 3)
    return unpack(round_sig(p))


def _free(dtype=None, dists=(), layers=None, routing=None) -> list:
    """(name, (start, lo, hi, scale)) of the layer parameters of `dtype` (if given), then the routing
    parameters of `dists`; one already fitted starts from its value (a refit: fewer steps)."""
    held = (layers or {}).get(dtype, {})
    free = [(n, (held.get(n, s[0]),) + s[1:]) for n, s in LAYER.items()] if dtype else []
    for d in dists:
        now = (routing or {}).get(d)
        free += [(f"{d}_{n}", (now[i] if now else s[0],) + s[1:]) for i, (n, s) in enumerate(ROUTING.items())]
    return free


def _unpacker(layers: dict, routing: dict, dtype=None, dists=()):
    """p -> (layers, routing): `dtype`'s layer parameters (if given), then those of `dists`, over the held ones."""
    n = len(LAYER) if dtype else 0

    def unpack(p):
        p = [float(v) for v in p]
        got = {**layers, dtype: dict(zip(LAYER, p[:n]))} if dtype else dict(layers)
        k = len(ROUTING)
        return got, {**routing, **{d: tuple(p[n + k * i:n + k * (i + 1)]) for i, d in enumerate(dists)}}
    return unpack


def fit(data: KernelData, gpu: str) -> list[Fit]:
    """The MoE fits of one GPU from TensorRT-LLM's tables (vLLM's: dse.calibrate.moe_vllm)."""
    t = data.table(gpu, FAMILY, "moe_perf", FRAMEWORK)
    if t.empty:
        return []
    for (dtype, kernel), pseudo in SEPARATE.items():
        apart = (t["moe_dtype"] == dtype) & (t["kernel_source"] == kernel)
        t = t[~apart | (t["num_tokens"] <= MIN_LATENCY_MAX_TOKENS)].assign(moe_dtype=t["moe_dtype"].where(~apart, pseudo))
    tiled = pd.MultiIndex.from_frame(t[["moe_dtype", "kernel_source"]]).isin(list(TILED))
    return fit_table(t.assign(_tiled=tiled), data.system(gpu), gpu)


def fit_table(t: pd.DataFrame, system, gpu: str, family: str = FAMILY, source: str = "TensorRT-LLM moe_perf",
              legacy_before: str | None = LEGACY_BEFORE) -> list[Fit]:
    """The fits of one GPU's rows `t` (a moe_perf table, `_tiled` marking the rows of TRTLLM-Gen
    kernels), labelled `family`; `legacy_before`: versions collected with the legacy power-law
    generator (None: none were)."""
    t = t[t["moe_dtype"].isin(DTYPES)]
    blocks = list(_blocks(t, system, legacy_before).values())
    dtypes = [d for d in DTYPES if any(b.dtype == d for b in blocks)]
    skewed = sorted({b.dist for b in blocks if b.skewed})
    layers, routing = {}, {}
    for dtype in sorted({b.dtype for b in blocks if not b.skewed}):  # each precision on its rows of known load
        layers = _robust([b for b in blocks if b.dtype == dtype and not b.skewed], _free(dtype),
                         _unpacker(layers, {}, dtype))[0]
    held = [b for b in blocks if b.skewed and b.dtype in layers and b.dtype not in KERNEL_FORMAT]
    if held:  # the routing (layers held), each precision on all its rows (routing held), the routing again
        routing = _robust(held, _free(dists=skewed), _unpacker(layers, {}, dists=skewed))[1]
        for dtype in list(layers):
            mine = [b for b in blocks if b.dtype == dtype]
            if any(b.skewed for b in mine):
                layers = _robust(mine, _free(dtype, layers=layers), _unpacker(layers, routing, dtype),
                                 MAX_STEPS // 3)[0]
        routing = _robust(held, _free(dists=skewed, routing=routing), _unpacker(layers, {}, dists=skewed),
                          MAX_STEPS // 3)[1]
    for dtype in [d for d in dtypes if d not in layers]:  # measured only under current power-law routing
        mine, dists = [b for b in blocks if b.dtype == dtype], () if routing else skewed
        layers, got = _robust(mine, _free(dtype, dists), _unpacker(layers, routing, dtype, dists))
        routing = routing or got
    return _fits(gpu, blocks, dtypes, layers, routing, family, source)


def _fits(gpu, blocks, dtypes, layers, routing, family=FAMILY, source="") -> list[Fit]:
    """A Fit per precision over its rows of known load (balanced; legacy power-law, replayed) or, if
    none, its power-law rows; a routing Fit over the other precisions' power-law rows. Without that,
    a fitted routing skew goes into the precision's Fit, fitted with it."""
    def points(bs):
        preds = [b.predict(layers, routing) for b in bs]
        keeps = [~b.mistuned(p) for b, p in zip(bs, preds)]
        return (np.concatenate([b.measured_s[k] for b, k in zip(bs, keeps)] or [np.zeros(0)]),
                np.concatenate([p[k] for p, k in zip(preds, keeps)] or [np.zeros(0)]),
                sum(len(p) for p in preds))

    routing_params = {f"{d}_{n}": float(v) for d, r in sorted(routing.items()) for n, v in zip(ROUTING, r)}
    known, fits = {b.dtype for b in blocks if not b.skewed}, []
    held = [b for b in blocks if b.skewed and b.dtype in known and b.dtype not in KERNEL_FORMAT]
    for dtype in dtypes:
        own = [b for b in blocks if b.dtype == dtype and (not b.skewed or dtype not in known)]
        measured, predicted, total = points(own)
        params, kinds = dict(layers[dtype]), []
        if any(b.dist == "balanced" for b in own):
            kinds.append("balanced routing")
        if any(b.load is not None for b in own):
            kinds.append(f"power-law rows of the legacy generator (TensorRT-LLM before {LEGACY_BEFORE}): the measured "
                         f"GPU's load replayed from it ({LEGACY_DRAWS} draws per shape), no routing skew fitted")
        if dtype not in known:
            kinds.append("measured only under power-law routing: layer parameters fitted there")
            if not held and routing_params:
                params, kinds[-1] = {**params, **routing_params}, kinds[-1] + " jointly with the routing skew"
        elif any(b.skewed and b.dtype == dtype for b in held):
            kinds.append("layer parameters fitted on these and its power-law rows (routing skew held)")
        if any(b.tile is not None for b in own):
            kinds.append("TRTLLM-Gen kernel: a touched expert computes whole tiles of x tokens (ceil(x / tile) under "
                         "balanced routing, max(tile, x + tile/2) rows under skew), tile = T*k/E_l to the next power of "
                         "two (8-256), the padding folded into the peak")
        fits.append(Fit(family, gpu, DTYPES[dtype], params, measured, predicted,
                        _basis("; ".join(kinds), len(measured), total, source)))
    if held:
        measured, predicted, total = points(held)
        kind = "power-law routing skew, each precision's layer parameters held"
        fits.append(Fit(family, gpu, "all", routing_params, measured, predicted,
                        _basis(kind, len(measured), total, source)))
    return fits


def _basis(kind: str, kept: int, total: int, source: str) -> str:
    return (f"{kind}; {source}; {total - kept} of {total} points in mis-tuned series left out (median "
            f"off the model by more than {MISTUNED_FACTOR}x)")
