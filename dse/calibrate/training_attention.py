"""Fit the training attention form (`dse.perf.forms.training_attention`) per GPU.

Data: `dse/catalog/cudnn_sdpa_training.csv`, the published forward and backward latencies of
cuDNN's fused attention as training runs it (NVIDIA/cudnn-frontend sdpa_benchmark_training,
cuDNN 9.19, BF16, causal, Llama-3.1 shapes, 2K to 32K tokens) on GB200, GB300 and H200. The kernel
tables `dse calibrate` reads hold inference kernels only (TensorRT-LLM's forward FMHA), whose
attention_efficiency stays the fallback of parts without these rows. A GPU folder takes the
fractions of peak fitted on the part with its compute die (STAND_IN: H100 the H200's, B200 the
GB200's, B300 the GB300's: compute-bound kernels on the same die reach the same fraction of their
own catalog peak; a projection for the B parts, whose lower power limit the peak already carries).

Per pass, `efficiency_max` and `half_keys` minimise the log-ratio of predicted to measured latency
over the part's rows; FLOPs are causal (half the score tiles) and the backward's are
`flash_backward_factor` times the forward's. `fwd_head_dim_k` then fits the forward of 64-wide heads
(`cudnn_sdpa_head_dim.csv`: GPT-OSS's causal attention with its sinks, cuDNN 9.27's published
prefill benchmark on the same three parts) against the 128-wide forward fit times the prefill
form's head-size scaling, which the training path applies as well; `bwd_head_dim_k` fits the
backward of 64-wide heads (`cudnn_sdpa_head_dim_training.csv`: cuDNN 9.19's published training
benchmark of GPT-OSS-shaped heads under a 1,024-token window, the same release as the 128-wide
rows) against the 128-wide backward fit at the window's keys; `bwd_wide_head_k` the backward of heads
wider than 128 (`cudnn_sdpa_wide_heads_training.csv`: DeepSeek-V3's MLA heads, q/k 192 and v 128, on
GB200 and GB300; Hopper takes GB200's, WIDE_FROM). The `fp8_` pairs fit cuDNN 9.19's FP8
fused attention (per-tensor E4M3, `cudnn_sdpa_training_fp8.csv`, the same shapes and release) as
fractions of the FP8 peak: what `fp8_attention` runs; the `mxfp8_` pairs cuDNN's MXFP8 kernels,
which it runs under an MXFP8 recipe (Blackwell): the FP8 fit times the MXFP8 over per-tensor FP8 time of
one cuDNN 9.22 run (`cudnn_sdpa_training_mxfp8.csv`), so both formats stand on the same release. Values are rounded to 3 significant digits
before the stored predictions are computed.
"""
from __future__ import annotations

from importlib import resources
from types import SimpleNamespace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse import catalog
from dse.calibrate import Fit, round_sig
from dse.calibrate.tables import KernelData
from dse.perf.forms import training_attention as form
from dse.perf.forms.attention import head_dims_scale
from dse.perf.layer import kernel_keys

FAMILY = "training_attention"
STAND_IN = {"gb200": "GB200", "b200_sxm": "GB200", "gb300": "GB300", "b300_sxm": "GB300",
            "h200_sxm": "H200", "h100_sxm": "H200"}
MEASURED_ON = {"GB200": "gb200", "GB300": "gb300", "H200": "h200"}   # the catalog system of each part
DATA = "cudnn_sdpa_training.csv"
NARROW = "cudnn_sdpa_head_dim.csv"   # forward latencies of 64-wide heads (GPT-OSS's, cuDNN 9.27)
NARROW_TRAINING = "cudnn_sdpa_head_dim_training.csv"   # forward and backward of windowed 64-wide heads (cuDNN 9.19)
FP8 = "cudnn_sdpa_training_fp8.csv"   # cuDNN's FP8 fused attention on the DATA shapes (fp8_attention)
MXFP8 = "cudnn_sdpa_training_mxfp8.csv"   # its MXFP8 kernels, Blackwell only (fp8_attention under MXFP8)
WIDE = "cudnn_sdpa_wide_heads_training.csv"   # forward and backward of heads wider than 128 (MLA's, cuDNN 9.19)
# The part whose wide-head rows fit each part's bwd_wide_head_k: Blackwell its own; Hopper GB200's
# (a projection: H200's rows run a deterministic backward, which on Hopper is slower than the default)
WIDE_FROM = {"GB200": "GB200", "GB300": "GB300", "H200": "GB200"}


def published(name: str = DATA, part: str | None = None) -> pd.DataFrame:
    """A published kernel table of dse/catalog, all of it or the rows of one `part` (GB200, ...)."""
    with resources.files("dse.catalog").joinpath(name).open("r") as fh:
        table = pd.read_csv(fh)
    return table if part is None else table[table["gpu"] == part]


