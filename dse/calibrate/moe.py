"""Fit the MoE layer time model (`dse.perf.forms.moe`) to AIConfigurator's `moe_perf` tables.

Data: `<gpu>/moe/trtllm/*/moe_perf.parquet`, TensorRT-LLM's whole MoE layer on one GPU. Its
`num_tokens` is the batch of the whole EP group: the collector feeds every token to the GPU and
keeps its local experts' work, and AIConfigurator multiplies the per-rank batch by the attention
DP size before looking a layer up. Routing is `balanced` (tokens spread evenly over the experts)
or `power_law_<alpha>` (expert loads drawn from a power law, the busiest EP rank's experts on the
measured GPU, latency averaged over 5 draws).

Fits, per GPU:
  * one per precision: the layer parameters of the form (floor_s, efficiency_max,
    memory_efficiency, routed_bytes_per_element, expert_overhead_s, local_expert_overhead_s,
    routing_s_per_selection, routing_step_s), first on the precision's rows whose load on the
    measured GPU is known without the routing skew (balanced rows, and legacy power-law rows, see
    below), then again on all its rows with the routing skew held;
  * one routing fit (precision "all") on the power-law rows of every precision, the layer
    parameters held: per distribution `<dist>_busiest_expert_ratio` (busiest expert's load over
    the mean) and `<dist>_active_expert_fraction` (share of a rank's experts that get traffic).
    Each precision's Fit holds its balanced (and legacy) rows, the routing Fit the power-law rows.
Kernel dtypes map to dse precisions: bfloat16 bf16, fp8 fp8, fp8_block fp8-block, nvfp4 nvfp4,
w4a8_mxfp4_mxfp8 mxfp4 (FP4 peak); weight-only formats (w4a16_mxfp4, int4) are not fitted.
Non-gated kernels (ReLU^2, `..._nongated`) share their precision's fit with one GEMM fewer.

What the tables measure, beyond the form:
  * legacy power-law rows (TensorRT-LLM before 1.3: A100's 1.0.0 collection). AIConfigurator's
    generator of that time (`power_law_logits_v3` before its 2026 rewrite) rounds the drawn expert
    shares to integer counts, gives the missing selections one each to the first experts in sort
    order (below ~E/k tokens nearly all of them: consecutive experts, so a handful of tokens puts
    all k selections of each on one EP rank), does not cap an expert at one selection per token
    (the surplus of an over-full expert goes, by top-k ties, to the lowest-numbered experts: the
    measured rank's), and moves the busiest rank onto the measured GPU. That is not a routing
    skew the form describes, so the measured GPU's load (pairs R and distinct experts touched) is
    replayed from that generator (LEGACY_DRAWS draws per shape, fixed seeds) and the layer
    parameters are fitted at that load; such a GPU gets no routing-skew parameters.
  * TRTLLM-Gen tiles (mxfp4: the `moe_torch_flow` kernel of w4a8_mxfp4_mxfp8 on Blackwell). Its
    tile of tokens per expert is TensorRT-LLM's `calculate_tile_tokens_dim` on the local experts:
    the next power of two of T*k/E_l, within TILE_TOKENS; each touched expert computes
    whole tiles of its x = R/touched tokens, at least one tile and on average half a tile of
    padding beyond (max(tile, x + tile/2) rows: continuous, so the least squares can step), and
    the layer time steps where T*k/E_l crosses a power of two. The fit folds that padding into the
    peak it gives the form (peak * (x + HALF_TOKENS) / max(tile, x + tile/2), so the form's
    compute term is that of the padded rows); a model using mxfp4's parameters must pad the same way.

Points left out, and why:
  * `moe_torch_flow_min_latency` (B200/GB200 nvfp4): TensorRT-LLM's alternative min-latency
    kernel; every shape it measures is also measured with the default CUTLASS kernel, which is
    the one fitted (one form per precision cannot describe two kernels).
  * mis-tuned series: a layer configuration (shape, precision, kernel, routing, tp, ep) whose
    median latency over its token counts is more than MISTUNED_FACTOR off the model fitted to
    all series. The collector's tuned-tactic cache is keyed by (dtype, hidden, inter/tp,
    experts/ep) only and matched by file-name prefix, so such configurations replay tactics tuned
    for another model (whole series 1.5-5x slower than their neighbours with more work);
    DeepGEMM (fp8-block on Blackwell), which has no such cache, has none. Each Fit's `basis`
    states how many points were left out.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse.calibrate import Fit, round_sig
from dse.calibrate.tables import KernelData, _version_key
from dse.perf.forms import moe as form
from dse.perf.forms.moe import FORMATS, LAYER_PARAMS, moe_time_s

FAMILY = "moe"
FRAMEWORK = "trtllm"
# kernel dtype -> dse precision (weight-only and smooth-quant formats are not fitted)
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "w4a8_mxfp4_mxfp8": "mxfp4"}
LEFT_OUT_SOURCES = ("moe_torch_flow_min_latency",)
MISTUNED_FACTOR = 1.5
FIT_POINTS = 1500  # evenly spaced rows one least-squares problem sees (keeps the fit fast)
MAX_STEPS = 100    # model evaluations of one least-squares problem from the fixed starts
SERIES = ["moe_dtype", "kernel_source", "distribution", "hidden_size", "inter_size", "topk",
          "num_experts", "moe_tp_size", "moe_ep_size"]
LEGACY_BEFORE = "1.3"   # TensorRT-LLM versions below this were collected with the legacy power-law generator
LEGACY_DRAWS = 16       # draws of that generator averaged per shape (the collector timed 5)
TILED = {("w4a8_mxfp4_mxfp8", "moe_torch_flow")}  # (dtype, kernel) run by TRTLLM-Gen's token tiles
TILE_TOKENS = (8.0, 256.0)  # smallest and largest TRTLLM-Gen tile of tokens per expert

# (start, lower, upper, typical scale) of each parameter; fixed starts keep the fit deterministic
LAYER = dict(zip(LAYER_PARAMS, (
    (3e-5, 0.0, 1e-3, 1e-5),       # floor_s
    (0.7, 0.02, 1.0, 0.1),         # efficiency_max
    (0.8, 0.05, 1.0, 0.1),         # memory_efficiency
    (12.0, 0.0, 200.0, 1.0),       # routed_bytes_per_element
    (1e-7, 0.0, 1e-5, 1e-7),       # expert_overhead_s
    (5e-8, 0.0, 1e-5, 1e-8),       # local_expert_overhead_s
    (3e-10, 0.0, 1e-7, 1e-10),     # routing_s_per_selection
    (5e-7, 0.0, 1e-5, 1e-7),       # routing_step_s
)))
ROUTING = {
    "busiest_expert_ratio": (8.0, 1.0, 1e3, 1.0),
    "active_expert_fraction": (0.9, 0.05, 1.0, 0.1),
}


def legacy_power_law_loads(num_tokens, num_experts: int, topk: int, ep_size: int, alpha: float,
                           draws: int = LEGACY_DRAWS) -> tuple[np.ndarray, np.ndarray]:
    """(routed pairs, distinct experts) on the measured GPU, shape (len(num_tokens), draws), under
    AIConfigurator's legacy `power_law_logits_v3` (see the module docstring) for one layer shape
    and each token count; seeded by the shape, so deterministic. Ties sort in expert order (a
    stable sort), and top-k fills a token's missing selections with the lowest-numbered experts it
    does not have."""
    E, k, ep = int(num_experts), int(topk), int(ep_size)
    tokens = np.asarray(num_tokens, np.int64)
    T = np.repeat(tokens, draws)  # one row per (token count, draw)
    local = max(E // ep, 1)
    rng = np.random.default_rng([E, k, ep, int(round(alpha * 1000))])
    big = T * k > E
    lo, hi = np.where(big, 1.0, 0.01)[:, None], np.where(big, 0.8 * T, 2.0)[:, None]
    a = 1.0 - alpha
    shares = ((hi ** a - lo ** a) * rng.random((len(T), E)) + lo ** a) ** (1.0 / a)
    counts = np.round(shares / shares.sum(1, keepdims=True) * (T * k)[:, None]).astype(np.int64)
    order = np.argsort(-counts, axis=1, kind="stable")
    rank = np.empty_like(order)  # each expert's place in that order
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(E), order.shape), axis=1)
    delta = T * k - counts.sum(1)
    more = np.maximum(delta, 0)  # missing selections: one each to the first experts in order, cycling
    counts += (more // E)[:, None] + (rank < (more % E)[:, None])
    # too many: walking up from the last in order, one less from each expert that has any, and
    # one less from the largest (first in expert order) for each that has none
    less = np.maximum(-delta, 0)
    empty = (counts == 0).sum(1)
    from_top = np.minimum(less, empty)
    counts -= (rank >= E - less[:, None]) & (counts > 0) & (rank < E - empty[:, None])
    for step in range(int(from_top.max(initial=0))):
        rows = np.flatnonzero(from_top > step)
        counts[rows, np.argmax(counts[rows], axis=1)] -= 1
    by_rank = counts.reshape(len(T), ep, local)
    busiest = np.argmax(by_rank.sum(2), axis=1)
    mine = by_rank[np.arange(len(T)), busiest]  # the busiest rank's experts, moved onto the measured GPU
    routed, touched = mine.sum(1).astype(float), (mine > 0).sum(1).astype(float)
    for d in np.flatnonzero(counts.max(1) > T):  # an expert drawn more often than there are tokens
        c = by_rank[d].copy()
        c[[0, busiest[d]]] = c[[busiest[d], 0]]
        routed[d], touched[d] = _surplus_load(c.ravel(), int(T[d]), k, local)
    return routed.reshape(len(tokens), draws), touched.reshape(len(tokens), draws)


def _surplus_load(counts: np.ndarray, T: int, k: int, local: int) -> tuple[float, float]:
    """(pairs, distinct experts) on experts 0..local-1 when some expert holds more draws than there
    are tokens: the draws, in descending count order, are dealt to the tokens column by column
    (token t gets draws t, T+t, ...), so an expert's draws cover a cyclic run of tokens (all of them
    if it has T or more), and a token short of k distinct experts takes, by top-k ties, the
    lowest-numbered experts it lacks. Counted per stretch of tokens between runs' ends."""
    ranked = np.argsort(-counts, kind="stable")
    held = counts[ranked]
    first = (np.cumsum(held) - held) % T
    part = (held > 0) & (held < T)
    lo, hi, who = first[part], first[part] + held[part], ranked[part]
    wrap = hi > T  # a run past the last token continues at the first
    lo, hi, who = (np.concatenate([lo, np.zeros(wrap.sum(), np.int64)]),
                   np.concatenate([np.minimum(hi, T), hi[wrap] - T]), np.concatenate([who, who[wrap]]))
    edges = np.unique(np.concatenate([[0, T], lo, hi]))
    width, start, stop = np.diff(edges), np.searchsorted(edges, lo), np.searchsorted(edges, hi)
    mine = who < local
    full = counts >= T
    distinct = np.cumsum(np.bincount(start, minlength=len(edges)) - np.bincount(stop, minlength=len(edges)))[:-1]
    distinct0 = np.cumsum(np.bincount(start[mine], minlength=len(edges))
                          - np.bincount(stop[mine], minlength=len(edges)))[:-1]
    distinct, distinct0 = distinct + full.sum(), distinct0 + full[:local].sum()
    fills = np.minimum(k - distinct, local - distinct0)  # top-k ties: the lowest numbers, 0..local-1 first
    pairs = float((width * (distinct0 + fills)).sum())
    if (counts[:local] > 0).all():
        return pairs, float(local)
    # which of the idle experts 0..local-1 the ties reach: the stretches' own experts, then the
    # lowest-numbered they lack
    runs = np.zeros((len(edges), local), np.int64)
    np.add.at(runs, (start[mine], who[mine]), 1)
    np.add.at(runs, (stop[mine], who[mine]), -1)
    has = (np.cumsum(runs, axis=0)[:-1] > 0) | full[None, :local]
    lacks = ~has
    got = has | (lacks & (np.cumsum(lacks, axis=1) <= (k - distinct)[:, None]))
    return pairs, float(got[width > 0].any(0).sum())


