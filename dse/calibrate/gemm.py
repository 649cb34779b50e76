"""Fit the GEMM time form (`dse.perf.forms.gemm`) per GPU and precision.

Data: `<gpu>/gemm/<framework>/<version>/gemm_perf.parquet` (m, n, k, gemm_dtype, latency). The
kernels are TensorRT-LLM `Linear.forward` on a bf16 activation, so a low-precision row includes
quantizing that activation (the form's quantize pass). Kernel dtypes map to dse precisions
(bfloat16 -> bf16, fp8 -> fp8, fp8_block -> fp8-block, nvfp4 -> nvfp4); weight-only int4/int8 and
smooth-quant rows are not fitted. Where a dtype was measured with several kernel sources (e.g.
DeepGEMM and torch flow for fp8_block), the source that covers the most shapes is fitted and named
in the basis.

The fit minimises the robust (soft-L1) log-ratio of predicted to measured latency over a
deterministic subsample (every p-th shape in (m, n, k) order, p prime so the stride does not alias
the shape grid), in log-parameters with physical bounds, from fixed starting values. Parameters are
rounded to 3 significant digits before the stored predictions (over all rows) are computed.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from dse.calibrate import Fit
from dse.perf.forms import gemm as form

FAMILY = "gemm"
TABLE = "gemm_perf"
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4"}
DTYPES_INV = {v: k for k, v in DTYPES.items()}
FIT_POINTS = 2000  # subsample size for the optimiser; errors are reported over every row

# name: (start, lower, upper); all fitted in log space.
START_BOUNDS = {
    "efficiency_max": (0.7, 0.02, 1.0),
    "tiles_per_wave": (64.0, 1.0, 1e4),
    "k_ramp": (100.0, 1e-2, 1e5),
    "split_k_min_depth": (1000.0, 16.0, 1e6),
    "floor_s": (3e-6, 1e-8, 1e-3),
    "memory_efficiency": (0.7, 0.02, 1.0),
    "quantize_memory_efficiency": (0.7, 0.02, 1.0),
}


def sig3(x: float) -> float:
    return float(f"{x:.3g}")


def _prime_at_least(n: int) -> int:
    n = max(int(n), 1)
    while n > 2 and any(n % d == 0 for d in range(2, int(math.isqrt(n)) + 1)):
        n += 1
    return n


def _subsample(rows: int) -> slice:
    return slice(None, None, _prime_at_least(math.ceil(rows / FIT_POINTS)))


def _predict(params: dict, precision: str, m, n, k, peak, bandwidth):
    return form.gemm_time_for(precision, m, n, k, peak, bandwidth, params)


def _fit_params(precision: str, m, n, k, latency_s, peak, bandwidth) -> dict:
    names = [p for p in form.PARAMS if p != "quantize_memory_efficiency" or form.FORMATS[precision][1] > 0]
    x0 = np.log([START_BOUNDS[p][0] for p in names])
    lo = np.log([START_BOUNDS[p][1] for p in names])
    hi = np.log([START_BOUNDS[p][2] for p in names])
    log_y = np.log(latency_s)

    def residual(x):
        return np.log(_predict(dict(zip(names, np.exp(x))), precision, m, n, k, peak, bandwidth)) - log_y

    res = least_squares(residual, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2,
                        tr_solver="lsmr")  # lsmr: no dense SVD per step (fast, deterministic)
    return {p: sig3(v) for p, v in zip(names, np.exp(res.x))}


def _rows(data, gpu: str):
    """(precision, kernel_source, rows) per fittable dtype, the best-covered kernel source each."""
    t = data.table(gpu, FAMILY, TABLE)
    if t.empty:
        return
    for dtype, precision in DTYPES.items():
        rows = t[t["gemm_dtype"] == dtype]
        if rows.empty:
            continue
        source = None
        if "kernel_source" in rows:
            source = rows["kernel_source"].value_counts().sort_index().idxmax()
            rows = rows[rows["kernel_source"] == source]
        yield precision, source, rows.sort_values(["m", "n", "k"], kind="stable")


def fit(data, gpu: str) -> list[Fit]:
    """One Fit per precision measured on this GPU (precisions without a catalog peak skipped)."""
    system = data.system(gpu)
    bandwidth = float(system["memory_bandwidth_bytes_per_s"])
    fits = []
    for precision, source, rows in _rows(data, gpu):
        peak = float(system[form.PEAK_COLUMN[precision]])
        if not np.isfinite(peak) or peak <= 0:
            continue
        m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
        y = rows["latency_s"].to_numpy(float)
        sub = _subsample(len(y))
        params = _fit_params(precision, m[sub], n[sub], k[sub], y[sub], peak, bandwidth)
        predicted = _predict(params, precision, m, n, k, peak, bandwidth)
        basis = (f"{TABLE}.parquet gemm_dtype {DTYPES_INV[precision]}"
                 + (f", kernel_source {source}" if source else "") + f", {len(y)} shapes"
                 + ("; TensorRT-LLM Linear.forward incl. quantizing its bf16 activation"
                    if form.FORMATS[precision][1] else "; TensorRT-LLM Linear.forward"))
        fits.append(Fit(FAMILY, gpu, precision, params, y, predicted, basis))
    return fits

