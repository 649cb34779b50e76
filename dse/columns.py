"""The batch of design points: helpers over dicts of 1-D arrays (a leaf: imports no dse module
but dse.errors). The column schema lives in dse.schema, name resolution in dse.resolve.

A batch is a dict of equal-length 1-D numpy arrays, one row per design point.
`dse.evaluate_*` accept a pandas DataFrame or a mapping of arrays (scalars broadcast)
and give back the same kind, same rows, same order, with result columns added.

Categorical inputs (model, system, precision, recompute, ...) may be strings, pandas
Categoricals (fast: only the categories are looked at) or, for enums, integer codes.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse.errors import ConfigError

# The block-wise model arithmetic runs in float32: twice the numbers per SIMD instruction and
# half the cache traffic of float64, while its 7 significant digits are far finer than the
# model's own accuracy (and exact for the integer degrees and sizes it divides). Results are
# handed back in float32 too (the economics, which accumulate dollars over a run, in float64).
MODEL_FLOAT = np.float32


def real(x) -> np.ndarray:
    """A floating-point array: float32 or float64 as given, anything else as float64."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def to_columns(frame) -> tuple[dict[str, np.ndarray], int]:
    """Mapping or DataFrame -> (dict of 1-D arrays, row count). Scalars broadcast."""
    if isinstance(frame, pd.DataFrame):
        cols = {}
        for k in frame.columns:
            s = frame[k]
            if isinstance(s.dtype, pd.CategoricalDtype):
                cols[str(k)] = s.array
            elif s.dtype.kind in "OUS" or isinstance(s.dtype, pd.StringDtype):
                # strings: integer codes once (hash-based; no conversion of every row to a Python object)
                try:
                    codes, uniques = pd.factorize(s.array, use_na_sentinel=True)
                except TypeError:  # unhashable cells (a `model` given as a dict of config fields)
                    cols[str(k)] = s.to_numpy()
                    continue
                cols[str(k)] = pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object))
            else:
                cols[str(k)] = s.to_numpy()
        return cols, len(frame)
    if not isinstance(frame, Mapping):
        raise ConfigError("input: expected a pandas DataFrame or a mapping of column arrays")
    lengths = {len(v) for v in frame.values() if np.ndim(v) > 0 and not isinstance(v, str)}
    if len(lengths) > 1:
        raise ConfigError(f"input: columns have different lengths {sorted(lengths)}; give equal-length arrays")
    n = lengths.pop() if lengths else 1
    cols = {}
    for k, v in frame.items():
        if isinstance(v, pd.Categorical):
            cols[k] = v
        elif np.ndim(v) == 0 or isinstance(v, str):
            cols[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
        else:
            cols[k] = np.asarray(v)
    return cols, n


# Rows evaluated per block: the temporaries of one block stay in the CPU cache, which makes a
# long batch several times faster than one pass over whole-length arrays.
BLOCK_ROWS = 1 << 15
# Rows of one combination of catalog entries (model, system, preset) evaluated as blocks of their
# own, in which the catalog columns are one value each; rows of rarer combinations share mixed blocks.
UNIFORM_ROWS = 1 << 12


class ColumnView(Mapping):
    """A lazy view of the columns of `_work` (each read through the subclass's __getitem__): the
    names, their count and membership are the underlying columns'."""
    _work: Mapping

    def __iter__(self):
        return iter(self._work)

    def __len__(self) -> int:
        return len(self._work)

    def __contains__(self, key) -> bool:
        return key in self._work


class Block(ColumnView):
    """The columns of one row block, sliced (and catalog columns expanded) on first read: a kernel
    pays only for the columns it uses, however many the schema defines (the fitted kernel
    parameters of every number format, say). In a `uniform` block (rows of one catalog entry each,
    see blockwise) catalog columns are read as one value (an array of length 1, broadcast against
    the per-row columns). `frame`: the Reordered columns the blocks of a long batch share."""

    def __init__(self, work: Mapping, rows: slice, uniform: bool = False, n: int | None = None,
                 frame: "Reordered | None" = None):
        self._work, self._rows, self._seen = work, rows, {}
        self.rows = rows.stop - rows.start if n is None else n   # rows in the block
        self.uniform, self.frame, self.frame_rows = uniform, frame, rows
        self._one = slice(rows.start, rows.start + 1) if uniform else None

    def __getitem__(self, key):
        if key not in self._seen:
            v, rows = self._work[key], self._rows
            if self._one is not None and isinstance(v, CatalogColumn):
                rows = self._one
            self._seen[key] = v[rows] if isinstance(v, CatalogColumn) or np.ndim(v) else v
        return self._seen[key]



class _Reordered:
    """Row codes in `order`, taken slice by slice (a block of one catalog entry takes one row)."""

    __slots__ = ("codes", "order")

    def __init__(self, codes: np.ndarray, order: np.ndarray):
        self.codes, self.order = codes, order

    def __getitem__(self, rows):
        return self.codes[self.order[rows]]

    def __len__(self) -> int:
        return len(self.order)


class Reordered(ColumnView):
    """The columns of `work` with their rows in `order`, each reordered when first read (catalog
    columns only where a block reads them). The row blocks evaluated over them (row_groups) and what
    is computed once for all of them (dse.perf.distinct) are kept with them."""

    def __init__(self, work: Mapping, order: np.ndarray, blocks: list = ()):
        self._work, self._order, self._seen = work, order, {}
        self.rows, self.blocks, self.shared = len(order), blocks, {}

    def __getitem__(self, key):
        if key not in self._seen:
            v = self._work[key]
            if isinstance(v, CatalogColumn):
                v = v.at_rows(_Reordered(v.codes, self._order))
            elif np.ndim(v) == 1 and len(v) == len(self._order):
                v = np.asarray(v)[self._order]
            self._seen[key] = v
        return self._seen[key]



def _group_key(work: dict, n: int):
    """(group per row, number of groups): one group per combination of catalog entries (the
    distinct row-code arrays of the catalog columns); None if there are too many combinations."""
    key, size = np.zeros(n, dtype=np.int64), 1
    # (a column of one value, every code 0, groups nothing)
    for codes in {id(v.codes): v.codes for v in work.values() if isinstance(v, CatalogColumn) and len(v.values) > 1}.values():
        low, high = (int(codes.min()), int(codes.max())) if len(codes) else (0, 0)
        if size * (high - low + 1) > 1 << 24:
            return None
        key, size = key * (high - low + 1) + (codes - low), size * (high - low + 1)
    return key, size


def row_groups(work: dict, n: int, block: int):
    """(row order, [(start, stop, uniform)]) or None: the rows of each group (_group_key) with at
    least UNIFORM_ROWS rows first, in blocks of at most `block` rows (uniform), then the remaining
    rows in their own order in mixed blocks. None when no group has that many rows."""
    grouped = _group_key(work, n)
    if grouped is None or grouped[1] == 1:
        return None
    key, size = grouped
    counts = np.bincount(key, minlength=size)
    large = np.flatnonzero(counts >= UNIFORM_ROWS)
    if not len(large):
        return None
    slot = np.full(size, len(large), dtype=np.uint16 if len(large) < 1 << 16 else np.int64)
    slot[large] = np.arange(len(large))
    order = np.argsort(slot[key], kind="stable")
    sizes = list(counts[large]) + [n - int(counts[large].sum())]
    blocks, start = [], 0
    for g, rows in enumerate(sizes):
        parts = max(-(-rows // block), 1)
        edges = start + np.linspace(0, rows, parts + 1).round().astype(int)
        blocks += [(int(a), int(b), g < len(large)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
        start += rows
    return order, blocks


def blockwise(fn, work: dict, n: int, block: int = BLOCK_ROWS) -> dict:
    """Apply a columns -> columns function to row blocks and join the results. A long batch is
    evaluated by catalog entry (row_groups): the model, hardware and preset columns of such a block
    are single values, so what depends on them alone is computed once per block, and branches that
    no row of the entry needs are skipped. Each row's result does not depend on its block."""
    def result_dtype(v):  # results keep the model's float type: float64 would add no information
        return v.dtype

    if n <= block:
        part = fn(Block(work, slice(None), n=n))
        return {k: np.asarray(v).astype(result_dtype(np.asarray(v)), copy=False) for k, v in part.items()}
    plan = row_groups(work, n, block)
    order, blocks = plan if plan else (None, [(i, min(i + block, n), False) for i in range(0, n, block)])
    rows = work if order is None else Reordered(work, order, blocks)
    out = None
    for start, stop, uniform in blocks:
        part = fn(Block(rows, slice(start, stop), uniform, frame=None if order is None else rows))
        if out is None:
            out = {k: np.empty(n, dtype=result_dtype(np.asarray(v))) for k, v in part.items()}
        for k, v in part.items():
            out[k][start:stop] = v
    return out if order is None else _unordered(out, order)


def _unordered(out: dict, order: np.ndarray) -> dict:
    """Columns written in `order` put back in row order (each column's buffer reused for the next
    column of its type: no more new memory than one column per type)."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    spare, result = {}, {}
    for k, v in out.items():
        buffer = spare.pop(v.dtype, None)
        # mode="clip": the indices are in range, and an unbuffered take is four times faster
        result[k] = np.take(v, inverse, out=buffer if buffer is not None else np.empty_like(v), mode="clip")
        spare[v.dtype] = v
    return result


def divides(a, b) -> np.ndarray:
    """a divides b, for integer-valued float arrays; a < 1 counts as 1. b == floor(b/a) * a is exact
    for integers below 2**24 in float32 (the product of the quotient and a is exact, so a rounded
    quotient can only make the test fail, never pass), and 20x faster than np.fmod."""
    a = np.maximum(a, 1)
    return np.floor(b / a) * a == b


def not_positive_integers(*arrays) -> np.ndarray:
    """Rows where any of the arrays is not a positive integer (NaN included)."""
    bad = np.zeros(np.broadcast(*arrays).shape, dtype=bool)
    for x in arrays:
        bad |= ~(x >= 1) | (np.floor(x) != x)
    return bad


def first_failure(checks: list, invalid: np.ndarray, invalid_code: int) -> np.ndarray:
    """Reason code per row: 0 if no check fails, else the code of the first failing check;
    `invalid_code` where the inputs themselves are invalid. `checks` is a list of (code, mask)."""
    code = np.zeros(np.broadcast_shapes(np.shape(invalid), *(np.shape(f) for _, f in checks)), dtype=np.int8)
    for reason, failed in reversed(checks):  # the first failure is written last
        np.putmask(code, np.broadcast_to(failed, code.shape), reason)
    np.putmask(code, np.broadcast_to(invalid, code.shape), invalid_code)
    return code


def pack(frame, outputs: dict[str, np.ndarray]):
    """Give back the caller's kind: a DataFrame with the outputs added (its own columns shared, not
    copied; an output it already has is replaced; text outputs as categoricals), or a dict."""
    if isinstance(frame, pd.DataFrame):
        new = {}
        for k, v in outputs.items():
            if isinstance(v, np.ndarray) and v.dtype.kind == "O":
                codes, uniques = pd.factorize(v)
                v = pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object))
            new[k] = v
        kept = frame.drop(columns=[k for k in new if k in frame.columns])
        # copy=False: the result columns are used as they are (no consolidation into one block)
        return pd.concat([kept, pd.DataFrame(new, index=frame.index, copy=False)], axis=1)
    result = dict(frame)
    result.update(outputs)
    return result


def categories(values) -> tuple[np.ndarray, list]:
    """(integer codes, list of distinct values) for a string-like column; missing values get -1.
    Hash-based (pandas.factorize), so a million strings cost tens of milliseconds, not a sort."""
    if isinstance(values, pd.Categorical) or isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        cat = pd.Categorical(values)
        return np.asarray(cat.codes), list(cat.categories)
    codes, uniques = pd.factorize(np.asarray(values).reshape(-1), use_na_sentinel=True)
    return np.asarray(codes), [str(u) for u in uniques]


def length(cols: dict) -> int:
    """Rows of a batch (0 for an empty one)."""
    for v in cols.values():
        return len(v)
    return 0


def as_float(cols: dict, name: str, default: float) -> np.ndarray:
    n = length(cols)
    if name not in cols:
        return np.full(n, float(default))
    given = np.asarray(cols[name])
    out = real(given)
    if given.dtype.kind in "biu":   # no missing values
        return out
    return np.where(np.isnan(out), float(default), out) if np.isnan(out).any() else out


def as_bool(cols: dict, name: str, default: bool) -> np.ndarray:
    n = length(cols)
    if name not in cols:
        return np.full(n, bool(default))
    v = cols[name]
    arr = np.asarray(v)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iuf":
        return np.nan_to_num(arr.astype(float), nan=float(default)) != 0
    codes, uniques = categories(v)
    truth = {"true": True, "yes": True, "1": True, "on": True,
             "false": False, "no": False, "0": False, "off": False, "none": False, "nan": default, "": default}
    table = []
    for u in uniques:
        key = str(u).strip().lower()
        if key not in truth:
            raise ConfigError(f"{name}: '{u}' is not a boolean; use true or false")
        table.append(truth[key])
    table.append(default)  # missing values (code -1)
    return np.asarray(table, dtype=bool)[np.where(codes < 0, len(table) - 1, codes)]


MISSING_NAMES = {"", "nan", "none", "null", "<na>"}


class CatalogColumn:
    """A catalog value per row kept as (row codes, one value per catalog entry): the full-length
    column is only expanded where it is read, so block-wise evaluation looks values up per block
    instead of writing and re-reading a million-row array per column. Behaves as a 1-D array
    for np.asarray, len() and slicing."""

    __slots__ = ("codes", "values", "has_gaps")
    ndim = 1

    def __init__(self, codes: np.ndarray, values: np.ndarray, used: np.ndarray):
        self.codes, self.values = codes, values
        # a row whose value is missing (only floats can miss one)
        self.has_gaps = values.dtype.kind == "f" and bool(np.isnan(values[used]).any())

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def shape(self):
        return (len(self.codes),)

    @property
    def dtype(self):
        return self.values.dtype

    def __getitem__(self, index):
        return self.values[self.codes[index]]

    def at_rows(self, codes) -> "CatalogColumn":
        """The same catalog values for rows with these codes (an array, or anything a slice of rows
        can be taken from)."""
        out = CatalogColumn.__new__(CatalogColumn)
        out.codes, out.values, out.has_gaps = codes, self.values, self.has_gaps
        return out

    def astype(self, dtype) -> "CatalogColumn":
        out = CatalogColumn.__new__(CatalogColumn)
        out.codes, out.values, out.has_gaps = self.codes, self.values.astype(dtype), self.has_gaps
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.values[self.codes]
        return out if dtype is None else out.astype(dtype, copy=False)


def only_where(mask, compute, otherwise=np.float32(0.0)):
    """compute() if any row of the block needs it, else a constant: whole branches (MoE, CP,
    unfused attention, ...) cost nothing in blocks that have no such rows."""
    return compute() if np.any(mask) else otherwise
