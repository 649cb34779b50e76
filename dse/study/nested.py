"""The nested search of one batch: B outer points x every inner mapping, in one vectorized call.

`evaluate_outer(study, outer_columns, cache)`:
1. derived outer columns and outer constraints, vectorized over the B points;
2. hardware derived once per batch (`dse.evaluate_hardware`) when the outer space has `node`;
3. inner rows from cached integer tables: each distinct inner space (keyed by the outer values
   it reads, e.g. gpus and scaleup_domain) is enumerated ONCE into numpy arrays (numbers, and
   string columns as integer codes into a per-column category list), then the rows of the
   batch are gathered with one index array (np.repeat / np.take), strings passed on as
   `pd.Categorical.from_codes`;
4. one evaluator call for all rows; feasibility, graded violations and the best mapping per
   outer point by np.lexsort (see the `dse.study` docstring for the rule).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from dse.errors import ConfigError
from dse.study.spec import Study, inner_space

# Violation levels (see the dse.study docstring)
V_OUTER, V_EMPTY, V_HW, V_STRUCT = 200.0, 100.0, 50.0, 20.0
_TABLES_KEY = "_inner_tables"


class InnerTables:
    """Every inner space met so far as one flat table: rows of space t are flat[offsets[t]:+sizes[t]].

    String columns hold codes into `categories[column]` (append-only, so codes stay valid)."""

    def __init__(self, st: Study):
        self.st = st
        self.ids: dict = {}                 # key (values of st.inner_refs) -> table id, -1 if empty
        self.sizes: list[int] = []
        self.columns: list[str] | None = None
        self.categories: dict[str, list] = {}
        self._parts: dict[str, list] = {}
        self._flat: dict[str, np.ndarray] = {}
        self._n_flat = 0                    # tables already in _flat

    def table_ids(self, outer: dict, ok: np.ndarray) -> np.ndarray:
        """Table id per outer point (-1: outer constraint violated or empty inner space)."""
        B = len(ok)
        refs = self.st.inner_refs
        keys = list(zip(*[np.asarray(outer[r]).tolist() for r in refs])) if refs else [()] * B
        tid = np.full(B, -1, np.int64)
        for i in np.nonzero(ok)[0]:
            t = self.ids.get(keys[i])
            if t is None:
                t = self._add(keys[i])
            tid[i] = t
        return tid

    def _add(self, key: tuple) -> int:
        sp = inner_space(self.st, dict(zip(self.st.inner_refs, key)))
        chunk = sp.chunk(0, sp.size) if sp is not None and sp.size else {}
        m = len(next(iter(chunk.values()))) if chunk else 0
        if m == 0:
            self.ids[key] = -1
            return -1
        if self.columns is None:
            self.columns = list(chunk)
            self._parts = {c: [] for c in self.columns}
        for c in self.columns:
            v = chunk[c]
            if isinstance(v, pd.Categorical):
                cats = self.categories.setdefault(c, [])
                lookup = {x: j for j, x in enumerate(cats)}
                remap = np.empty(len(v.categories), np.int32)
                for j, x in enumerate(v.categories):
                    if x not in lookup:
                        lookup[x] = len(cats)
                        cats.append(x)
                    remap[j] = lookup[x]
                v = remap[np.asarray(v.codes)]
            self._parts[c].append(np.asarray(v))
        self.sizes.append(m)
        self.ids[key] = len(self.sizes) - 1
        return self.ids[key]

    def gather(self, tid: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
        """(columns of every inner row of the batch, owner point per row, rows per point)."""
        B = len(tid)
        if len(self.sizes) > self._n_flat:
            for c in self.columns:
                self._flat[c] = np.concatenate(self._parts[c])
            self._n_flat = len(self.sizes)
        sizes_arr = np.asarray(self.sizes, np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes_arr)[:-1]])
        has = tid >= 0
        counts = np.where(has, sizes_arr[np.where(has, tid, 0)], 0) if len(sizes_arr) else np.zeros(B, np.int64)
        n = int(counts.sum())
        own = np.repeat(np.arange(B), counts)
        if n == 0:
            return {}, own, counts
        starts = offsets[tid[has]]
        first_row = (np.cumsum(counts) - counts)[has]
        idx = np.arange(n) + np.repeat(starts - first_row, counts[has])
        cols = {}
        for c in self.columns:
            v = self._flat[c][idx]
            cols[c] = pd.Categorical.from_codes(v, dtype=_categorical_dtype(tuple(self.categories[c]))) if c in self.categories else v
        return cols, own, counts


def outer_columns_from_params(st: Study, params_list: list[dict]) -> dict:
    """Optuna params of B trials -> dict of B-long outer columns (fixed, sampled and derived)."""
    n = len(params_list)
    cols = {}
    for k, v in {**st.workload_fixed, **(st.outer.get("fixed") or {})}.items():
        cols[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
    for pname, col, kind, vals in st.params:
        raw = [p.get(pname) for p in params_list]
        if any(r is None for r in raw):
            raise ConfigError(f"{st.source}: a trial lacks parameter '{pname}'; the storage holds another study")
        cols[col] = np.asarray(raw, dtype=object if isinstance(vals[0], str) else None)
    return cols


def _constants(st: Study) -> dict:
    return st.outer_space.constants if st.outer_space is not None else {}


def _outer_checks(st: Study, outer: dict, B: int) -> tuple[dict, np.ndarray]:
    """Derived outer columns added; (outer, violation of the outer constraints per point)."""
    outer = dict(outer)
    env = {**_constants(st), **outer}
    with np.errstate(all="ignore"):
        for col, ex, real in st.derived_outer:
            v = np.broadcast_to(np.asarray(ex(env)), (B,))
            outer[col] = v.astype(float) if real or v.dtype.kind == "f" and not np.all(v == np.round(v)) else v
            env[col] = outer[col]
        ok = np.ones(B, bool)
        n_bad = np.zeros(B)
        for ex in st.outer_cons:
            good = np.broadcast_to(np.asarray(ex(env), dtype=bool), (B,))
            n_bad += ~good
            ok &= good
    return outer, np.where(ok, 0.0, V_OUTER + n_bad)


def _as_categorical(values: np.ndarray, own: np.ndarray) -> pd.Categorical:
    """B-long values (strings) -> the n-long Categorical values[own], factorized on B values only."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object).astype(str))
    return pd.Categorical.from_codes(codes[own], dtype=_categorical_dtype(tuple(uniques)))


