"""Catalogs: data files with a source beside every number.

`systems.csv`   accelerators in their standard server and cluster (one row per system name)
`efficiency.csv` achievable fractions of peak per GPU generation (few, physical, calibrated once)
`models.csv`    transformer dimensions of published models

Names are matched case-insensitively; vendor spellings are aliases. An unknown name
raises `ConfigError` naming the closest catalog entries.
"""
from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from dse.errors import ConfigError

GIB = 2**30
GB = 10**9


def _read(name: str) -> pd.DataFrame:
    with resources.files("dse.catalog").joinpath(name).open("r") as fh:
        return pd.read_csv(fh)


def _alias_index(table: pd.DataFrame) -> dict[str, str]:
    index: dict[str, str] = {}
    for name, aliases in zip(table["name"], table["aliases"].fillna("")):
        index[name.lower()] = name
        for alias in str(aliases).split(";"):
            if alias.strip():
                index[alias.strip().lower()] = name
    return index


def _resolver(table: pd.DataFrame, kind: str, field: str):
    index = _alias_index(table)

    def resolve(name: str) -> str:
        key = str(name).strip().lower()
        if key in index:
            return index[key]
        close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
        close_names = sorted({index[c] for c in close})
        hint = f"closest: {', '.join(close_names)}" if close_names else f"known: {', '.join(table['name'])}"
        raise ConfigError(f"{field}: unknown {kind} '{name}' ({hint}); see `dse list {kind}s`")

    return resolve


@lru_cache(maxsize=None)
def systems() -> pd.DataFrame:
    """Systems with SI-unit columns added (the CSV keeps vendor units with sources)."""
    t = _read("systems.csv")
    out = pd.DataFrame({"name": t["name"]})
    out["generation"] = t["generation"]
    out["peak_bf16_flops_per_s"] = t["peak_bf16_tflops"] * 1e12
    # A precision the part lacks runs at the next wider one (FP8 on Ampere runs as BF16).
    out["peak_fp8_flops_per_s"] = t["peak_fp8_tflops"].fillna(t["peak_bf16_tflops"]) * 1e12
    out["peak_fp4_flops_per_s"] = t["peak_fp4_tflops"].fillna(t["peak_fp8_tflops"]).fillna(t["peak_bf16_tflops"]) * 1e12
    out["memory"] = t["memory"]
    # HBM capacities are binary: an "80GB" H100 reports 81,559 MiB in nvidia-smi.
    out["memory_capacity_bytes"] = t["memory_capacity_gib"] * GIB
    out["memory_bandwidth_bytes_per_s"] = t["memory_bandwidth_tbps"] * 1e12
    out["scaleup"] = t["scaleup"]
    out["scaleup_bandwidth_bytes_per_s"] = t["scaleup_gbps_per_dir"] * 1e9
    out["scaleup_domain"] = t["scaleup_domain"].astype(np.int64)
    out["scaleup_latency_s"] = t["scaleup_latency_us"] * 1e-6
    out["scaleout"] = t["scaleout"]
    out["scaleout_bandwidth_bytes_per_s"] = t["scaleout_gbit_per_s"] * 1e9 / 8
    out["scaleout_latency_s"] = t["scaleout_latency_us"] * 1e-6
    out["tdp_w"] = t["tdp_w"].astype(float)
    eff = efficiency_si()
    for col in eff.columns:
        out[col] = t["generation"].map(eff[col]).astype(float)
    return out.set_index("name", drop=False)


@lru_cache(maxsize=None)
def efficiency() -> pd.DataFrame:
    return _read("efficiency.csv").set_index("generation")


@lru_cache(maxsize=None)
def efficiency_si() -> pd.DataFrame:
    """The per-generation efficiency parameters as model columns: fractions as they are,
    microsecond overheads in seconds (`launch_overhead_us` -> `launch_overhead_s`)."""
    eff = efficiency().drop(columns=["basis"]).astype(float)
    for col in [c for c in eff.columns if c.endswith("_us")]:
        eff[col[:-3] + "_s"] = eff.pop(col) * 1e-6
    return eff


@lru_cache(maxsize=None)
def models() -> pd.DataFrame:
    t = _read("models.csv")
    return t.set_index("name", drop=False)


@lru_cache(maxsize=None)
def _system_resolver():
    return _resolver(_read("systems.csv"), "system", "system")


@lru_cache(maxsize=None)
def _model_resolver():
    return _resolver(_read("models.csv"), "model", "model")


def resolve_system(name: str) -> str:
    """Catalog name of a system (accepts vendor spellings); ConfigError if unknown."""
    return _system_resolver()(name)


def resolve_model(name: str) -> str:
    """Catalog name of a model (accepts published spellings); ConfigError if unknown."""
    return _model_resolver()(name)


def system(name: str) -> pd.Series:
    return systems().loc[resolve_system(name)]


def model(name: str) -> pd.Series:
    return models().loc[resolve_model(name)]
