"""Technology catalogs (nodes, memory, network, packaging, assumptions, calibration anchors).

Each CSV under `dse/catalog/` keeps a source column beside every number; projections say
so and give their basis. This module only loads them and gathers per-row arrays with
integer codes, so a batch of any length costs one lookup per distinct name. Names are
resolved by the catalog's one alias resolver (`dse.catalog.resolve`).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from dse import catalog
from dse.catalog import _read
from dse.columns import categories

MISSING = {"", "nan", "none", "<na>", "nat"}

# field name in the batch -> (catalog file, catalog kind for dse.catalog.resolve)
KINDS = {
    "node": ("nodes.csv", "node"),
    "memory": ("memory.csv", "memory"),
    "scaleup": ("network.csv", "network"),
    "scaleout": ("network.csv", "network"),
    "d2d": ("network.csv", "network"),
    "package": ("packaging.csv", "package"),
}


@lru_cache(maxsize=None)
def table(file: str) -> pd.DataFrame:
    """A technology catalog indexed by its catalog name (as `dse.catalog.resolve` returns it)."""
    t = _read(file)
    t["name"] = t["name"].astype(str).str.strip()
    return t.set_index("name", drop=False)


def resolve(field: str, value) -> str:
    """Catalog name for `value` of batch column `field`; ConfigError naming `field` and the closest."""
    return catalog.resolve(KINDS[field][1], value, field)


@lru_cache(maxsize=None)
def assumptions() -> dict[str, float]:
    """Documented default inputs and model constants (dse/catalog/assumptions.csv)."""
    t = _read("assumptions.csv")
    return {str(k): float(v) for k, v in zip(t["name"], t["value"])}


@lru_cache(maxsize=None)
def defaults() -> dict[str, str]:
    """Default technology names and named choices (dse/catalog/hardware_defaults.csv)."""
    t = _read("hardware_defaults.csv")
    return {str(k).strip(): str(v).strip() for k, v in zip(t["name"], t["value"])}


@lru_cache(maxsize=None)
def organic_substrate_factors() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(package-area thresholds mm2, multi-chip factors), ascending (dse/catalog/organic_substrate.csv)."""
    t = _read("organic_substrate.csv").sort_values("above_package_area_mm2")
    return (tuple(float(x) for x in t["above_package_area_mm2"]),
            tuple(float(x) for x in t["multi_chip_factor"]))


@lru_cache(maxsize=None)
def calibration() -> pd.DataFrame:
    """The few real parts the technology model is anchored on (dse/catalog/calibration.csv)."""
    return _read("calibration.csv").set_index("name", drop=False)


def gather(cols: dict, field: str, names: tuple[str, ...], default: str | None = None,
           frame: pd.DataFrame | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Per-row catalog values for the names in column `field`.

    Returns (values by catalog column, canonical name per row as object array, valid mask).
    Rows whose `field` is missing (NaN/None/empty) get NaN values and valid=False;
    a missing column takes `default` for every row (or all rows invalid when no default).
    `frame` (indexed by canonical name) replaces the catalog table as the source of values.
    """
    file, _ = KINDS[field]
    t = table(file) if frame is None else frame
    n = _length(cols)
    if field not in cols or cols[field] is None:
        if default is None:
            names_row = np.full(n, None, dtype=object)
            return ({c: np.full(n, np.nan) for c in names}, names_row, np.zeros(n, dtype=bool))
        canon = resolve(field, default)
        vals = {c: np.full(n, t.at[canon, c], dtype=_dtype(t[c])) for c in names}
        return vals, np.full(n, canon, dtype=object), np.ones(n, dtype=bool)
    codes, uniques = categories(cols[field])
    canon = [None if str(u).strip().lower() in MISSING else resolve(field, u) for u in uniques]
    codes = np.where(codes < 0, len(uniques), codes)  # pandas Categorical: -1 = missing
    # catalog row per distinct name (one past the end: missing), then one take per column
    row = np.append(t.index.get_indexer([r if r is not None else "\0" for r in canon]), -1)
    row = np.where(row < 0, len(t), row)[codes]
    out = {}
    for c in names:
        values, dt = _column(t, c)
        out[c] = values[row] if dt == float else values[row].copy()
    names_row = np.asarray(canon + [None], dtype=object)[codes]
    valid = np.asarray([r is not None for r in canon] + [False], dtype=bool)[codes]
    return out, names_row, valid


_COLUMNS: dict = {}


def _column(t: pd.DataFrame, c: str):
    """(values with a missing-value slot appended, dtype) of one catalog column, cached per table."""
    key = (id(t), c)
    if key not in _COLUMNS:
        dt = _dtype(t[c])
        # the table itself is kept in the entry, so its id is never reused by another table
        _COLUMNS[key] = (np.append(t[c].to_numpy(dtype=dt), np.nan if dt == float else None).astype(dt), dt, t)
    return _COLUMNS[key][:2]


def _dtype(col: pd.Series):
    return float if pd.api.types.is_numeric_dtype(col) else object


def _length(cols: dict) -> int:
    for v in cols.values():
        return len(v)
    return 0
