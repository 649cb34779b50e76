"""Fit the collective time model (`dse.perf.forms.collective`) to measured NCCL and TensorRT-LLM
all-reduce latencies on one GPU.

Data: `comm/nccl/<version>/nccl_perf.parquet` (nccl-tests all_gather, all_reduce,
reduce_scatter, alltoall; out-of-place time; n = 2, 4, 8 GPUs in one NVLink domain) and
`comm/trtllm/<version>/custom_allreduce_perf.parquet` (TensorRT-LLM AUTO all-reduce, bf16,
CUDA-graph timed). In both, `message_size` is an ELEMENT count (AIConfigurator's collectors
store nccl-tests' byte size divided by the element size; the custom all-reduce's is the tensor's
numel), and it is the full buffer per rank in nccl-tests' convention (all-gather output,
reduce-scatter input, all-reduce buffer, all-to-all send buffer) - the `message_bytes` of
`dse.perf.collectives`. Bytes = elements x 2 (half, bfloat16) or x 1 (int8).

Fits, per GPU: one per payload precision (`bf16` from nccl `half`, `fp8` from `int8`: a 1-byte
payload), holding for each op the five parameters `<op>_floor_s`, `<op>_step_latency_s`,
`<op>_efficiency_max`, `<op>_half_bytes`, `<op>_local_copy_fraction`; and one `all` fit of the
custom all-reduce (`custom_allreduce_floor_s`, `..._oneshot_efficiency`, `..._twoshot_efficiency`)
whose NCCL fallback is the bf16 all_reduce of the first fit. Efficiencies are fractions of the
catalog `scaleup_bandwidth_bytes_per_s` (per GPU per direction).
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse.calibrate import Fit, tables
from dse.calibrate.tables import KernelData
from dse.perf.forms import collective as form

FAMILY = "nccl"
DTYPES = {"half": ("bf16", 2.0), "int8": ("fp8", 1.0)}  # nccl dtype -> (dse precision, bytes)
CUSTOM_BYTES = 2.0  # the custom all-reduce table is bfloat16


def _round3(x: float) -> float:
    return float(f"{x:.3g}")


def _nccl_table(data: KernelData, gpu: str) -> pd.DataFrame:
    """nccl_perf rows of all four collectives. `KernelData.table` treats `op_name` as provenance
    and so keeps only one collective per (dtype, n, size); until it keys on op_name, read the
    newest version here with op_name as a key."""
    if "op_name" not in tables.NOT_KEYS:
        return data.table(gpu, "comm", "nccl_perf", framework="nccl")
    base = data.root / gpu / "comm" / "nccl"
    versions = sorted((p for p in base.glob("*") if (p / "nccl_perf.parquet").exists()),
                      key=lambda p: tables._version_key(p.name), reverse=True) if base.is_dir() else []
    if not versions:
        return pd.DataFrame()
    t = pd.concat([pd.read_parquet(v / "nccl_perf.parquet") for v in versions], ignore_index=True)
    t = t.drop_duplicates(subset=["op_name", "nccl_dtype", "num_gpus", "message_size"], keep="first")
    t["latency_s"] = t["latency"].astype(float) * 1e-3
    return t[np.isfinite(t["latency_s"]) & (t["latency_s"] > 0)].reset_index(drop=True)


def _fit_op(op, n, m, y, bandwidth):
    """Least squares on log(predicted/measured), robust (soft_l1) so the few protocol-switch
    bumps of NCCL's tuner (a 2x jump at one size) do not drag the curve. Parameters are fitted as
    logs (positive, scale-free) except local_copy_fraction in [0, 1]. Returns rounded params."""
    def params(z):
        return dict(zip(form.PARAMS, [*np.exp(z[:4]), z[4]]))

    def residual(z):
        return np.log(form.collective_s(op, n, m, bandwidth, **params(z)) / y)

    z0 = np.array([np.log(0.6 * y.min()), np.log(5e-7), np.log(0.8), np.log(4e6), 0.5])
    lower = np.array([np.log(1e-7), np.log(1e-10), np.log(0.02), np.log(1.0), 0.0])
    upper = np.array([np.log(1e-3), np.log(1e-4), np.log(3.0), np.log(1e11), 1.0])
    r = least_squares(residual, z0, bounds=(lower, upper), loss="soft_l1", f_scale=0.05)
    return {k: _round3(v) for k, v in params(r.x).items()}


def _fit_precision(t: pd.DataFrame, dtype: str, gpu: str, bandwidth: float) -> Fit | None:
    precision, element_bytes = DTYPES[dtype]
    rows = t[t["nccl_dtype"] == dtype]
    if rows.empty:
        return None
    params, measured, predicted, described = {}, [], [], []
    for op in form.OPS:
        s = rows[rows["op_name"] == op]
        if s.empty:
            continue
        n = s["num_gpus"].to_numpy(float)
        m = s["message_size"].to_numpy(float) * element_bytes
        y = s["latency_s"].to_numpy(float)
        fitted = _fit_op(op, n, m, y, bandwidth)
        params.update({f"{op}_{k}": v for k, v in fitted.items()})
        measured.append(y)
        predicted.append(form.collective_s(op, n, m, bandwidth, **fitted))
        described.append(f"{op} n={'/'.join(str(int(v)) for v in sorted(set(n)))}")
    version = ",".join(sorted(rows["version"].astype(str).unique())) if "version" in rows else "?"
    return Fit(FAMILY, gpu, precision, params, np.concatenate(measured), np.concatenate(predicted),
               basis=f"nccl-tests {version} nccl_perf {dtype}: " + "; ".join(described))


def _fit_custom(c: pd.DataFrame, gpu: str, bandwidth: float, nccl: dict) -> Fit:
    """TensorRT-LLM all-reduce: floor and the one-shot and two-shot efficiencies, the NCCL
    all-reduce (already fitted) as the large-message branch. The min() makes the cost surface
    piecewise, so start from a fixed small grid and keep the best (deterministic)."""
    n = c["num_gpus"].to_numpy(float)
    m = c["message_size"].to_numpy(float) * CUSTOM_BYTES
    y = c["latency_s"].to_numpy(float)
    fallback = form.collective_s("all_reduce", n, m, bandwidth, **form.collective_params(nccl, "all_reduce"))

    def predict(p):
        return form.custom_all_reduce_s(n, m, bandwidth, *p, fallback_s=fallback)

    best = None
    for e1, e2 in itertools.product((0.2, 0.5, 0.9), repeat=2):
        r = least_squares(lambda z: np.log(predict(np.exp(z)) / y), np.log([0.8 * y.min(), e1, e2]),
                          bounds=(np.log([1e-7, 0.02, 0.02]), np.log([1e-3, 3.0, 3.0])),
                          loss="soft_l1", f_scale=0.05)
        if best is None or r.cost < best.cost - 1e-12:
            best = r
    p = [_round3(v) for v in np.exp(best.x)]
    params = {form.CUSTOM_PREFIX + k: v for k, v in zip(form.CUSTOM_PARAMS, p)}
    version = ",".join(sorted(c["version"].astype(str).unique()))
    return Fit(FAMILY, gpu, "all", params, y, predict(p),
               basis=f"TensorRT-LLM {version} custom_allreduce_perf bf16 n="
                     + "/".join(str(int(v)) for v in sorted(set(n))) + "; NCCL fallback = bf16 all_reduce fit")


def fit(data: KernelData, gpu: str) -> list[Fit]:
    bandwidth = float(data.system(gpu)["scaleup_bandwidth_bytes_per_s"])
    t = _nccl_table(data, gpu)
    fits = [f for dtype in DTYPES if not t.empty for f in [_fit_precision(t, dtype, gpu, bandwidth)] if f]
    c = data.table(gpu, "comm", "custom_allreduce_perf", framework="trtllm")
    bf16 = next((f for f in fits if f.precision == "bf16" and "all_reduce_floor_s" in f.params), None)
    if not c.empty and bf16 is not None:
        fits.append(_fit_custom(c, gpu, bandwidth, bf16.params))
    return fits