@lru_cache(maxsize=4096)
def _categorical_dtype(categories: tuple) -> pd.CategoricalDtype:
    """Categorical dtypes are validated when made: make each set of categories once."""
    return pd.CategoricalDtype(list(categories))


def _hardware(outer: dict) -> dict:
    """Per-point hardware columns derived from technology (empty without `node`)."""
    if "node" not in outer:
        return {}
    from dse.evaluate import evaluate_hardware
    res = evaluate_hardware({k: (np.asarray(v, dtype=object) if np.asarray(v).dtype.kind in "OUS" else v)
                                 for k, v in outer.items()})
    return {k: v for k, v in res.items() if k not in outer or k == "scaleup_domain"}


def _build_batch(outer: dict, hw: dict, inner: dict, own: np.ndarray) -> tuple[dict, list]:
    """Evaluator input: inner rows + outer columns + hardware, gathered by `own`. With derived
    hardware the technology name columns are left out (the evaluator must not derive it again);
    returns (batch, names left out)."""
    batch = dict(inner)
    for c, v in outer.items():
        if c not in batch:
            a = np.asarray(v)
            batch[c] = _as_categorical(a, own) if a.dtype.kind in "OUS" else a[own]
    for c, v in hw.items():
        if c not in batch or c == "scaleup_domain":
            a = np.asarray(v)
            batch[c] = _as_categorical(a, own) if a.dtype.kind in "OUS" else a[own]
    dropped = []
    if hw:
        dropped = [c for c, v in outer.items() if np.asarray(v).dtype.kind in "OUS" and c not in inner]
        for c in dropped:
            batch.pop(c, None)
    return batch, dropped


