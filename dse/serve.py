"""The serving search behind `dse serve`: every mapping of a model on some GPUs of some systems,
aggregated and disaggregated, at every concurrency, evaluated in one vectorized call
(dse.evaluate_serving); the configurations that meet the latency targets, best first; the
throughput-per-GPU against throughput-per-user Pareto front per system.

    space(model, systems, gpus, isl, osl, ...)  -> DataFrame of design points
    best(results, ttft_s=None, tpot_s=None)      -> feasible points meeting the targets, best first
    front(results)                               -> the non-dominated points per system and mode
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from dse import catalog
from dse.errors import ConfigError
from dse.pareto import pareto_mask

DEGREES = (1, 2, 4, 8, 16, 32, 64)
PER_REPLICA = tuple(2 ** i for i in range(11))     # requests in flight per replica: 1 .. 1024
PREFILL_SHARES = (0.125, 0.25, 0.5)                 # disaggregated: share of the GPUs prefilling


def _mappings(gpus: int, moe: bool, domain: float):
    """(tp, pp, ep) that split `gpus`: tp inside the scale-up domain; the experts tensor-parallel
    (ep 1), over the replicas (attention data parallel) or over the replicas and their TP groups."""
    for tp, pp in itertools.product(DEGREES, DEGREES):
        if gpus % (tp * pp) or tp > domain:
            continue
        dp = gpus // (tp * pp)
        for ep in (sorted({1, dp, dp * tp}) if moe else (1,)):
            yield tp, pp, ep


def _aggregated(system, gpus, moe, domain):
    for (tp, pp, ep), c in itertools.product(_mappings(gpus, moe, domain), PER_REPLICA + (None,)):
        dp = gpus // (tp * pp)
        yield dict(system=system, gpus=gpus, tp=tp, pp=pp, ep=ep, disaggregated=False,
                   concurrency=np.nan if c is None else c * dp)


def _disaggregated(system, gpus, moe, domain):
    for share in PREFILL_SHARES:
        prefill = int(gpus * share)
        decode = gpus - prefill
        if prefill < 1:
            continue
        for p_tp in (t for t in DEGREES if prefill % t == 0 and t <= domain):
            for (tp, pp, ep), c in itertools.product(_mappings(decode, moe, domain), PER_REPLICA + (None,)):
                dp = decode // (tp * pp)
                yield dict(system=system, gpus=gpus, tp=tp, pp=pp, ep=ep, disaggregated=True,
                           prefill_gpus=prefill, decode_gpus=decode, prefill_tp=p_tp,
                           prefill_ep=prefill // p_tp if moe else 1,
                           concurrency=np.nan if c is None else c * dp)


def space(model, systems, gpus, isl, osl, framework=None, precision=None, kv_precision=None,
          disaggregated=True, expert_precision=None) -> pd.DataFrame:
    """Every design point of the search, one row each (the model, scenario and settings repeated)."""
    table = catalog.systems()
    name = catalog.resolve("model", model, "model") if isinstance(model, str) else model
    moe = isinstance(name, str) and float(catalog.model(name)["experts"] or 0) > 0
    rows = []
    for system in systems:
        sys_name = catalog.resolve_system(system)
        domain = float(table.loc[sys_name, "scaleup_domain"])
        for g in gpus:
            if int(g) != g or g < 1:
                raise ConfigError(f"--gpus: {g} is not a positive whole number of GPUs")
            rows += list(_aggregated(sys_name, int(g), moe, domain))
            if disaggregated and g >= 2:
                rows += list(_disaggregated(sys_name, int(g), moe, domain))
    frame = pd.DataFrame(rows)
    frame.insert(0, "model", model)
    frame["isl"], frame["osl"] = isl, osl
    for key, value in (("framework", framework), ("precision", precision), ("kv_precision", kv_precision),
                       ("expert_precision", expert_precision)):
        if value is not None:
            frame[key] = value
    return frame


def best(results: pd.DataFrame, ttft_s=None, tpot_s=None) -> pd.DataFrame:
    """Feasible points whose mean TTFT and TPOT meet the targets, most output tokens/s per GPU first
    (of equal throughput, the shortest TTFT, then TPOT: requests offered beyond the capacity only queue)."""
    ok = results["fits"].to_numpy(dtype=bool).copy()
    if ttft_s is not None:
        ok &= results["ttft_s"].to_numpy() <= ttft_s
    if tpot_s is not None:
        ok &= results["tpot_s"].to_numpy() <= tpot_s
    return results[ok].sort_values(["output_tokens_per_s_per_gpu", "ttft_s", "tpot_s"], ascending=[False, True, True])


def front(results: pd.DataFrame, by=("system", "disaggregated")) -> pd.DataFrame:
    """Per system (and serving mode), the feasible points no other beats on both output tokens/s
    per GPU and per user."""
    parts = []
    for _, group in results[results["fits"].to_numpy(dtype=bool)].groupby(list(by), observed=True):
        values = group[["output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user"]].to_numpy(dtype=float)
        parts.append(group[pareto_mask(values, ["max", "max"])])
    if not parts:
        return results.iloc[:0]
    return pd.concat(parts).sort_values(["system", "output_tokens_per_s_per_user"])
