"""Names -> numbers: `model`, `system` and `framework` columns become the numeric columns they stand
for, with one alias resolver for every catalog (dse.catalog.resolve).

Explicit columns win: a catalog value only fills a column the caller did not give, or the NaN
gaps of one (so one frame may mix catalog systems and technology-derived accelerators, or catalog
models and models given by their dimensions). Catalog values stay `CatalogColumn`s (row codes +
one value per catalog entry) until the blockwise evaluation reads them.

A `model` may also be a Hugging Face config (a config.json path, a directory holding one, JSON
text or a dict of its fields): dse.catalog.hfconfig maps it to the model columns, which then fill
like a catalog row. One frame may mix catalog names and configs.

This module reads catalogs only; it never runs the hardware model (dse.hardware) and never looks
at performance. The drivers in dse.evaluate call it before and after deriving hardware.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dse import catalog, schema
from dse.catalog import hfconfig
from dse.columns import MISSING_NAMES, CatalogColumn, as_bool, as_float, categories, length, real
from dse.errors import ConfigError

# Software settings a framework preset fills (frameworks.csv columns).
SETTINGS = ("flash_attention", "attention_fa2", "fp8_attention", "tp_overlap", "tp_overlap_aggregate", "dp_overlap", "dp_hierarchical", "sp", "zero", "recompute",
            "moe_imbalance", "moe_capacity_factor", "moe_pad_to_capacity", "moe_rank_capacity_factor", "gqa_kv_sharing", "launch_overhead_s", "layer_overhead_s", "collective_overhead_s",
            "moe_dispatcher", "moe_routing", "moe_a2a_overlap", "cuda_graphs", "host_layer_s", "host_expert_s", "host_chunk_s", "expert_gemm_efficiency", "expert_bias_unfused", "expert_clamp_unfused", "yarn_rope_unfused", "remat_by_name", "custom_all_reduce",
            "moe_min_latency", "moe_kernels", "prefill_first",
            "main_grad_bytes", "adam_moment_bytes", "cp_comm", "pp_schedule",
            "max_num_tokens", "max_num_seqs", "kv_block_tokens", "kv_memory_fraction", "kv_fraction_of_free")


def _row_lookup(cols: dict, key: str, kind: str, resolve_one=None):
    """(per-row index into the resolved names, resolved names, used mask) for the name column `key`;
    rows without a name (NaN, None, "") point one past the end. `resolve_one(value)` resolves one
    distinct value (default: the `kind` catalog's alias resolver)."""
    try:
        codes, uniques = categories(cols[key])
    except TypeError:  # unhashable cells: models given as dicts of Hugging Face config fields
        codes, uniques = categories(np.array([json.dumps(v, sort_keys=True, default=str) if isinstance(v, dict)
                                              else v for v in np.asarray(cols[key], dtype=object)], dtype=object))
    named = [str(u).strip().lower() not in MISSING_NAMES for u in uniques]
    resolve_one = resolve_one or (lambda u: catalog.resolve(kind, u, key))
    resolved = [resolve_one(u) for u, ok in zip(uniques, named) if ok]
    position = np.cumsum(named) - 1
    codes = np.where(codes < 0, len(uniques), codes).astype(np.intp)
    lookup = np.append(np.where(named, position, len(resolved)), len(resolved)).astype(np.intp)[codes]
    used = np.zeros(len(resolved) + 1, dtype=bool)
    used[lookup] = True
    return lookup, resolved, used


def fill_from_catalog(cols: dict, key: str, kind: str, table, names, resolve_one=None) -> None:
    """Add (or fill the NaN gaps of) the `names` columns from the catalog rows named in cols[key]
    (a resolved entry that is a mapping of column values, a model's Hugging Face config, fills
    from its own values)."""
    lookup, resolved, used = _row_lookup(cols, key, kind, resolve_one)
    positions = table.index.get_indexer([r if isinstance(r, str) else None for r in resolved])
    given_rows = [(i, r) for i, r in enumerate(resolved) if not isinstance(r, str)]
    for name in names:
        values = np.append(_numbers(table, name)[positions], np.nan)
        for i, row in given_rows:
            values[i] = row.get(name, np.nan)
        if name in cols:
            given = np.asarray(cols[name])
            if given.dtype.kind == "f" and np.isnan(given).any():
                cols[name] = np.where(np.isnan(given), values[lookup], given)
            continue
        cols[name] = CatalogColumn(lookup, values, used)


_NUMBERS: dict = {}


def _numbers(table, name: str) -> np.ndarray:
    """A catalog column as floats, converted once per (cached) catalog table."""
    key = (id(table), name)
    if key not in _NUMBERS:  # the table is kept in the entry, so its id is never reused
        _NUMBERS[key] = (table[name].to_numpy(dtype=float), table)
    return _NUMBERS[key][0]


# ---- model ---------------------------------------------------------------------------------
def _model_defaults(cols: dict):
    hidden = lambda: np.asarray(cols["hidden"], dtype=float)  # noqa: E731
    heads = lambda: np.asarray(cols["heads"], dtype=float)  # noqa: E731
    formulas = {"heads": heads, "hidden/heads": lambda: hidden() / heads(), "4*hidden": lambda: 4 * hidden()}
    out = {}
    for name in schema.MODEL_COLUMNS:
        d = schema.columns()[name].default
        out[name] = formulas[d] if d in formulas else (lambda v=float(d or 0.0): v)
    return out


def model_entry(value):
    """A catalog model's name, or the model columns (a dict) of a Hugging Face config."""
    return hfconfig.model_columns(value) if hfconfig.is_config(value) else catalog.resolve("model", value, "model")


def model(cols: dict) -> None:
    """Model dimensions from `model` names or Hugging Face configs; explicit columns win; schema
    defaults for optional ones."""
    if "model" in cols:
        fill_from_catalog(cols, "model", "model", catalog.models(), schema.MODEL_COLUMNS, model_entry)
    for required in ("layers", "hidden", "heads", "vocab"):
        if required not in cols:
            raise ConfigError(f"{required}: missing; give a `model` name or the `{required}` column")
    n = length(cols)
    defaults = _model_defaults(cols)
    for k in schema.MODEL_COLUMNS:
        if k not in cols:
            cols[k] = np.broadcast_to(np.asarray(defaults[k](), dtype=float), (n,)).copy()
            continue
        v = cols[k]
        if isinstance(v, CatalogColumn) and not v.has_gaps:
            continue  # every row has its catalog value: nothing to fill
        v = real(v)
        if np.isnan(v).any():
            with np.errstate(invalid="ignore", divide="ignore"):
                cols[k] = np.where(np.isnan(v), defaults[k](), v)
        else:
            cols[k] = v


# ---- system --------------------------------------------------------------------------------
def system(cols: dict) -> None:
    """Per-GPU hardware columns and the price from `system` names (explicit or derived columns win,
    their NaN gaps are filled)."""
    if "system" not in cols:
        return
    fill_from_catalog(cols, "system", "system", catalog.systems(), schema.HARDWARE_COLUMNS)
    lookup, resolved, used = _row_lookup(cols, "system", "system")
    price = np.append(np.array([catalog.prices().get(r, np.nan) for r in resolved]), np.nan)
    if "accelerator_cost_usd" in cols:
        given = real(cols["accelerator_cost_usd"])
        cols["accelerator_cost_usd"] = np.where(np.isnan(given), price[lookup], given)
    else:
        cols["accelerator_cost_usd"] = price[lookup]


def hardware_defaults(cols: dict) -> None:
    """Hardware given as numbers: schema defaults, and the efficiencies of the `derived` generation."""
    missing = [k for k in ("peak_bf16_flops_per_s", "memory_bandwidth_bytes_per_s") if k not in cols]
    if missing:
        raise ConfigError(f"{missing[0]}: missing; give a `system` name, technology columns "
                          "(`node`, `die_area_mm2`, ...) or the hardware columns")
    n = length(cols)
    derived = catalog.efficiency_si().loc["derived"]
    for name in schema.HARDWARE_COLUMNS:
        if name in cols:
            continue
        d = schema.columns()[name].default
        if d == "catalog:efficiency":
            cols[name] = np.full(n, float(derived[name]))
        elif d in cols:  # a wider precision's peak
            cols[name] = cols[d]
        else:
            cols[name] = np.full(n, float(d))


# ---- framework presets ----------------------------------------------------------------------
def _preset_value(row, default_row, name):
    v = row[name]
    if isinstance(v, str) and not v.strip() or v is None or (isinstance(v, float) and np.isnan(v)):
        v = default_row[name]
    return v


def _setting_array(name: str, values: list, lookup: np.ndarray) -> np.ndarray:
    if name in schema.ENUMS:
        return np.asarray([schema.enum_code(name, v) for v in values], dtype=np.int8)[lookup]
    return np.asarray([np.nan if v is None or v == "" else float(v) for v in values], dtype=float)[lookup]


def _lazy_setting(name: str, values: list, lookup: np.ndarray, used: np.ndarray) -> CatalogColumn:
    """A preset setting per row, looked up per row block (booleans as bool, enumerations as codes);
    `used`: the presets some row names."""
    per_preset = _setting_array(name, values, np.arange(len(values)))
    if schema.columns()[name].dtype == "bool" and not np.isnan(per_preset).any():
        per_preset = per_preset != 0
    return CatalogColumn(lookup, per_preset, used)


def _fill_gaps(cols: dict, name: str, preset: np.ndarray) -> None:
    """Missing entries (NaN, None) of a given setting column take the preset's value."""
    given = cols[name]
    kind = np.asarray(given).dtype.kind if not hasattr(given, "categories") else "O"
    if kind in "biu":
        return
    if kind == "f":
        missing = np.isnan(given)
    elif isinstance(given, pd.Categorical):   # only its codes need looking at
        missing = np.asarray(given.isna())
    else:
        missing = pd.isna(np.asarray(given, dtype=object))
    if not missing.any():
        return
    sub = {name: np.asarray(given, dtype=object)[~missing]}
    if name in schema.ENUMS:
        known = schema.enum_codes(sub, name)
    elif schema.columns()[name].dtype == "bool":
        known = as_bool(sub, name, False).astype(float)
    else:
        known = as_float(sub, name, np.nan)
    filled = preset.copy()
    filled[~missing] = known
    cols[name] = filled


def framework(cols: dict) -> None:
    """Software settings from the `framework` preset (the `default` row where none is named or a
    preset leaves a setting blank). Explicit columns win; `sp` blank means on with TP > 1."""
    table = catalog.frameworks()
    default_row = table.loc["default"]
    n = length(cols)
    if "framework" in cols:
        lookup, resolved, _ = _row_lookup(cols, "framework", "framework")
        rows = [table.loc[r] for r in resolved] + [default_row]
    else:
        lookup, rows = np.zeros(n, dtype=np.intp), [default_row]
    used = np.zeros(len(rows), dtype=bool)
    used[lookup] = True
    for name in SETTINGS:
        values = [_preset_value(r, default_row, name) for r in rows]
        if name in cols:
            _fill_gaps(cols, name, _setting_array(name, values, lookup))
            continue
        if name == "sp" and all(v is None or (isinstance(v, float) and np.isnan(v)) for v in values):
            continue  # no preset sets it: on with TP (schema)
        cols[name] = _lazy_setting(name, values, lookup, used)
