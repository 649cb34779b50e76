"""Workload economics: capex, energy and cost per run / per million tokens. Pure and vectorized.

    accelerator_cost_usd  per GPU: an explicit column wins; derived hardware carries its
                          cost-model price (accelerator.py: manufacturing cost / (1 - gross_margin));
                          catalog systems their sourced or estimated `price_usd` (systems.csv)
    system_capex_usd      gpus x (accelerator + host_cost_per_gpu_usd
                                  + network_cost_usd_per_gbit_s x scale-out Gb/s per GPU)
    energy_j              per step, at the facility: gpus x (tdp_w x power_utilization
                                  + host_power_per_gpu_w) x pue x step_time_s; the step is a
                          training step, an inference batch, or one second of serving (so a
                          serving pool's energy_j is its facility power in watts)
    cost per step         system_capex_usd x step_time_s / (lifetime_years x 365.25 days)
                          + energy_j / 3.6e6 x electricity_usd_per_kwh
    cost_per_million_tokens_usd  cost per step / tokens_per_step x 1e6
    cost_per_run_usd      cost per step x (train_tokens or serve_tokens) / tokens_per_step
                          (NaN when neither column is given)

Every assumption is an input column with a documented default (dse/catalog/assumptions.csv):
lifetime_years 4, electricity_usd_per_kwh 0.08, pue 1.2, power_utilization 0.7,
host_cost_per_gpu_usd 12,500, network_cost_usd_per_gbit_s 12.5, host_power_per_gpu_w 300.
Capex is amortised over wall-clock time at full occupancy (no idle time, no cost of capital).
"""
from __future__ import annotations

import numpy as np

from dse import catalog
from dse.columns import as_float, length
from dse.errors import ConfigError

SECONDS_PER_YEAR = 365.25 * 86400
J_PER_KWH = 3.6e6
ECONOMIC_INPUTS = ("lifetime_years", "electricity_usd_per_kwh", "pue", "power_utilization",
                   "host_cost_per_gpu_usd", "network_cost_usd_per_gbit_s", "host_power_per_gpu_w")
COST_OUTPUTS = ("accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd",
                "cost_per_million_tokens_usd")


def _inputs(cols: dict) -> dict[str, np.ndarray]:
    A = catalog.assumptions()
    # A missing assumption column stays a scalar default (broadcast, not a full-length array).
    v = {k: as_float(cols, k, A[k]) if k in cols else np.float64(A[k]) for k in ECONOMIC_INPUTS}
    for k in ("lifetime_years",):
        if (v[k] <= 0).any():
            raise ConfigError(f"{k}: give a positive number of years")
    if (v["pue"] < 1).any():
        raise ConfigError("pue: power usage effectiveness is at least 1")
    for k in ("electricity_usd_per_kwh", "host_cost_per_gpu_usd", "network_cost_usd_per_gbit_s",
              "host_power_per_gpu_w", "power_utilization"):
        if (v[k] < 0).any():
            raise ConfigError(f"{k}: give 0 or a positive number")
    return v


def workload_costs(cols: dict, step_time_s, tokens_per_step, gpus) -> dict[str, np.ndarray]:
    """Cost columns for a workload step (training step, or an inference batch).

    cols: the batch (needs `tdp_w`; uses `scaleout_bandwidth_bytes_per_s`, `system`,
    `accelerator_cost_usd`, `train_tokens` / `serve_tokens` and the assumption columns
    when present). step_time_s, tokens_per_step, gpus: arrays or scalars per row.
    Returns arrays for COST_OUTPUTS.
    """
    n = length(cols)
    step = np.broadcast_to(np.asarray(step_time_s, dtype=float), (n,))
    tokens = np.broadcast_to(np.asarray(tokens_per_step, dtype=float), (n,))
    g = np.broadcast_to(np.asarray(gpus, dtype=float), (n,))
    v = _inputs(cols)
    price = as_float(cols, "accelerator_cost_usd", np.nan)  # resolved: catalog price or the cost model's
    tdp = as_float(cols, "tdp_w", np.nan)
    scaleout_gbit_s = as_float(cols, "scaleout_bandwidth_bytes_per_s", np.nan) * 8 / 1e9
    network = v["network_cost_usd_per_gbit_s"] * np.nan_to_num(scaleout_gbit_s)
    run_tokens = as_float(cols, "train_tokens", np.nan)
    if "serve_tokens" in cols:
        run_tokens = np.where(np.isnan(run_tokens), as_float(cols, "serve_tokens", np.nan), run_tokens)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # infeasible rows: any number
        capex = g * (price + v["host_cost_per_gpu_usd"] + network)
        energy = g * (tdp * v["power_utilization"] + v["host_power_per_gpu_w"]) * v["pue"] * step
        cost_step = (capex * step / (v["lifetime_years"] * SECONDS_PER_YEAR)
                     + energy / J_PER_KWH * v["electricity_usd_per_kwh"])
        per_token = cost_step / tokens
    return {
        "accelerator_cost_usd": price,
        "system_capex_usd": capex,
        "energy_j": energy,
        "cost_per_run_usd": per_token * run_tokens,
        "cost_per_million_tokens_usd": per_token * 1e6,
    }