def _fit_pass(keys, flops, latency_s, peak):
    def residual(p):
        return np.log(flops / (peak * form.efficiency(keys, p[0], p[1]))) - np.log(latency_s)
    p = least_squares(residual, [0.6, 1000.0], bounds=([0.05, 0.0], [1.0, 1e5])).x
    p[1] = p[1] if p[1] >= 1e-3 else 0.0   # a half-saturation the data push to its bound is the bound (no ramp)
    efficiency_max, half_keys = round_sig(p)
    return efficiency_max, half_keys, flops / (peak * form.efficiency(keys, efficiency_max, half_keys))


def _windowed_keys_and_flops(rows):
    """Keys per query (in the units of dse.perf.layer.kernel_keys) and causal FLOPs of each row's
    attention, under its sliding window where it states one."""
    s, heads = rows["seq"].to_numpy(float), (rows["batch"] * rows["q_heads"]).to_numpy(float)
    window = rows["window"].to_numpy(float) if "window" in rows else np.zeros_like(s)
    m = SimpleNamespace(window_fraction=(window > 0).astype(float), window=window, chunk_fraction=0.0, sparse_topk=0.0,
                        csa_fraction=0.0, hca_fraction=0.0)
    keys = kernel_keys(m, s)
    width = _mean_head_dim(rows)   # 4 s k d per head when the K and V heads are as wide; (d_qk + d_v)/2 otherwise
    return keys, 4.0 * heads * s * keys * width * float(catalog.constant("causal_skip"))


def _mean_head_dim(rows) -> np.ndarray:
    """The mean of the query/key and the value head sizes of each row (MLA's 192 and 128: 160)."""
    d = rows["head_dim"].to_numpy(float)
    return (d + rows["v_head_dim"].to_numpy(float)) / 2.0 if "v_head_dim" in rows else d


def _fit_head_dim(rows, latency_ms, efficiency_max, half_keys, peak, softmax_dim, factor=1.0):
    """(head_dim_k, predicted seconds) of one pass over narrow-head rows given that pass's 128-wide
    fit and the prefill form's head-size scaling (`softmax_dim`, the part's fitted attention_softmax_dim);
    `factor` scales the forward's FLOPs to the pass's (flash_backward_factor for the backward)."""
    keys, flops = _windowed_keys_and_flops(rows)
    flops = factor * flops
    d, latency_s = rows["head_dim"].to_numpy(float), latency_ms.to_numpy(float) * 1e-3
    wide = peak * form.efficiency(keys, efficiency_max, half_keys) * head_dims_scale(softmax_dim, 2.0 * d)

    def residual(p):
        return np.log(flops / (wide * form.head_dim_factor(d, p[0]))) - np.log(latency_s)
    k = round_sig(least_squares(residual, [100.0], bounds=([0.0], [1e4])).x)[0]
    return k, flops / (wide * form.head_dim_factor(d, k))