def time_at_load(shapes: dict, hw: dict, layer: dict, routed, touched) -> np.ndarray:
    """`moe_time_s` of the measured GPU at a known load: `routed` (token, expert) pairs on `touched`
    distinct experts (2-D, one column per routing draw), the time averaged over the draws. The same
    terms as dse.perf.forms.moe (a test holds the two equal at the form's own load)."""
    s = {k: np.asarray(v, float)[:, None] for k, v in shapes.items()}
    local = np.maximum(s["num_experts"] / s["ep_size"], 1.0)
    inter_local, mats = s["inter_size"] / s["tp_size"], s["gated"] + 1.0
    bw = hw["memory_bandwidth_bytes_per_s"] * layer["memory_efficiency"]
    tokens, h = s["num_tokens"], s["hidden_size"]
    activations = (form.TOKEN_IO_BYTES * tokens + layer["routed_bytes_per_element"] * routed) * h / bw
    weights = touched * mats * h * inter_local * hw["weight_bytes"] / bw
    x = routed / touched
    compute = 2.0 * routed * h * mats * inter_local / (
        hw["peak_flops_per_s"] * layer["efficiency_max"] * x / (x + form.HALF_TOKENS))
    fixed = (layer["floor_s"] + layer["routing_step_s"] * s["topk"]
             + layer["routing_s_per_selection"] * tokens * s["topk"]
             + layer["expert_overhead_s"] * touched + layer["local_expert_overhead_s"] * local)
    return (fixed + activations + np.maximum(weights, compute)).mean(axis=1)


