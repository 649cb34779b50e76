"""Non-dominated filtering and hypervolume, vectorized and chunk-friendly.

    pareto_mask(values, senses=None) -> bool mask of the non-dominated rows of an (n, k) array
    pareto_front(values, senses=None) -> their indices (ascending)
    ParetoFront(senses)             streaming accumulator: .add(values, ids) per chunk, then
                                    .values / .ids (the front of everything added); fronts of
                                    chunks merge exactly: front(A u B) = front(front(A) u front(B))
    merge_fronts([(values, ids), ...], senses) -> (values, ids)
    hypervolume(points, ref, senses=None) -> float, for 2 or 3 objectives
    parse_objectives(["step_time_s:min", "tokens_per_s:max"]) -> (names, senses)

`senses` is one of "min"/"max" per objective (default all "min"). A point dominates another if it
is no worse in every objective and better in one; equal points do not dominate each other (both
stay on the front). Rows with NaN in any objective are never on the front.
"""
from __future__ import annotations

import numpy as np

from dse.errors import ConfigError

_TILE = 1 << 22  # elements per pairwise comparison tile (bounded memory)


def parse_objectives(specs) -> tuple[list[str], list[str]]:
    """["col:min", "col2:max"] -> (["col", "col2"], ["min", "max"]). ConfigError on bad input."""
    names, senses = [], []
    for s in specs or []:
        col, _, sense = str(s).rpartition(":")
        if not col:
            col, sense = sense, "min"
        sense = sense.lower()
        if sense not in ("min", "max") or not col:
            raise ConfigError(f"--objective {s}: expected column:min or column:max")
        names.append(col)
        senses.append(sense)
    if not names:
        raise ConfigError("--objective: give at least one, e.g. --objective step_time_s:min")
    if len(set(names)) != len(names):
        raise ConfigError("--objective: each column at most once")
    return names, senses


def _as_min(values, senses) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    if senses is None:
        return v.copy()
    if len(senses) != v.shape[1]:
        raise ConfigError(f"objectives: {v.shape[1]} columns but {len(senses)} senses")
    sign = np.array([1.0 if s == "min" else -1.0 if s == "max" else np.nan for s in senses])
    if np.isnan(sign).any():
        raise ConfigError("objectives: sense must be 'min' or 'max'")
    return v * sign


