"""Technology catalogs (nodes, memory, network, packaging, assumptions, calibration anchors).

Each CSV under `dse/catalog/` keeps a source column beside every number; projections say
so and give their basis. This module only loads them, resolves names (case-insensitive,
with aliases) and gathers per-row arrays with integer codes, so a batch of any length
costs one lookup per distinct name.
"""
from __future__ import annotations

import difflib
from functools import lru_cache

import numpy as np
import pandas as pd

from dse.catalog import _read
from dse.columns import categories
from dse.errors import ConfigError

MISSING = {"", "nan", "none", "<na>", "nat"}

# field name in the batch -> (catalog file, kind used in messages)
KINDS = {
    "node": ("nodes.csv", "node"),
    "memory": ("memory.csv", "memory"),
    "scaleup": ("network.csv", "network"),
    "scaleout": ("network.csv", "network"),
    "package": ("packaging.csv", "package"),
}


@lru_cache(maxsize=None)
def table(file: str) -> pd.DataFrame:
    """A technology catalog indexed by its canonical (lower-case) name."""
    t = _read(file)
    t["name"] = t["name"].str.strip().str.lower()
    return t.set_index("name", drop=False)


@lru_cache(maxsize=None)
def _index(file: str) -> dict[str, str]:
    t = table(file)
    index: dict[str, str] = {}
    for name, aliases in zip(t["name"], t["aliases"].fillna("")):
        index[name] = name
        for alias in str(aliases).split(";"):
            if alias.strip():
                index[alias.strip().lower()] = name
    return index


def resolve(field: str, value) -> str:
    """Canonical catalog name for `value` of column `field`; ConfigError naming the closest."""
    file, kind = KINDS[field]
    index = _index(file)
    key = str(value).strip().lower()
    if key in index:
        return index[key]
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.4)
    names = sorted({index[c] for c in close})
    known = ", ".join(table(file)["name"])
    hint = f"closest: {', '.join(names)}" if names else f"known: {known}"
    raise ConfigError(f"{field}: unknown {kind} '{value}' ({hint}); known {kind}s are in dse/catalog/{file}")


@lru_cache(maxsize=None)
def assumptions() -> dict[str, float]:
    """Documented default inputs and model constants (dse/catalog/assumptions.csv)."""
    t = _read("assumptions.csv")
    return {str(k): float(v) for k, v in zip(t["name"], t["value"])}


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
    canon = []
    for u in uniques:
        canon.append(None if str(u).strip().lower() in MISSING else resolve(field, u))
    canon_arr = np.asarray(canon + [None], dtype=object)
    codes = np.where(codes < 0, len(uniques), codes)  # pandas Categorical: -1 = missing
    rows = [c for c in canon]
    out = {}
    for c in names:
        col = t[c]
        dt = _dtype(col)
        per_unique = [col.at[r] if r is not None else (np.nan if dt == float else None) for r in rows]
        per_unique.append(np.nan if dt == float else None)
        out[c] = np.asarray(per_unique, dtype=dt)[codes]
    names_row = canon_arr[codes]
    valid = np.asarray([r is not None for r in canon] + [False], dtype=bool)[codes]
    return out, names_row, valid


def _dtype(col: pd.Series):
    return float if pd.api.types.is_numeric_dtype(col) else object


def _length(cols: dict) -> int:
    for v in cols.values():
        return len(v)
    return 0
