"""Fit the quantization time form (`dse.perf.forms.quantize`) per GPU and measured kernel.

Data: `<gpu>/quantize/<framework>/<version>/computescale_perf.parquet` (the amax reduction of
dynamic FP8 scaling, measured as dynamic minus static quantization) and `scale_matrix_perf.parquet`
(the static FP8 cast), each over m, k with quant_dtype fp8. One Fit per table: precision "fp8",
parameters prefixed by the kernel (`compute_scale_floor_s`, `scale_matrix_memory_efficiency`, ...),
so the two Fits of a GPU merge into one parameter dict for `forms.quantize.kernel_time_s`. GPUs
without these tables (A100: FP8 needs SM 8.9+) get no Fit.

Each table's floor and efficiency are fitted by minimising the robust (soft-L1) log-ratio of
predicted to measured latency over every row from fixed starting values, once per candidate L2 size
`cache_bytes` on a fixed grid (0 and 4 MB .. 256 MB in factors of 2: a 1-D grid, because the
cost is not smooth in it); the best nonzero cache is kept only where it lowers the cost by more than
CACHE_GAIN against no cache (on parts whose L2 re-reads do not show in the latencies it would be an
unidentified number). Parameters are rounded to 3 significant digits before the stored predictions
are computed.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from dse.calibrate import Fit
from dse.perf.forms import quantize as form

FAMILY = "quantize"
TABLES = {"computescale_perf": "compute_scale", "scale_matrix_perf": "scale_matrix"}
DTYPES = {"fp8": "fp8"}
CACHE_GAIN = 0.10  # relative drop of the robust cost the cache term must buy to be kept
CACHE_GRID = [0.0] + [4e6 * 2.0 ** i for i in range(7)]  # bytes: 0, 4 MB .. 256 MB

# name: (start, lower, upper), fitted in log space
START_BOUNDS = {"floor_s": (2e-6, 1e-8, 1e-3), "memory_efficiency": (0.7, 0.02, 1.0)}


def sig3(x: float) -> float:
    return float(f"{x:.3g}")


def _solve(kernel: str, m, k, latency_s, bandwidth, cache_bytes: float) -> tuple[dict, float]:
    """(floor and efficiency at this cache size, robust cost)."""
    read, write = form.KERNELS[kernel]
    log_y = np.log(latency_s)
    names = list(START_BOUNDS)

    def residual(x):
        floor_s, efficiency = np.exp(x)
        return np.log(form.quantize_time_s(m, k, bandwidth, floor_s, efficiency, read, write, cache_bytes)) - log_y

    res = least_squares(residual, np.log([START_BOUNDS[p][0] for p in names]),
                        bounds=(np.log([START_BOUNDS[p][1] for p in names]),
                                np.log([START_BOUNDS[p][2] for p in names])),
                        loss="soft_l1", f_scale=0.2, tr_solver="lsmr")
    params = {p: sig3(v) for p, v in zip(names, np.exp(res.x))}
    return {**params, "cache_bytes": cache_bytes}, float(res.cost)


def fit(data, gpu: str) -> list[Fit]:
    """One Fit per measured quantization kernel on this GPU (none where the tables are absent)."""
    bandwidth = float(data.system(gpu)["memory_bandwidth_bytes_per_s"])
    fits = []
    for table, kernel in TABLES.items():
        t = data.table(gpu, FAMILY, table)
        if t.empty:
            continue
        for dtype, precision in DTYPES.items():
            rows = t[t["quant_dtype"] == dtype].sort_values(["m", "k"], kind="stable")
            rows = rows[rows["latency_s"] > 0]  # compute_scale is a difference of two timings
            if rows.empty:
                continue
            m, k = rows["m"].to_numpy(float), rows["k"].to_numpy(float)
            y = rows["latency_s"].to_numpy(float)
            plain, cost_plain = _solve(kernel, m, k, y, bandwidth, 0.0)
            cached, cost_cached = min((_solve(kernel, m, k, y, bandwidth, c) for c in CACHE_GRID[1:]),
                                      key=lambda pc: pc[1])
            best = cached if cost_cached < (1.0 - CACHE_GAIN) * cost_plain else plain
            params = {f"{kernel}_{name}": best[name] for name in form.PARAMS}
            predicted = form.kernel_time_s(kernel, m, k, bandwidth, params)
            basis = (f"{table}.parquet ({kernel}: TensorRT-LLM per-tensor {dtype} quantization), "
                     f"{len(y)} shapes")
            fits.append(Fit(FAMILY, gpu, precision, params, y, predicted, basis))
    return fits