def _dominated_by(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each row of a (minimisation): is some row of b strictly better? Tiled over b."""
    out = np.zeros(len(a), dtype=bool)
    if len(a) == 0 or len(b) == 0:
        return out
    k = a.shape[1]
    step = max(1, _TILE // max(1, len(a) * k))
    for s in range(0, len(b), step):
        bb = b[s:s + step]
        le = (bb[None, :, :] <= a[:, None, :]).all(axis=2)
        lt = (bb[None, :, :] < a[:, None, :]).any(axis=2)
        out |= (le & lt).any(axis=1)
    return out


def _mask_2d(v: np.ndarray) -> np.ndarray:
    n = len(v)
    order = np.lexsort((v[:, 1], v[:, 0]))  # by f0, then f1
    s = v[order]
    # first of each run of identical points; duplicates share the verdict of their first
    new = np.ones(n, dtype=bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    # a unique point is dominated iff an earlier (lexicographically smaller) point has f1 <= its f1
    prev_min = np.empty(n)
    prev_min[0] = np.inf
    prev_min[1:] = np.minimum.accumulate(s[:-1, 1])
    # among earlier points exclude its own duplicates: use the running min up to its first copy
    dominated_sorted = prev_min[first] <= s[:, 1]
    mask = np.empty(n, dtype=bool)
    mask[order] = ~dominated_sorted
    return mask


def _mask_nd(v: np.ndarray, block: int = 2048) -> np.ndarray:
    n = len(v)
    order = np.argsort(v.sum(axis=1), kind="stable")  # likely-good points first prune the rest
    front_idx = np.zeros(0, dtype=np.int64)
    for s in range(0, n, block):
        idx = order[s:s + block]
        x = v[idx]
        keep = ~_dominated_by(x, v[front_idx])
        idx, x = idx[keep], x[keep]
        keep = ~_dominated_by(x, x)
        idx, x = idx[keep], x[keep]
        if len(idx):
            front_idx = front_idx[~_dominated_by(v[front_idx], x)]
            front_idx = np.concatenate([front_idx, idx])
    mask = np.zeros(n, dtype=bool)
    mask[front_idx] = True
    return mask


def pareto_mask(values, senses=None) -> np.ndarray:
    """Boolean mask of the non-dominated rows of `values` (n rows, k objectives)."""
    v = _as_min(values, senses)
    n = len(v)
    mask = np.zeros(n, dtype=bool)
    finite = ~np.isnan(v).any(axis=1)
    if not finite.any():
        return mask
    idx = np.nonzero(finite)[0]
    w = v[idx]
    if w.shape[1] == 1:
        sub = w[:, 0] == w[:, 0].min()
    elif w.shape[1] == 2:
        sub = _mask_2d(w)
    else:
        sub = _mask_nd(w)
    mask[idx[sub]] = True
    return mask


def pareto_front(values, senses=None) -> np.ndarray:
    """Indices of the non-dominated rows, ascending."""
    return np.nonzero(pareto_mask(values, senses))[0]


def merge_fronts(fronts, senses=None) -> tuple[np.ndarray, np.ndarray]:
    """Front of the union of several (values, ids) fronts (or any point sets)."""
    vals = [np.asarray(f[0], dtype=float).reshape(len(f[1]), -1) for f in fronts if len(f[1])]
    ids = [np.asarray(f[1]) for f in fronts if len(f[1])]
    if not vals:
        return np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    v, i = np.concatenate(vals), np.concatenate(ids)
    m = pareto_mask(v, senses)
    return v[m], i[m]


class ParetoFront:
    """Streaming front: add chunks of (values, ids); memory stays O(front + chunk)."""

    def __init__(self, senses):
        self.senses = list(senses)
        self.values = np.zeros((0, len(self.senses)))
        self.ids = None

    def add(self, values, ids) -> None:
        v = np.asarray(values, dtype=float).reshape(-1, len(self.senses))
        ids = np.asarray(ids)
        m = pareto_mask(v, self.senses)
        v, ids = v[m], ids[m]
        if self.ids is None:
            self.values, self.ids = v, ids
            return
        self.values, self.ids = merge_fronts([(self.values, self.ids), (v, ids)], self.senses)

    def __len__(self) -> int:
        return 0 if self.ids is None else len(self.ids)


def hypervolume(points, ref, senses=None) -> float:
    """Hypervolume dominated by `points` and bounded by the reference point `ref` (2 or 3 objectives).

    With senses, "max" objectives are negated first (and so is their reference coordinate), so
    `ref` is given in the objectives' own units and must be worse than every point of interest.
    Points not strictly better than `ref` in every objective contribute nothing.
    """
    p = _as_min(points, senses)
    r = _as_min(np.asarray(ref, dtype=float)[None, :], senses)[0]
    k = p.shape[1]
    if k not in (2, 3) or len(r) != k:
        raise ConfigError(f"hypervolume: supports 2 or 3 objectives with a matching reference point (got {k})")
    p = p[~np.isnan(p).any(axis=1)]
    p = p[(p < r).all(axis=1)]
    if len(p) == 0:
        return 0.0
    p = p[pareto_mask(p)]
    if k == 2:
        return _hv2(p, r)
    # 3-D: sweep over the third objective; each slab is a 2-D hypervolume
    order = np.argsort(p[:, 2], kind="stable")
    p = p[order]
    zs = np.append(p[:, 2], r[2])
    total = 0.0
    for i in range(len(p)):
        depth = zs[i + 1] - zs[i]
        if depth > 0:
            sub = p[: i + 1, :2]
            total += _hv2(sub[pareto_mask(sub)], r[:2]) * depth
    return float(total)


def _hv2(p: np.ndarray, r: np.ndarray) -> float:
    p = p[np.argsort(p[:, 0], kind="stable")]
    # after sorting a 2-D front by f0 ascending, f1 is non-increasing
    f1 = np.minimum.accumulate(p[:, 1])
    widths = np.diff(np.append(p[:, 0], r[0]))
    return float(np.sum(widths * (r[1] - f1)))
