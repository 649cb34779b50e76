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
    the routing on the power-law rows; that precision's Fit then has no points of its own.
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
from dse.perf.forms.moe import moe_time_s

FAMILY = "moe"
FRAMEWORK = "trtllm"
# kernel dtype -> (dse precision, bytes per weight element incl. block scales, catalog peak column)
DTYPES = {
    "bfloat16": ("bf16", 2.0, "peak_bf16_flops_per_s"),
    "fp8": ("fp8", 1.0, "peak_fp8_flops_per_s"),
    "fp8_block": ("fp8-block", 1.0 + 4.0 / 128 ** 2, "peak_fp8_flops_per_s"),
    "nvfp4": ("nvfp4", 0.5 + 1.0 / 16, "peak_fp4_flops_per_s"),
    "w4a8_mxfp4_mxfp8": ("mxfp4", 0.5 + 1.0 / 32, "peak_fp4_flops_per_s"),
}
LEFT_OUT_SOURCES = ("moe_torch_flow_min_latency",)
MISTUNED_FACTOR = 1.5
FIT_POINTS = 2000  # evenly spaced rows one least-squares problem sees (keeps the fit fast)
SERIES = ["moe_dtype", "kernel_source", "distribution", "hidden_size", "inter_size", "topk",
          "num_experts", "moe_tp_size", "moe_ep_size"]

# parameter: (start, lower, upper, typical scale); fixed starts keep the fit deterministic
LAYER = {
    "floor_s": (3e-5, 0.0, 1e-3, 1e-5),
    "efficiency_max": (0.7, 0.02, 1.0, 0.1),
    "memory_efficiency": (0.8, 0.05, 1.0, 0.1),
    "routed_bytes_per_element": (12.0, 0.0, 200.0, 1.0),
    "expert_overhead_s": (1e-7, 0.0, 1e-5, 1e-7),
    "local_expert_overhead_s": (5e-8, 0.0, 1e-5, 1e-8),
    "routing_s_per_selection": (3e-10, 0.0, 1e-7, 1e-10),
    "routing_step_s": (5e-7, 0.0, 1e-5, 1e-7),
}
ROUTING = {
    "busiest_expert_ratio": (8.0, 1.0, 1e3, 1.0),
    "active_expert_fraction": (0.9, 0.05, 1.0, 0.1),
}


def round_sig(x, digits=3) -> np.ndarray:
    x = np.asarray(x, float)
    mag = np.floor(np.log10(np.where(x == 0, 1.0, np.abs(x))))
    return np.round(x / 10 ** mag, digits - 1) * 10 ** mag


class Block:
    """Rows of one precision under one routing, as arrays (built once, evaluated many times)."""

    def __init__(self, rows: pd.DataFrame, hw: dict, dtype: str, dist: str):
        f = lambda c: rows[c].to_numpy(float)
        self.rows, self.hw, self.dtype, self.dist = rows, hw, dtype, dist
        self.shapes = dict(num_tokens=f("num_tokens"), hidden_size=f("hidden_size"),
                           inter_size=f("inter_size"), topk=f("topk"), num_experts=f("num_experts"),
                           tp_size=f("moe_tp_size"), ep_size=f("moe_ep_size"),
                           gated=np.where(rows["kernel_source"].str.contains("nongated").to_numpy(), 1.0, 2.0))
        self.measured_s = f("latency_s")

    def predict(self, layers: dict, routing: dict) -> np.ndarray:
        skew = {} if self.dist == "balanced" else dict(
            busiest_expert_ratio=routing[self.dist][0], active_expert_fraction=routing[self.dist][1], spread=False)
        return moe_time_s(**self.shapes, **self.hw, **layers[self.dtype], **skew)

    def take(self, rows) -> "Block":
        """The block restricted to a boolean mask or to positions."""
        rows = np.asarray(rows)
        return Block(self.rows[rows] if rows.dtype == bool else self.rows.iloc[rows], self.hw, self.dtype, self.dist)

    def mistuned(self, predicted: np.ndarray) -> np.ndarray:
        """Rows of series whose median latency is more than MISTUNED_FACTOR off the model."""
        off = pd.Series(np.log(predicted / self.measured_s), index=self.rows.index)
        median = off.groupby([self.rows[c] for c in SERIES]).transform("median").to_numpy()
        return np.abs(median) > np.log(MISTUNED_FACTOR)


def _blocks(t: pd.DataFrame, system) -> dict:
    """(kernel dtype, distribution) -> Block, for the precisions the catalog has a peak for."""
    out = {}
    for (dtype, dist), rows in t.groupby(["moe_dtype", "distribution"], sort=True):
        _, weight_bytes, peak = DTYPES[dtype]
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
    return least_squares(residual, start, bounds=(lo, hi), x_scale=scale, loss="soft_l1", f_scale=0.1,
                         max_nfev=100, tr_solver="lsmr").x


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


def fit(data: KernelData, gpu: str) -> list[Fit]:
    t = data.table(gpu, FAMILY, "moe_perf", FRAMEWORK)
    if t.empty:
        return []
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
    return _fits(gpu, blocks, dtypes, layers, routing)


def _fits(gpu, blocks, dtypes, layers, routing) -> list[Fit]:
    fits = []
    for dtype in dtypes:
        b = blocks.get((dtype, "balanced"))
        measured = predicted = np.zeros(0)
        kind, total = "measured only under power-law routing, fitted there (its points are in the routing fit)", 0
        if b is not None:
            pred = b.predict(layers, routing)
            keep = ~b.mistuned(pred)
            measured, predicted, kind, total = b.measured_s[keep], pred[keep], "balanced routing", len(pred)
        fits.append(Fit(FAMILY, gpu, DTYPES[dtype][0], dict(layers[dtype]), measured, predicted,
                        _basis(kind, len(measured), total)))
    skewed = [b for b in blocks.values() if b.dist != "balanced"]
    if routing and skewed:
        preds = [b.predict(layers, routing) for b in skewed]
        keeps = [~b.mistuned(p) for b, p in zip(skewed, preds)]
        params = {f"{d}_{n}": float(v) for d, r in sorted(routing.items()) for n, v in zip(ROUTING, r)}
        fits.append(Fit(FAMILY, gpu, "all", params,
                        np.concatenate([b.measured_s[k] for b, k in zip(skewed, keeps)]),
                        np.concatenate([p[k] for p, k in zip(preds, keeps)]),
                        _basis("power-law routing skew, each precision's layer parameters held",
                               sum(int(k.sum()) for k in keeps), sum(len(p) for p in preds))))
    return fits


def _basis(kind: str, kept: int, total: int) -> str:
    return (f"{kind}; TensorRT-LLM moe_perf; {total - kept} of {total} points in mis-tuned series left out "
            f"(median off the model by more than {MISTUNED_FACTOR}x); min-latency kernel rows not fitted")