def tile_tokens(num_tokens, topk, local_experts) -> np.ndarray:
    """TRTLLM-Gen's tile of tokens per expert: T*k/E_l to the next power of two, within TILE_TOKENS."""
    per_expert = np.maximum(np.asarray(num_tokens, float) * topk / np.maximum(local_experts, 1.0), 1.0)
    return np.clip(2.0 ** np.ceil(np.log2(per_expert) - 1e-9), *TILE_TOKENS)


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
        # which series (layer configuration over its token counts) each row belongs to
        self.series = rows.groupby(SERIES, sort=False).ngroup().to_numpy()
        tiled = np.array([(dtype, k) in TILED for k in rows["kernel_source"]], bool)
        self.tile = (np.where(tiled, tile_tokens(self.shapes["num_tokens"], self.shapes["topk"],
                                                 self.shapes["num_experts"] / self.shapes["ep_size"]), np.nan)
                     if tiled.any() else None)
        self.load = None
        if legacy and dist != "balanced":
            alpha = float(dist.rsplit("_", 1)[1])
            routed, touched = np.zeros((len(rows), LEGACY_DRAWS)), np.zeros((len(rows), LEGACY_DRAWS))
            keys = rows[["num_experts", "topk", "moe_ep_size"]].to_numpy(np.int64)
            for key in np.unique(keys, axis=0):  # one replay per layer shape, over its token counts
                at = np.flatnonzero((keys == key).all(1))
                tokens, which = np.unique(self.shapes["num_tokens"][at], return_inverse=True)
                r, c = legacy_power_law_loads(tokens, *key, alpha)
                routed[at], touched[at] = r[which], c[which]
            self.load = (routed, touched)
        self.skewed = dist != "balanced" and self.load is None

    def predict(self, layers: dict, routing: dict) -> np.ndarray:
        layer = layers[self.dtype]
        if self.load is not None:
            return time_at_load(self.shapes, self.hw, layer, *self.load)
        skew = {} if not self.skewed else dict(
            busiest_expert_ratio=routing[self.dist][0], active_expert_fraction=routing[self.dist][1], spread=False)
        hw = self.hw
        if self.tile is not None:  # TRTLLM-Gen computes whole tiles: fold the padding into the peak
            s = self.shapes
            routed = form.routed_pairs(s["num_tokens"], s["topk"], s["num_experts"], s["ep_size"],
                                       skew.get("busiest_expert_ratio", 1.0))
            x = routed / form.experts_touched(routed, np.maximum(s["num_experts"] / s["ep_size"], 1.0),
                                              skew.get("spread", True), skew.get("active_expert_fraction", 1.0))
            rows = np.maximum(self.tile, x + self.tile / 2.0)  # at least a tile, else half a tile of padding
            padded = np.where(np.isnan(self.tile), 1.0, (x + form.HALF_TOKENS) / rows)
            hw = dict(hw, peak_flops_per_s=hw["peak_flops_per_s"] * padded)
        return moe_time_s(**self.shapes, **hw, **layer, **skew)

    def take(self, rows) -> "Block":
        """The block restricted to a boolean mask or to positions."""
        out = object.__new__(Block)
        out.hw, out.dtype, out.dist, out.skewed = self.hw, self.dtype, self.dist, self.skewed
        out.shapes = {k: v[rows] for k, v in self.shapes.items()}
        out.measured_s, out.series = self.measured_s[rows], self.series[rows]
        out.tile = None if self.tile is None else self.tile[rows]
        out.load = None if self.load is None else tuple(v[rows] for v in self.load)
        return out

    def mistuned(self, predicted: np.ndarray) -> np.ndarray:
        """Rows of series whose median latency is more than MISTUNED_FACTOR off the model."""
        off = pd.Series(np.log(predicted / self.measured_s))
        median = off.groupby(self.series).transform("median").to_numpy()
        return np.abs(median) > np.log(MISTUNED_FACTOR)