def _fit_wide_head(part: str, backward: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(bwd_wide_head_k, measured, predicted seconds) of `part`'s backward of heads wider than 128
    against its 128-wide backward fit times the prefill form's head-size scaling."""
    rows = published(part=part)
    system = catalog.systems().loc[MEASURED_ON[part]]
    peak = float(system["peak_bf16_flops_per_s"])
    keys, flops = _windowed_keys_and_flops(rows)
    bwd = rows["bwd_ms"].to_numpy(float) * 1e-3
    e, h, _ = _fit_pass(keys, backward * flops, bwd, peak)
    wide = published(WIDE, part)
    keys, flops = _windowed_keys_and_flops(wide)
    d, latency_s = _mean_head_dim(wide), wide["bwd_ms"].to_numpy(float) * 1e-3
    base = backward * flops / (peak * form.efficiency(keys, e, h) * head_dims_scale(float(system["attention_softmax_dim"]), 2.0 * d))

    def residual(p):
        return np.log(base / form.wide_head_factor(d, p[0])) - np.log(latency_s)
    k = round_sig(least_squares(residual, [100.0], bounds=([0.0], [1e4])).x)[0]
    return k, latency_s, base / form.wide_head_factor(d, k)


def _fit_mxfp8(part, params, backward, fp8_peak, measured, predicted):
    """The mxfp8_ pairs where the part has MXFP8 kernels (Blackwell): the FP8 fit at the table's shapes
    times the same run's MXFP8 over per-tensor FP8 time (cuDNN 9.22 against the 9.19 fit), so both
    formats stand on one release; its rows enter the Fit's error at that run's own speed."""
    mx = published(MXFP8, part)
    if not len(mx):   # no MXFP8 kernels (Hopper; a derived part that has them borrows this): the FP8 pair
        params.update({f"mxfp8_{p}": params[f"fp8_{p}"] for p in
                       ("fwd_efficiency_max", "fwd_half_keys", "bwd_efficiency_max", "bwd_half_keys")})
        return
    k, f = _windowed_keys_and_flops(mx)
    for name, factor in (("fwd", 1.0), ("bwd", backward)):
        per_tensor = factor * f / (fp8_peak * form.efficiency(k, params[f"fp8_{name}_efficiency_max"],
                                                              params[f"fp8_{name}_half_keys"]))
        run = mx[f"fp8_{name}_ms"].to_numpy(float) * 1e-3
        e, h, pred = _fit_pass(k, factor * f, per_tensor * mx[f"{name}_ms"].to_numpy(float) * 1e-3 / run, fp8_peak)
        params[f"mxfp8_{name}_efficiency_max"], params[f"mxfp8_{name}_half_keys"] = float(e), float(h)
        measured.append(mx[f"{name}_ms"].to_numpy(float) * 1e-3)
        predicted.append(pred * run / per_tensor)


def fit(data: KernelData, gpu: str) -> list[Fit]:
    part = STAND_IN.get(gpu)
    if part is None:
        return []
    rows = published(part=part)
    system = catalog.systems().loc[MEASURED_ON[part]]
    peak = float(system["peak_bf16_flops_per_s"])
    keys, flops = _windowed_keys_and_flops(rows)
    backward = float(catalog.constant("flash_backward_factor"))
    measured, predicted, params = [], [], {}
    # BF16 passes as fractions of the BF16 peak; FP8 and MXFP8 ones (fp8_attention) of the FP8 peak
    fp8_peak = float(system["peak_fp8_flops_per_s"])
    fp8 = published(FP8, part)
    for prefix, table, k, f, pk in (("", rows, keys, flops, peak), ("fp8_", fp8, *_windowed_keys_and_flops(fp8), fp8_peak)):
        for name, factor in (("fwd", 1.0), ("bwd", backward)):
            latency_s = table[f"{name}_ms"].to_numpy(float) * 1e-3
            e, h, pred = _fit_pass(k, factor * f, latency_s, pk)
            params[f"{prefix}{name}_efficiency_max"], params[f"{prefix}{name}_half_keys"] = float(e), float(h)
            measured.append(latency_s)
            predicted.append(pred)
    _fit_mxfp8(part, params, backward, fp8_peak, measured, predicted)
    softmax_dim = float(system["attention_softmax_dim"])
    for name, table, factor in (("fwd", NARROW, 1.0), ("bwd", NARROW_TRAINING, backward)):
        narrow = published(table, part)
        k, pred = _fit_head_dim(narrow, narrow[f"{name}_ms"], params[f"{name}_efficiency_max"],
                                params[f"{name}_half_keys"], peak, softmax_dim, factor)
        params[f"{name}_head_dim_k"] = float(k)
        measured.append(narrow[f"{name}_ms"].to_numpy(float) * 1e-3)
        predicted.append(pred)
    k, wide_measured, wide_predicted = _fit_wide_head(WIDE_FROM[part], backward)
    params["bwd_wide_head_k"] = float(k)
    if WIDE_FROM[part] == part:   # a part fitted on another's rows reports no error of its own on them
        measured.append(wide_measured)
        predicted.append(wide_predicted)
    basis = (f"cuDNN 9.19 fused attention fwd+bwd published in NVIDIA/cudnn-frontend sdpa_benchmark_training "
             f"({part}, BF16 causal, {len(rows)} lengths 2K-32K; dse/catalog/{DATA}); fwd_head_dim_k on cuDNN 9.27's "
             f"forward of 64-wide heads (dse/catalog/{NARROW}), bwd_head_dim_k on cuDNN 9.19's backward of "
             f"64-wide heads under a 1,024-token window (dse/catalog/{NARROW_TRAINING}); bwd_wide_head_k on cuDNN 9.19's "
             f"backward of DeepSeek-V3's 192/128-wide MLA heads on {WIDE_FROM[part]} (dse/catalog/{WIDE}); the fp8_ pairs "
             f"on cuDNN 9.19's FP8 fused attention at the DATA shapes, as fractions of the FP8 peak (dse/catalog/{FP8}); the "
             f"mxfp8_ pairs (Blackwell) on cuDNN 9.22's MXFP8 kernels at those shapes (dse/catalog/{MXFP8})")
    return [Fit(FAMILY, gpu, "bf16", params, np.concatenate(measured), np.concatenate(predicted), basis)]
