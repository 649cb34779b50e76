"""Fit DeepEP dispatch/combine times (`dse.perf.forms.deepep`) to AIConfigurator's SGLang tables.

Data: `<gpu>/comm/sglang/*/wideep_deepep_normal_perf.parquet` (normal kernels: per shape,
token count and SM budget, the best-tuned `dispatch_transmit_us` and `combine_transmit_us`) and
`wideep_deepep_ll_perf.parquet` (low-latency kernels: `dispatch_avg_t_us`, `combine_avg_t_us`),
all in microseconds, `node_num` 1: one node's GPUs as the EP group (`node.num_gpus_per_node` of
the folder's `<gpu>.yaml`: 8 on HGX, 4 on a GB200/GB300 tray). `num_token` is per rank, routing
uniform random (top-k of random scores); normal dispatch is timed with FP8 input.

One Fit per kernel and direction (precision "all": the kernels fix their own formats), with the
parameters named `<mode>_<direction>_<param>`: floor_s, efficiency (of the catalog scale-up
bandwidth) and, for normal kernels, sm_bytes_per_s.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from dse.calibrate import Fit
from dse.calibrate.moe import round_sig
from dse.calibrate.tables import KernelData
from dse.perf.forms.deepep import (BF16_ELEMENT_BYTES, FP8_ELEMENT_BYTES, deepep_time_s,
                                   low_latency_bytes, normal_bytes)

FAMILY = "deepep"
DEFAULT_NODE_GPUS = 8
# (mode, direction) -> (table, latency column, SM column or None, element bytes for normal mode)
SUBOPS = {
    ("normal", "dispatch"): ("wideep_deepep_normal_perf", "dispatch_transmit_us", "dispatch_sms", FP8_ELEMENT_BYTES),
    ("normal", "combine"): ("wideep_deepep_normal_perf", "combine_transmit_us", "combine_sms", BF16_ELEMENT_BYTES),
    ("low_latency", "dispatch"): ("wideep_deepep_ll_perf", "dispatch_avg_t_us", None, None),
    ("low_latency", "combine"): ("wideep_deepep_ll_perf", "combine_avg_t_us", None, None),
}
# parameter: (start, lower, upper, typical scale)
PARAMS = {
    "floor_s": (2e-5, 0.0, 1e-3, 1e-5),
    "efficiency": (0.7, 0.01, 1.0, 0.1),
    "sm_bytes_per_s": (2e10, 1e8, 1e13, 1e10),
    "copy_overhead_bytes": (2e3, 0.0, 1e6, 1e3),
}


def node_gpus(data: KernelData, gpu: str) -> int:
    """GPUs of one node (the EP group of `node_num` 1 rows), from the folder's `<gpu>.yaml`."""
    path = data.root / f"{gpu}.yaml"
    try:
        node = (yaml.safe_load(path.read_text()) or {}).get("node", {}) if path.exists() else {}
        return int(node.get("num_gpus_per_node", DEFAULT_NODE_GPUS))
    except (yaml.YAMLError, TypeError, ValueError, AttributeError):
        return DEFAULT_NODE_GPUS


def _bytes(rows: pd.DataFrame, mode: str, direction: str, ranks: int, element_bytes) -> np.ndarray:
    f = lambda c: rows[c].to_numpy(float)
    if mode == "normal":
        return normal_bytes(f("num_token"), f("hidden_size"), f("num_topk"), f("num_experts"), ranks, element_bytes)
    return low_latency_bytes(f("num_token"), f("hidden_size"), f("num_topk"), ranks, direction)


def fit(data: KernelData, gpu: str) -> list[Fit]:
    ranks = node_gpus(data, gpu)
    bandwidth = float(data.system(gpu)["scaleup_bandwidth_bytes_per_s"])
    fits = []
    for (mode, direction), (table, column, sm_column, element_bytes) in SUBOPS.items():
        rows = data.table(gpu, "comm", table)
        if rows.empty or column not in rows:
            continue
        rows = rows[(rows["node_num"] == 1) & (rows[column] > 0)]
        if rows.empty:
            continue
        measured = rows[column].to_numpy(float) * 1e-6
        sent = _bytes(rows, mode, direction, ranks, element_bytes)
        copies = _bytes(rows, mode, direction, ranks, 1.0 / rows["hidden_size"].to_numpy(float)) if mode == "normal" else \
            rows["num_token"].to_numpy(float) * rows["num_topk"].to_numpy(float) * (ranks - 1) / ranks
        # normal kernels run on the SMs given; low-latency ones on one SM per expert (one warp
        # group per expert while experts <= SMs), so few experts cap their copy rate
        sms = rows[sm_column or "num_experts"].to_numpy(float)
        names = list(PARAMS)

        def predict(p):
            v = dict(zip(names, p))
            return deepep_time_s(sent, copies, bandwidth, v["floor_s"], v["efficiency"], sms, v["sm_bytes_per_s"],
                                 v["copy_overhead_bytes"])

        start, lo, hi, scale = (np.array([PARAMS[n][i] for n in names]) for i in range(4))
        p = least_squares(lambda q: np.log(predict(q) / measured), start, bounds=(lo, hi), x_scale=scale,
                          loss="soft_l1", f_scale=0.1, max_nfev=200).x
        p = round_sig(p)
        prefix = f"{mode}_{direction}_"
        fits.append(Fit(FAMILY, gpu, "all", {prefix + n: float(v) for n, v in zip(names, p)}, measured, predict(p),
                        f"DeepEP {mode} {direction}, SGLang {table}, {ranks} GPUs of one node (node_num 1)"))
    return fits
