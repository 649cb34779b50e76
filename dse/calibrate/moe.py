"""Fit the MoE layer time model (`dse.perf.forms.moe`) to AIConfigurator's `moe_perf` tables.

Data: `<gpu>/moe/trtllm/*/moe_perf.parquet`, TensorRT-LLM's whole MoE layer on one GPU. Its
`num_tokens` is the batch of the whole EP group: the collector feeds every token to the GPU and
keeps its local experts' work, and AIConfigurator multiplies the per-rank batch by the attention
DP size before looking a layer up. Routing is `balanced` (tokens spread evenly over the experts)
or `power_law_<alpha>` (expert loads drawn from a power law, the busiest EP rank's experts on the
measured GPU, latency averaged over 5 draws).

Fits, per GPU:
  * one per precision on its balanced rows: the layer parameters of the form (floor_s,
    efficiency_max, memory_efficiency, routed_bytes_per_element, expert_overhead_s,
    local_expert_overhead_s, routing_s_per_selection, routing_step_s);
  * one routing fit (precision "all") on the power-law rows of every precision, the layer
    parameters held: per distribution `<dist>_busiest_expert_ratio` (busiest expert's load over
    the mean) and `<dist>_active_expert_fraction` (share of a rank's experts that get traffic).
    A GPU without balanced rows (A100) has its precision's layer parameters fitted jointly with
    the routing on the power-law rows; that precision's Fit then holds those rows and the routing
    parameters too (there is no separate routing Fit to hold them).
Kernel dtypes map to dse precisions: bfloat16 bf16, fp8 fp8, fp8_block fp8-block, nvfp4 nvfp4,
w4a8_mxfp4_mxfp8 mxfp4 (FP4 peak); weight-only formats (w4a16_mxfp4, int4) are not fitted.
Non-gated kernels (ReLU^2, `..._nongated`) share their precision's fit with one GEMM fewer.

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

from dse.calibrate import Fit
from dse.calibrate.tables import KernelData
from dse.perf.forms.moe import FORMATS, LAYER_PARAMS, moe_time_s

FAMILY = "moe"
FRAMEWORK = "trtllm"
# kernel dtype -> dse precision (weight-only and smooth-quant formats are not fitted)
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "w4a8_mxfp4_mxfp8": "mxfp4"}
LEFT_OUT_SOURCES = ("moe_torch_flow_min_latency",)
MISTUNED_FACTOR = 1.5
FIT_POINTS = 1500  # evenly spaced rows one least-squares problem sees (keeps the fit fast)
SERIES = ["moe_dtype", "kernel_source", "distribution", "hidden_size", "inter_size", "topk",
          "num_experts", "moe_tp_size", "moe_ep_size"]

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


def round_sig(x, digits=3) -> np.ndarray:
    """Each value rounded to `digits` significant digits, exactly as the catalog prints it."""
    x = np.asarray(x, float)
    return np.array([float(f"{v:.{digits}g}") for v in x.ravel()]).reshape(x.shape)


class Block:
    """Rows of one precision under one routing, as arrays (built once, evaluated many times)."""

    def __init__(self, rows: pd.DataFrame, hw: dict, dtype: str, dist: str):
        f = lambda c: rows[c].to_numpy(float)
        self.hw, self.dtype, self.dist = hw, dtype, dist
        self.shapes = dict(num_tokens=f("num_tokens"), hidden_size=f("hidden_size"),
                           inter_size=f("inter_size"), topk=f("topk"), num_experts=f("num_experts"),
                           tp_size=f("moe_tp_size"), ep_size=f("moe_ep_size"),
                           gated=np.where(rows["kernel_source"].str.contains("nongated").to_numpy(), 1.0, 2.0))
        self.measured_s = f("latency_s")
        # which series (layer configuration over its token counts) each row belongs to
        self.series = rows.groupby(SERIES, sort=False).ngroup().to_numpy()

    def predict(self, layers: dict, routing: dict) -> np.ndarray:
        skew = {} if self.dist == "balanced" else dict(
            busiest_expert_ratio=routing[self.dist][0], active_expert_fraction=routing[self.dist][1], spread=False)
        return moe_time_s(**self.shapes, **self.hw, **layers[self.dtype], **skew)

    def take(self, rows) -> "Block":
        """The block restricted to a boolean mask or to positions."""
        out = object.__new__(Block)
        out.hw, out.dtype, out.dist = self.hw, self.dtype, self.dist
        out.shapes = {k: v[rows] for k, v in self.shapes.items()}
        out.measured_s, out.series = self.measured_s[rows], self.series[rows]
        return out

    def mistuned(self, predicted: np.ndarray) -> np.ndarray:
        """Rows of series whose median latency is more than MISTUNED_FACTOR off the model."""
        off = pd.Series(np.log(predicted / self.measured_s))
        median = off.groupby(self.series).transform("median").to_numpy()
        return np.abs(median) > np.log(MISTUNED_FACTOR)


def _blocks(t: pd.DataFrame, system) -> dict:
    """(kernel dtype, distribution) -> Block, for the precisions the catalog has a peak for."""
    out = {}
    for (dtype, dist), rows in t.groupby(["moe_dtype", "distribution"], sort=True):
        weight_bytes, peak = FORMATS[DTYPES[dtype]]
        if np.isfinite(float(system[peak])):
            hw = dict(weight_bytes=weight_bytes, peak_flops_per_s=float(system[peak]),
                      memory_bandwidth_bytes_per_s=float(system["memory_bandwidth_bytes_per_s"]))
            out[dtype, dist] = Block(rows, hw, dtype, dist)
    return out


def _least_squares(blocks: list, free: list, unpack) -> np.ndarray:
    """Robust least squares on log(predicted/measured) over evenly spaced rows of `blocks`;
    `free` lists (name, (start, lo, hi, scale)); `unpack(p) -> (layers, routing)`."""
    share = max(FIT_POINTS // len(blocks), 200)
    subs = [b if len(b.measured_s) <= share else
            b.take(np.unique(np.linspace(0, len(b.measured_s) - 1, share).round().astype(int))) for b in blocks]

    def residual(p):
        layers, routing = unpack(p)
        return np.concatenate([np.log(b.predict(layers, routing) / b.measured_s) for b in subs])

    start, lo, hi, scale = (np.array([s[i] for _, s in free]) for i in range(4))
    p = least_squares(residual, start, bounds=(lo, hi), x_scale=scale, loss="soft_l1", f_scale=0.1,
                      max_nfev=100, tr_solver="lsmr").x
    return np.where(p - lo < 1e-6 * scale, lo, p)  # a parameter the data push to its bound is the bound


def _robust(blocks: list, free: list, unpack):
    """Fit, leave out mis-tuned series, refit; parameters rounded to 3 significant digits."""
    layers, routing = unpack(_least_squares(blocks, free, unpack))
    kept = [b.take(~b.mistuned(b.predict(layers, routing))) for b in blocks]
    return unpack(round_sig(_least_squares([b for b in kept if len(b.measured_s)], free, unpack)))


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
    blocks = _blocks(t, data.system(gpu))
    dtypes = [d for d in DTYPES if any(k[0] == d for k in blocks)]
    skewed = sorted({k[1] for k in blocks if k[1] != "balanced"})
    rspec = [(f"{d}_{n}", s) for d in skewed for n, s in ROUTING.items()]
    layers, routing = {}, {}
    for dtype in dtypes:  # each precision on its balanced rows
        if (dtype, "balanced") in blocks:
            layers = _robust([blocks[dtype, "balanced"]], list(LAYER.items()), _unpacker(layers, {}, dtype))[0]
    held = [b for b in blocks.values() if b.dist != "balanced" and b.dtype in layers]
    if held:  # the routing, on the power-law rows of those precisions
        routing = _robust(held, rspec, _unpacker(layers, {}, dists=skewed))[1]
    for dtype in dtypes:  # precisions measured only under power-law routing (A100)
        if dtype not in layers:
            own = [b for b in blocks.values() if b.dtype == dtype]
            free, unpack = ((list(LAYER.items()), _unpacker(layers, routing, dtype)) if routing else
                            (list(LAYER.items()) + rspec, _unpacker(layers, {}, dtype, skewed)))
            layers, routing = _robust(own, free, unpack)
    return _fits(gpu, blocks, dtypes, layers, routing, left_out)


def _fits(gpu, blocks, dtypes, layers, routing, left_out) -> list[Fit]:
    """A Fit per precision over its balanced rows (or, if it has none, its power-law rows), and a
    routing Fit over the power-law rows of the precisions with balanced rows. Where no such rows
    are left (A100), the routing parameters go into the precision's Fit, which was fitted with them."""
    def points(bs):
        preds = [b.predict(layers, routing) for b in bs]
        keeps = [~b.mistuned(p) for b, p in zip(bs, preds)]
        return (np.concatenate([b.measured_s[k] for b, k in zip(bs, keeps)] or [np.zeros(0)]),
                np.concatenate([p[k] for p, k in zip(preds, keeps)] or [np.zeros(0)]),
                sum(len(p) for p in preds))

    routing_params = {f"{d}_{n}": float(v) for d, r in sorted(routing.items()) for n, v in zip(ROUTING, r)}
    balanced = {b.dtype for b in blocks.values() if b.dist == "balanced"}
    held = [b for b in blocks.values() if b.dist != "balanced" and b.dtype in balanced]
    fits = []
    for dtype in dtypes:
        own = [b for b in blocks.values() if b.dtype == dtype and (b.dist == "balanced" or dtype not in balanced)]
        measured, predicted, total = points(own)
        params, kind = dict(layers[dtype]), "balanced routing"
        if dtype not in balanced:
            kind = "measured only under power-law routing: layer parameters fitted there"
            if not held:
                params, kind = {**params, **routing_params}, kind + " jointly with the routing skew"
        fits.append(Fit(FAMILY, gpu, DTYPES[dtype], params, measured, predicted,
                        _basis(kind, len(measured), total, left_out)))
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