def evaluate_outer(st: Study, outer: dict, cache: dict | None = None):
    """Evaluate B outer points (dict of B-long columns): best mapping per point.

    Returns (rows: dict of B-long columns of each point's chosen mapping, values: (B, k) objective
    values in the objectives' own senses, NaN where infeasible; violation: (B,) >= 0, 0 = feasible).
    `cache` (a dict kept by the caller across batches) holds the inner tables.
    """
    cache = {} if cache is None else cache
    tables = cache.get(_TABLES_KEY)
    if tables is None or tables.st is not st:
        tables = cache[_TABLES_KEY] = InnerTables(st)
    B = len(next(iter(outer.values())))
    outer, outer_violation = _outer_checks(st, outer, B)
    ok = outer_violation == 0
    hw = _hardware(outer)
    inner, own, sizes = tables.gather(tables.table_ids(outer, ok))
    violation = np.maximum(outer_violation, np.where(ok & (sizes == 0), V_EMPTY, 0.0))
    values = np.full((B, len(st.objectives)), np.nan)
    n_feasible = np.zeros(B, np.int64)
    n = len(own)
    if n == 0:
        rows = {c: np.asarray(v) for c, v in outer.items()}
        return _finish_rows(rows, violation, sizes, n_feasible), values, violation
    batch, dropped = _build_batch(outer, hw, inner, own)
    out = evaluate_rows(st, batch, n)
    for c in dropped:
        out[c] = batch.get(c, _as_categorical(np.asarray(outer[c]), own))
    obj, feasible, row_v = row_violations(st, out, n)
    pick, pts = best_rows(st, obj, row_v, own)
    n_feasible[:] = np.bincount(own[feasible], minlength=B)
    violation[pts] = np.maximum(violation[pts], row_v[pick])
    fe = row_v[pick] == 0
    values[pts[fe]] = obj[pick[fe]]
    rows = {c: _scatter(v[pick] if isinstance(v, pd.Categorical) else np.asarray(v)[pick], pts, B)
            for c, v in out.items()}
    for c, v in outer.items():
        rows[c] = np.asarray(v)
    return _finish_rows(rows, violation, sizes, n_feasible), values, violation


def _column(out: dict, name: str, n: int, default, dtype):
    v = out.get(name)
    if v is None:
        return np.full(n, default, dtype=dtype)
    return np.asarray(v, dtype=dtype)


def _env(st: Study, out: dict) -> dict:
    """Constraint environment: only the names the row constraints read (strings as objects)."""
    names = {nm for _, ex, gr in st.row_cons for e in ([ex] + (list(gr[:2]) if gr else [])) for nm in e.names}
    env = _constants(st)
    for nm in names:
        if nm in out:
            v = out[nm]
            env[nm] = np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else np.asarray(v)
    return env


