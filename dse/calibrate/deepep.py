"""Fit DeepEP dispatch/combine times (`dse.perf.forms.deepep`) to AIConfigurator's SGLang tables.

Data: `<gpu>/comm/sglang/*/wideep_deepep_normal_perf.parquet` (normal kernels: per shape, token
count and SM budget, the best-tuned `dispatch_transmit_us` and `combine_transmit_us`) and
`wideep_deepep_ll_perf.parquet` (low-latency kernels: `dispatch_avg_t_us`, `combine_avg_t_us`),
in microseconds, `node_num` 1 only: one node's GPUs form the EP group (`node.num_gpus_per_node`
of the folder's `<gpu>.yaml`: 8 on HGX, 4 on a GB200/GB300 tray). `num_token` is per rank,
routing uniform random (top-k of random scores); normal dispatch is timed with FP8 input.

One Fit per kernel and direction, precision "all" (each kernel fixes its formats: FP8 dispatch,
bf16 combine), parameters named `<mode>_<direction>_<param>`: floor_s, efficiency (of the
catalog scale-up bandwidth), sm_bytes_per_s, item_overhead_bytes.

Where the fitted link term binds at no measured point (Blackwell HGX: the normal kernels stay
SM-bound up to the 24 SMs measured), the data only bound the link efficiency from below; it is
then set to that bound (the smallest efficiency leaving every prediction unchanged), which the
Fit's basis says.
"""
from __future__ import annotations

import numpy as np
import yaml
from scipy.optimize import least_squares

from dse.calibrate import Fit, round_sig
from dse.calibrate.tables import KernelData
from dse.perf.forms.deepep import PARAMS as NAMES
from dse.perf.forms.deepep import deepep_time_s, traffic

FAMILY = "deepep"
DEFAULT_NODE_GPUS = 8
# (mode, direction) -> (table, latency column in us, SM column of normal kernels)
SUBOPS = {
    ("normal", "dispatch"): ("wideep_deepep_normal_perf", "dispatch_transmit_us", "dispatch_sms"),
    ("normal", "combine"): ("wideep_deepep_normal_perf", "combine_transmit_us", "combine_sms"),
    ("low_latency", "dispatch"): ("wideep_deepep_ll_perf", "dispatch_avg_t_us", None),
    ("low_latency", "combine"): ("wideep_deepep_ll_perf", "combine_avg_t_us", None),
}
# (lower, upper, typical scale) of floor_s, efficiency, sm_bytes_per_s, item_overhead_bytes
BOUNDS = ((0.0, 1e-3, 1e-5), (0.01, 1.0, 0.1), (1e8, 1e13, 1e10), (0.0, 1e6, 1e3))
# fixed starting points (the best fit of them is kept): deterministic, and robust to the local
# minima a four-parameter max() form has
STARTS = ((2e-5, 0.7, 2e10, 1e3), (1e-5, 0.5, 5e9, 0.0), (1e-5, 0.5, 1e11, 1e2))


def node_gpus(data: KernelData, gpu: str) -> int:
    """GPUs of one node (the EP group of `node_num` 1 rows), from the folder's `<gpu>.yaml`."""
    path = data.root / f"{gpu}.yaml"
    try:
        node = (yaml.safe_load(path.read_text()) or {}).get("node", {}) if path.exists() else {}
        return int(node.get("num_gpus_per_node", DEFAULT_NODE_GPUS))
    except (yaml.YAMLError, TypeError, ValueError, AttributeError):
        return DEFAULT_NODE_GPUS


def _traffic(rows, mode: str, direction: str, ranks: int):
    """(bytes, items, lanes) per row: lanes are the SMs given to a normal kernel, or the experts."""
    f = lambda c: rows[c].to_numpy(float)
    sent, items, lanes = traffic(mode, direction, f("num_token"), f("hidden_size"), f("num_topk"),
                                 f("num_experts"), ranks)
    return sent, items, f(SUBOPS[mode, direction][2]) if lanes is None else lanes


def _fit_subop(measured, sent, items, sms, bandwidth):
    """Fitted parameters (rounded) and whether the link efficiency is only a lower bound."""
    def predict(p):
        return deepep_time_s(sent, items, sms, bandwidth, *p)

    lo, hi, scale = (np.array([b[i] for b in BOUNDS]) for i in range(3))
    runs = [least_squares(lambda q: np.log(predict(q) / measured), start, bounds=(lo, hi), x_scale=scale,
                          loss="soft_l1", f_scale=0.1, max_nfev=200) for start in STARTS]
    p = min(runs, key=lambda r: r.cost).x
    p = np.where(p - lo < 1e-6 * scale, lo, p)  # a parameter the data push to its bound is the bound
    # the link binds where efficiency * bandwidth < sms * sm_bytes_per_s; if nowhere, any larger
    # efficiency fits as well, and the data only say efficiency >= the largest such ratio
    bound = float(np.max(sms * p[2] / bandwidth))
    lower_bound = p[1] > bound
    if lower_bound:
        p[1] = bound * 1.005  # so that rounding to 3 digits cannot bring the link into play
    p = round_sig(p)
    return dict(zip(NAMES, map(float, p))), predict(p), lower_bound


def fit(data: KernelData, gpu: str) -> list[Fit]:
    ranks = node_gpus(data, gpu)
    bandwidth = float(data.system(gpu)["scaleup_bandwidth_bytes_per_s"])
    fits = []
    for (mode, direction), (table, column, _) in SUBOPS.items():
        rows = data.table(gpu, "comm", table)
        if rows.empty or column not in rows:
            continue
        rows = rows[(rows["node_num"] == 1 if "node_num" in rows else True) & (rows[column] > 0)]
        if rows.empty:
            continue
        measured = rows[column].to_numpy(float) * 1e-6
        sent, items, sms = _traffic(rows, mode, direction, ranks)
        params, predicted, lower_bound = _fit_subop(measured, sent, items, sms, bandwidth)
        basis = (f"DeepEP {mode} {direction}, SGLang {table}, {ranks} GPUs of one node (node_num 1)"
                 + ("; link never binds in the data: efficiency is the lower bound" if lower_bound else ""))
        fits.append(Fit(FAMILY, gpu, "all", {f"{mode}_{direction}_{n}": v for n, v in params.items()},
                        measured, predicted, basis))
    return fits
