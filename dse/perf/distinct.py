"""Functions of a row block evaluated once per distinct row: within a block of one model and system
(dse.columns.blockwise), a layer's times depend on a handful of per-row columns (TP, CP, micro-batch,
...) whose combinations repeat across thousands of rows. The distinct rows of the uniform blocks of
a long batch are evaluated together, a few blocks' worth a call, so the fixed cost of a call (a few
thousand numpy calls on small arrays) is paid a few times per batch instead of once per block."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse.columns import BLOCK_ROWS, CatalogColumn, ColumnView


class _PerRowColumn(Exception):
    """A function evaluated on distinct rows read a per-row column outside its key."""


def _dense_codes(v: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(code per row, number of codes) of a column's values: whole numbers below 2**16 are coded by
    their rank among the values present (so the codes of several columns combine into few), other
    values are numbered by hashing; (None, 1) for a column of one whole number."""
    if v.dtype == bool:
        return v.view(np.uint8), 2
    if v.dtype.kind in "iuf" and len(v) and 0 <= v.min() and v.max() < 1 << 16:   # (not NaN)
        small = v.astype(np.intp)
        if v.dtype.kind in "iu" or (small == v).all():
            present = np.zeros(int(v.max()) + 1, dtype=bool)
            present[small] = True
            count = int(present.sum())
            if count == 1:
                return None, 1
            return (small if count == len(present) else (np.cumsum(present) - 1)[small]), count
    codes, uniques = pd.factorize(v, use_na_sentinel=False)
    return codes, len(uniques)


def _combined(code: np.ndarray, size: int, codes, count: int):
    """(code, size) of the combinations of `code` and a column's codes (_dense_codes)."""
    return (code * count + codes, size * count) if count > 1 else (code, size)


def _first_and_index(code: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct code, its index per row) of codes below `size`; the distinct
    codes in order of value, or of first appearance where there are too many to count in a table."""
    n = len(code)
    if size > 4 * n:
        code, distinct = pd.factorize(code)
        size = len(distinct)
    present = np.bincount(code, minlength=size) > 0
    index = (np.cumsum(present) - 1)[code]
    first = np.empty(int(present.sum()), dtype=np.intp)
    first[index[::-1]] = np.arange(n - 1, -1, -1)
    return first, index


def distinct(fn, block: Mapping, keys, min_rows: int = 256, max_share: float = 0.25):
    """fn(block) where fn reads the block's columns only and depends on its rows through the `keys`
    columns alone (and the model, hardware and preset columns, one value in a uniform block):
    evaluated once per distinct combination of their values in the uniform blocks of the batch (if
    they are at most `max_share` of the rows), each 1-D array in the result then taken back to every
    row. A per-row column outside `keys` (a mapping input given per row that the caller did not
    foresee) evaluates fn on every row instead."""
    frame = getattr(block, "frame", None)
    if getattr(block, "rows", 0) < min_rows or not getattr(block, "uniform", False) or frame is None:
        return fn(block)   # (model and hardware columns vary by row)
    if (fn, tuple(keys)) not in frame.shared:
        frame.shared[fn, tuple(keys)] = _across_blocks(fn, frame, tuple(keys), max_share)
    across = frame.shared[fn, tuple(keys)]
    return fn(block) if across is None else _block_result(across, block.frame_rows)


def _across_blocks(fn, frame, keys: tuple, max_share: float):
    """fn evaluated on the distinct rows of every uniform block of `frame` (the Reordered columns of
    dse.columns.blockwise; its uniform blocks come first): (index per row into the distinct rows,
    call boundaries in them, fn's result per call); None where distinct rows do not pay or fn reads
    a per-row column outside `keys`. Each call takes whole blocks, at most BLOCK_ROWS rows, so its
    temporaries stay in the cache as a block's do."""
    sizes = [stop - start for start, stop, uniform in frame.blocks if uniform]
    n = sum(sizes)   # the uniform blocks' rows: the first n
    # a row's block leads its code, so the distinct rows come block by block; the catalog columns,
    # one value per block, need no codes
    block = np.repeat(np.arange(len(sizes)), sizes)
    code, size = block, len(sizes)
    for k in keys:
        v = frame[k] if k in frame else None
        if isinstance(v, CatalogColumn) or np.ndim(v) != 1 or len(v) != frame.rows:
            continue
        if ("codes", k) not in frame.shared:   # (kept for the next function with this key)
            frame.shared["codes", k] = _dense_codes(np.asarray(v)[:n])
        code, size = _combined(code, size, *frame.shared["codes", k])
    first, index = _first_and_index(code, size)
    if len(first) > max_share * n:
        return None
    bounds = _calls(np.bincount(block[first], minlength=len(sizes)), BLOCK_ROWS)
    try:
        results = [fn(_DistinctRows(frame, first[a:b], block[first[a:b]], keys)) for a, b in zip(bounds, bounds[1:])]
    except _PerRowColumn:
        return None
    return index, bounds, results


def _calls(per_block: np.ndarray, limit: int) -> list:
    """Boundaries of the calls in the distinct rows (`per_block` of them in each block, in order):
    consecutive whole blocks, at most `limit` rows a call unless one block alone has more."""
    bounds, previous = [0], 0
    for end in np.cumsum(per_block).tolist():
        if end - bounds[-1] > limit and previous > bounds[-1]:
            bounds.append(previous)
        previous = end
    return bounds + [previous] if previous > bounds[-1] else bounds


def _block_result(across, rows: slice):
    """fn's result for the uniform block of frame rows `rows`, from its call (_across_blocks)."""
    index, bounds, results = across
    index = index[rows]
    call = int(np.searchsorted(bounds, index[0], side="right")) - 1
    return _at_rows(results[call], index - bounds[call], bounds[call + 1] - bounds[call])


class _DistinctRows(ColumnView):
    """The columns of a frame (dse.columns.Reordered) at the given rows of its uniform blocks (`block`:
    each one's block), as one mixed block: key columns taken at them, catalog columns at their
    block's first row (a one-valued column as its value); any other per-row column raises
    _PerRowColumn."""

    uniform = False

    def __init__(self, frame, first: np.ndarray, block: np.ndarray, keys):
        self._work, self._first, self._keys, self._seen = frame, first, keys, {}
        self._block, self._starts = block, np.array([start for start, _, uniform in frame.blocks if uniform])
        self.rows = len(first)

    def __getitem__(self, key):
        if key not in self._seen:
            v = self._work[key]
            if isinstance(v, CatalogColumn):
                v = v.values if len(v.values) == 1 else np.take(v[self._starts], self._block, mode="clip")
            elif np.ndim(v) == 1 and len(v) == self._work.rows:
                if key not in self._keys:
                    raise _PerRowColumn(key)
                v = np.asarray(v)[self._first]
            self._seen[key] = v
        return self._seen[key]


def _at_rows(value, index: np.ndarray, n: int):
    """`value` with each 1-D array of n rows in it (itself, in a tuple, list or dict, or an attribute of a
    plain object, read through _AtRows) taken at `index`."""
    if isinstance(value, np.ndarray):   # (mode="clip": in range, the unchecked take is faster than value[index])
        return np.take(value, index, mode="clip") if value.ndim == 1 and len(value) == n else value
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
