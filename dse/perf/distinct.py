"""Functions of a row block evaluated once per distinct row: within a block of one model and system
(dse.columns.blockwise), a layer's times depend on a handful of per-row columns (TP, CP, micro-batch,
...) whose combinations repeat across thousands of rows."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse.columns import ColumnView


class _PerRowColumn(Exception):
    """A function evaluated on distinct rows read a per-row column outside its key."""


class _DistinctRows(ColumnView):
    """The columns of a block at the given rows only: key columns restricted to them, columns with
    one value (or none per row) as they are; any other per-row column raises _PerRowColumn."""

    def __init__(self, block: Mapping, first: np.ndarray, keys):
        self._work, self._first, self._keys, self._seen = block, first, keys, {}
        self.rows = len(first)

    def __getitem__(self, key):
        if key not in self._seen:
            v = self._work[key]
            if np.ndim(v) == 1 and len(v) == self._work.rows:
                if key not in self._keys:
                    raise _PerRowColumn(key)
                v = v[self._first]
            self._seen[key] = v
        return self._seen[key]



def _dense_codes(v: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(code per row, number of codes) of a column's values: small whole numbers are their own
    codes (or, up to 2**16, their rank among the values present), other values are numbered by
    hashing; (None, 1) for a column of one whole number."""
    if v.dtype == bool:
        return v.view(np.uint8), 2
    if v.dtype.kind in "iuf":
        small = v.astype(np.intp)
        low, high = int(small.min()), int(small.max())
        if 0 <= low and high < 1 << 16 and (v.dtype.kind in "iu" or (small == v).all()):
            if low == high or high < 64:
                return (None, 1) if low == high else (small, high + 1)
            present = np.zeros(high + 1, dtype=bool)
            present[small] = True
            return (np.cumsum(present, dtype=np.intp) - 1)[small], int(present.sum())
    codes, uniques = pd.factorize(v, use_na_sentinel=False)
    return codes, len(uniques)


def _distinct_rows(block: Mapping, keys) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct combination of the `keys` columns, its index per row); each
    column's codes are kept with the block (`block.key_codes`) for the next key that has it."""
    n = block.rows
    code, size = np.zeros(n, dtype=np.intp), 1
    for k in keys:
        v = block[k] if k in block else None
        if np.ndim(v) != 1 or len(v) != n:
            continue   # one value in the block
        if k not in block.key_codes:
            block.key_codes[k] = _dense_codes(np.asarray(v))
        codes, count = block.key_codes[k]
        if count > 1:
            code, size = code * count + codes, size * count
    if size > 4 * n:   # too many combinations to count them in a table
        code, distinct = pd.factorize(code)
        size = len(distinct)
    present = np.bincount(code, minlength=size) > 0
    index = (np.cumsum(present) - 1)[code]
    first = np.empty(int(present.sum()), dtype=np.intp)
    first[index[::-1]] = np.arange(n - 1, -1, -1)
    return first, index


def distinct(fn, block: Mapping, keys, min_rows: int = 256, max_share: float = 0.25):
    """fn(block) where fn reads the block's columns only and depends on its rows through the `keys`
    columns alone: evaluated once per distinct combination of their values (if they are at most
    `max_share` of the rows), each 1-D array in the result then taken back to every row. A per-row
    column outside `keys` (a mapping input given per row that the caller did not foresee) evaluates
    fn on every row instead."""
    n = getattr(block, "rows", 0)
    if n < min_rows or not getattr(block, "uniform", False):   # (model and hardware columns vary by row)
        return fn(block)
    first, index = _distinct_rows(block, keys)
    if len(first) > max_share * n:
        return fn(block)
    try:
        result = fn(_DistinctRows(block, first, keys))
    except _PerRowColumn:
        return fn(block)
    return _at_rows(result, index, len(first))


def _at_rows(value, index: np.ndarray, n: int):
    """`value` with each 1-D array of n rows in it (itself, in a tuple, list or dict, or an attribute of a
    plain object, read through _AtRows) taken at `index`."""
    if isinstance(value, np.ndarray):
        return value[index] if value.ndim == 1 and len(value) == n else value
    if isinstance(value, (tuple, list)):
        return type(value)(_at_rows(v, index, n) for v in value)
    if isinstance(value, dict):
        return _AtRowsDict(value, index, n)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return _AtRows(value, index, n)
    return value


class _AtRows:
    """A plain object whose attributes are taken at `index` (_at_rows) when first read."""

    def __init__(self, value, index: np.ndarray, n: int):
        self.__dict__["_of"] = (value, index, n)

    def __getattr__(self, name):
        value, index, n = self.__dict__["_of"]
        self.__dict__[name] = _at_rows(getattr(value, name), index, n)
        return self.__dict__[name]


class _AtRowsDict(Mapping):
    """A dict whose values are taken at `index` (_at_rows) when first read: entries no row reads
    (the forward times of modules no row recomputes) cost nothing."""

    def __init__(self, value: dict, index: np.ndarray, n: int):
        self._of, self._index, self._n, self._done = value, index, n, {}

    def __getitem__(self, key):
        if key not in self._done:
            self._done[key] = _at_rows(self._of[key], self._index, self._n)
        return self._done[key]

    def __iter__(self):
        return iter(self._of)

    def __len__(self):
        return len(self._of)
