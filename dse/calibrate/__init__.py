"""`dse calibrate`: fit each op family's time model to measured kernel latencies.

Reads kernel tables laid out as `<gpu>/<family>/<framework>/<version>/<table>.parquet` (the layout
of `../shared/data/kernels/`, NVIDIA AIConfigurator's performance database; a team can point it
at its own measurements in the same layout), fits per GPU and per precision the few physical
parameters of each family's time model (the forms live in `dse.perf.forms`, where the
performance model uses them), and reports the fit error per family and GPU. With `--write` the
fitted parameters become `dse/catalog/efficiency.csv`, each row naming the kernel data as source.

Family modules (`dse.calibrate.<family>`) each expose `fit(data: KernelData, gpu: str) -> list[Fit]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Family name -> module under dse.calibrate that fits it (order = report order).
FAMILIES = {
    "gemm": "dse.calibrate.gemm",
    "quantize": "dse.calibrate.quantize",
    "attention": "dse.calibrate.attention",
    "training_attention": "dse.calibrate.training_attention",
    "mla": "dse.calibrate.mla",
    "moe": "dse.calibrate.moe",
    "moe_vllm": "dse.calibrate.moe_vllm",
    "nccl": "dse.calibrate.nccl",
    "deepep": "dse.calibrate.deepep",
}


@dataclass
class Fit:
    """Fitted parameters of one family's time model on one GPU (and one precision, or "all").

    `params` maps parameter name -> value in SI units (seconds, fractions, bytes, tokens);
    `measured_s` and `predicted_s` are the latencies of every kernel point the fit used, so the
    error statistics are computed in one place (`error_stats`)."""
    family: str
    gpu: str
    precision: str
    params: dict[str, float]
    measured_s: np.ndarray = field(repr=False)
    predicted_s: np.ndarray = field(repr=False)
    basis: str = ""

    @property
    def points(self) -> int:
        return int(len(self.measured_s))

    def errors_pct(self) -> np.ndarray:
        return 100.0 * np.abs(self.predicted_s - self.measured_s) / self.measured_s

    def stats(self) -> dict:
        return error_stats(self.family, self.gpu, self.measured_s, self.predicted_s)


def error_stats(family: str, gpu: str, measured_s, predicted_s) -> dict:
    """The fit error of a family on a GPU: points, median and 90th-percentile absolute % error."""
    measured_s, predicted_s = np.asarray(measured_s, float), np.asarray(predicted_s, float)
    err = 100.0 * np.abs(predicted_s - measured_s) / measured_s
    return {"family": family, "gpu": gpu, "points": int(err.size),
            "median_abs_error_pct": float(np.median(err)) if err.size else float("nan"),
            "p90_abs_error_pct": float(np.percentile(err, 90)) if err.size else float("nan")}


def round_sig(x, digits=3) -> np.ndarray:
    """Each value rounded to `digits` significant digits, exactly as the catalog prints it."""
    x = np.asarray(x, float)
    return np.array([float(f"{v:.{digits}g}") for v in x.ravel()]).reshape(x.shape)