def _legacy(versions: pd.Series) -> np.ndarray:
    """Rows collected with the legacy power-law generator (TensorRT-LLM before LEGACY_BEFORE)."""
    cut = _version_key(LEGACY_BEFORE)
    return np.array([_version_key(str(v)) < cut for v in versions], bool)


def _blocks(t: pd.DataFrame, system) -> dict:
    """(kernel dtype, distribution, legacy) -> Block, for the precisions the catalog has a peak for."""
    out = {}
    t = t.assign(_legacy=_legacy(t["version"]) if "version" in t else False)
    for (dtype, dist, legacy), rows in t.groupby(["moe_dtype", "distribution", "_legacy"], sort=True):
        weight_bytes, peak = FORMATS[DTYPES[dtype]]
        if np.isfinite(float(system[peak])):
            hw = dict(weight_bytes=weight_bytes, peak_flops_per_s=float(system[peak]),
                      memory_bandwidth_bytes_per_s=float(system["memory_bandwidth_bytes_per_s"]))
            out[dtype, dist, bool(legacy)] = Block(rows, hw, dtype, dist, bool(legacy))
    return out


def _least_squares(blocks: list, free: list, unpack, start=None, steps=MAX_STEPS) -> np.ndarray:
    """Robust least squares on log(predicted/measured) over evenly spaced rows of `blocks`;
    `free` lists (name, (start, lo, hi, scale)); `unpack(p) -> (layers, routing)`; `start`
    overrides the starts of `free`; at most `steps` model evaluations."""
    share = max(FIT_POINTS // len(blocks), 200)
    subs = [b if len(b.measured_s) <= share else
            b.take(np.unique(np.linspace(0, len(b.measured_s) - 1, share).round().astype(int))) for b in blocks]

    def residual(p):
        layers, routing = unpack(p)
        return np.concatenate([np.log(b.predict(layers, routing) / b.measured_s) for b in subs])

    first, lo, hi, scale = (np.array([s[i] for _, s in free]) for i in range(4))
    first = first if start is None else np.asarray(start, float)
    p = least_squares(residual, np.clip(first, lo, hi), bounds=(lo, hi), x_scale=scale, loss="soft_l1",
                      f_scale=0.1, max_nfev=steps, tr_solver="lsmr").x
    return np.where(p - lo < 1e-6 * scale, lo, p)  # a parameter the data push to its bound is the bound


def _robust(blocks: list, free: list, unpack, steps=MAX_STEPS):
    """Fit, leave out mis-tuned series and refit (from the first fit) if there are any; parameters
    rounded to 3 significant digits. `steps`: model evaluations of the first fit (a refit from a
    fit gets a third)."""
    p = _least_squares(blocks, free, unpack, steps=steps)
    layers, routing = unpack(p)
    off = [b.mistuned(b.predict(layers, routing)) for b in blocks]
    if any(o.any() for o in off):
        kept = [b.take(~o) for b, o in zip(blocks, off)]
        p = _least_squares([b for b in kept if len(b.measured_s)], free, unpack, start=p, steps=steps // 3)
    return unpack(round_sig(p))


def _free(dtype=None, dists=(), layers=None, routing=None) -> list:
    """(name, (start, lo, hi, scale)) of the layer parameters of `dtype` (if given), then of the
    routing parameters of `dists`; a parameter already fitted starts from its value (a refit:
    deterministic, and fewer steps)."""
    held = (layers or {}).get(dtype, {})
    free = [(n, (held.get(n, s[0]),) + s[1:]) for n, s in LAYER.items()] if dtype else []
    for d in dists:
        now = (routing or {}).get(d)
        free += [(f"{d}_{n}", (now[i] if now else s[0],) + s[1:]) for i, (n, s) in enumerate(ROUTING.items())]
    return free


def _unpacker(layers: dict, routing: dict, dtype=None, dists=()):
    """p -> (layers, routing): the layer parameters of `dtype` (if given), then the routing
    parameters of `dists`, on top of the parameters already held."""
    n = len(LAYER) if dtype else 0

    def unpack(p):
        p = [float(v) for v in p]
        got = {**layers, dtype: dict(zip(LAYER, p[:n]))} if dtype else dict(layers)
        k = len(ROUTING)
        return got, {**routing, **{d: tuple(p[n + k * i:n + k * (i + 1)]) for i, d in enumerate(dists)}}
    return unpack


def fit(data: KernelData, gpu: str, framework: str = FRAMEWORK) -> list[Fit]:
    """The MoE fits of one GPU (TensorRT-LLM's tables; `framework="vllm"` fits vLLM's instead)."""
    t = data.table(gpu, FAMILY, "moe_perf", framework)
    if t.empty:
        return []
    left_out = int(t["kernel_source"].isin(LEFT_OUT_SOURCES).sum())
    t = t[t["moe_dtype"].isin(DTYPES) & ~t["kernel_source"].isin(LEFT_OUT_SOURCES)]
    blocks = list(_blocks(t, data.system(gpu)).values())
    dtypes = [d for d in DTYPES if any(b.dtype == d for b in blocks)]
    skewed = sorted({b.dist for b in blocks if b.skewed})
    layers, routing = {}, {}
    for dtype in dtypes:  # each precision on its rows of known load (balanced, legacy power-law)
        known = [b for b in blocks if b.dtype == dtype and not b.skewed]
        if known:
            layers = _robust(known, _free(dtype), _unpacker(layers, {}, dtype))[0]
    held = [b for b in blocks if b.skewed and b.dtype in layers]
    if held:  # the routing on the power-law rows (layers held), each precision again on all its rows
        #       (routing held), and the routing again
        routing = _robust(held, _free(dists=skewed), _unpacker(layers, {}, dists=skewed))[1]
        for dtype in list(layers):
            mine = [b for b in blocks if b.dtype == dtype]
            if any(b.skewed for b in mine):
                layers = _robust(mine, _free(dtype, layers=layers), _unpacker(layers, routing, dtype),
                                 MAX_STEPS // 3)[0]
        routing = _robust(held, _free(dists=skewed, routing=routing), _unpacker(layers, {}, dists=skewed),
                          MAX_STEPS // 3)[1]
    for dtype in dtypes:  # precisions measured only under power-law routing of the current generator
        if dtype not in layers:
            mine = [b for b in blocks if b.dtype == dtype]
            if routing:
                layers = _robust(mine, _free(dtype), _unpacker(layers, routing, dtype))[0]
            else:
                layers, routing = _robust(mine, _free(dtype, skewed), _unpacker(layers, {}, dtype, skewed))
    return _fits(gpu, blocks, dtypes, layers, routing, left_out)


def _fits(gpu, blocks, dtypes, layers, routing, left_out) -> list[Fit]:
    """A Fit per precision over its rows of known load (balanced; legacy power-law, replayed) or,
    if it has none, its power-law rows; and a routing Fit over the power-law rows of the precisions
    with rows of known load. Where there is no such routing Fit but a routing skew was fitted, the
    routing parameters go into the precision's Fit, which was fitted with them."""
    def points(bs):
        preds = [b.predict(layers, routing) for b in bs]
        keeps = [~b.mistuned(p) for b, p in zip(bs, preds)]
        return (np.concatenate([b.measured_s[k] for b, k in zip(bs, keeps)] or [np.zeros(0)]),
                np.concatenate([p[k] for p, k in zip(preds, keeps)] or [np.zeros(0)]),
                sum(len(p) for p in preds))

    routing_params = {f"{d}_{n}": float(v) for d, r in sorted(routing.items()) for n, v in zip(ROUTING, r)}
    known = {b.dtype for b in blocks if not b.skewed}
    held = [b for b in blocks if b.skewed and b.dtype in known]
    fits = []
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
            kinds.append(f"TRTLLM-Gen kernel: each touched expert computes max(tile, x + tile/2) rows, tile = T*k/E_l "
                         f"to the next power of two ({TILE_TOKENS[0]:g}-{TILE_TOKENS[1]:g}), the padding folded into "
                         f"the peak")
        fits.append(Fit(FAMILY, gpu, DTYPES[dtype], params, measured, predicted,
                        _basis("; ".join(kinds), len(measured), total, left_out)))
    if held:
        measured, predicted, total = points(held)
        fits.append(Fit(FAMILY, gpu, "all", routing_params, measured, predicted,
                        _basis("power-law routing skew, each precision's layer parameters held", len(measured),
                               total, left_out)))
    return fits


def _basis(kind: str, kept: int, total: int, left_out: int) -> str:
    return (f"{kind}; TensorRT-LLM moe_perf; {total - kept} of {total} points in mis-tuned series left out "
            f"(median off the model by more than {MISTUNED_FACTOR}x)"
            + (f"; {left_out} min-latency-kernel rows not fitted" if left_out else ""))