def row_violations(st: Study, out: dict, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(objectives (n, k), feasible (n,), violation (n,) >= 0) of every evaluated row."""
    fits = np.asarray(out["fits"], dtype=bool)
    if "hw_fits" in out:
        fits &= np.asarray(out["hw_fits"], dtype=bool)
    env = _env(st, out)
    cons_ok = np.ones(n, bool)
    graded = np.zeros(n)
    with np.errstate(all="ignore"):
        for _text, ex, gr in st.row_cons:
            good = np.broadcast_to(np.asarray(ex(env), dtype=bool), (n,))
            cons_ok &= good
            if gr is not None:
                lhs, rhs, sign = gr
                a = np.asarray(lhs(env), dtype=float)
                b = np.asarray(rhs(env), dtype=float)
                g = sign * (a - b) / np.maximum(np.abs(b), 1e-300)
                g = np.where(np.isfinite(g), np.clip(g, 0, None), 1.0)
            else:
                g = (~good).astype(float)
            graded += np.where(good, 0.0, np.maximum(g, 1e-3))
    obj = np.column_stack([np.asarray(out[c], dtype=float) for c in st.objectives])
    finite = np.isfinite(obj).all(axis=1)
    feasible = fits & cons_ok & finite
    hw_bad = ~_column(out, "hw_fits", n, True, bool)
    oom = _out_of_memory(out, ~fits)
    mem = _column(out, "mem_per_gpu_bytes", n, np.nan, float)
    cap = _column(out, "memory_capacity_bytes", n, np.nan, float)
    with np.errstate(all="ignore"):
        over = np.clip(np.nan_to_num(mem / cap - 1.0, nan=10.0, posinf=10.0), 0, 10)
    row_v = np.where(feasible, 0.0,
             np.where(hw_bad, V_HW,
             np.where(~fits & oom, 1.0 + over,
             np.where(~fits, V_STRUCT,
             np.where(~finite, V_STRUCT, 1e-3 + np.minimum(graded, 0.999))))))
    return obj, feasible, row_v


def _out_of_memory(out: dict, rows: np.ndarray) -> np.ndarray:
    """Rows (within the mask) infeasible for lack of memory, by `infeasible_code` (dse.schema)."""
    from dse.schema import REASON_CODE
    return rows & (np.asarray(out["infeasible_code"]) == REASON_CODE["out_of_memory"])


def best_rows(st: Study, obj: np.ndarray, row_v: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row index, outer point) of the chosen mapping of every point with rows: least violation
    (feasible first), then lexicographic objectives (each as minimisation), then row order.

    Rows of a point are contiguous (`own` is sorted), so each criterion is a segment minimum
    (np.minimum.reduceat) that narrows the candidates; no sort."""
    n = len(own)
    starts = np.flatnonzero(np.r_[True, own[1:] != own[:-1]]) if n else np.zeros(0, np.int64)
    seg = np.cumsum(np.r_[False, own[1:] != own[:-1]]) if n else np.zeros(0, np.int64)
    cand = np.ones(n, bool)
    keys = [row_v] + [np.where(np.isfinite(obj[:, j]), obj[:, j] * (1.0 if s == "min" else -1.0), np.inf)
                      for j, s in enumerate(st.senses)]
    for key in keys:
        masked = np.where(cand, key, np.inf)
        best = np.minimum.reduceat(masked, starts) if n else masked
        cand &= masked == best[seg]
    rows = np.flatnonzero(cand)
    first = rows[np.r_[True, own[rows][1:] != own[rows][:-1]]] if len(rows) else rows
    return first, own[first]


def _scatter(arr, pts, B):
    a = np.asarray(arr, dtype=object) if isinstance(arr, pd.Categorical) else np.asarray(arr)
    if a.dtype.kind in "OUS":
        full = np.full(B, None, dtype=object)
    elif a.dtype == bool:
        full = np.zeros(B, bool)
    elif a.dtype.kind in "iu":
        full = np.zeros(B, a.dtype)
    else:
        full = np.full(B, np.nan, dtype=float)
    full[pts] = a
    return full


def _finish_rows(rows, violation, sizes, n_feasible) -> dict:
    rows["feasible"] = violation == 0
    rows["violation"] = violation.astype(float)
    rows["n_mappings"] = sizes.astype(np.int64)
    rows["n_feasible_mappings"] = n_feasible.astype(np.int64)
    if "fits" in rows:
        rows["fits"] = np.asarray(rows["fits"], dtype=bool)
    return rows


def evaluate_rows(st: Study, batch: dict, n: int) -> dict:
    """The workload's evaluator on all rows (dse.evaluate_training / evaluate_inference) plus
    the derived columns (time_to_train_*; cost columns when the evaluator lacks them)."""
    from dse import evaluate as dse
    with np.errstate(all="ignore"):
        if st.kind == "training":
            out = dict(dse.evaluate_training(batch))
            tps = np.asarray(out["tokens_per_s"], dtype=float)
            tok = np.broadcast_to(np.asarray(out.get("train_tokens", np.nan), dtype=float), (n,))
            out["time_to_train_s"] = tok / tps
            out["time_to_train_days"] = out["time_to_train_s"] / 86400.0
            if "cost_per_run_usd" not in out:  # older evaluator without the cost columns
                from dse.economics import workload_costs
                out.update(workload_costs(out, out["step_time_s"], out["tokens_per_step"], out["gpus"]))
        else:
            out = dict(dse.evaluate_inference(batch))
            if "cost_per_million_tokens_usd" not in out:
                from dse.economics import workload_costs
                batch_sz = np.asarray(out.get("batch", 1), dtype=float)
                osl = np.asarray(out.get("osl", 1), dtype=float)
                gpus = np.asarray(out.get("gpus", 1), dtype=float)
                out.update(workload_costs(out, out["e2e_latency_s"], batch_sz * osl, gpus))
            if "hw_fits" in out:
                out["fits"] = np.asarray(out["fits"], dtype=bool) & np.asarray(out["hw_fits"], dtype=bool)
    return out
