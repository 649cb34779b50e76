"""The `Space` class: a validated space enumerated as the mixed-radix product of its groups.

Rows of the space are the mixed-radix product of the groups (first group most significant;
within a group, nested-loop order of its axes in file order), so row `i` depends only on `i` and
`Space.chunk(start, stop)` only on start and stop.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse.errors import ConfigError
from dse.space.groups import GroupBuilder
from dse.space.spec import Ctx, SpaceSpec, catalog_names, parse_spec

DEFAULT_CHUNK_SIZE = 1 << 17


def canonical(raw: Mapping) -> dict:
    """Top-level keys sorted; nested order kept (axis order defines row order)."""
    return {k: raw[k] for k in sorted(raw, key=str)}


class Space:
    """A validated, enumerable search space. See the `dse.space` docstring for the API."""

    def __init__(self, spec: SpaceSpec, canonical: dict, source: str | None = None):
        self.spec = spec
        self.canonical = canonical
        self.source = source
        self.name = spec.name
        self.evaluator = spec.evaluator
        self.seed = spec.seed
        self.chunk_size = spec.chunk_size or DEFAULT_CHUNK_SIZE
        text = json.dumps(canonical, separators=(",", ":"), default=str)
        self.hash = hashlib.sha256(text.encode()).hexdigest()
        self._ctx = Ctx(source or f"space '{spec.name}'")
        self._build()

    # -- construction
    @classmethod
    def from_dict(cls, d: Mapping, name: str | None = None, source: str | None = None) -> "Space":
        """A Space from an in-memory mapping with the space-file schema (name optional if given)."""
        d = dict(d)
        if name is not None and "name" not in d:
            d["name"] = name
        spec = parse_spec(d, source or f"space '{d.get('name', name) or '?'}'", name)
        return cls(spec, canonical(d), source)

    def _constant(self, name: str, path: str):
        """A catalog constant (model dimension or system column) usable in expressions, or None."""
        fixed = self.spec.fixed
        try:
            if name in catalog_names("model") and isinstance(fixed.get("model"), str):
                from dse import catalog
                row = catalog.model(fixed["model"])
                if name in row.index and pd.notna(row[name]):
                    return row[name].item() if hasattr(row[name], "item") else row[name]
                if name == "head_dim":
                    return row["hidden"] / row["heads"]
            if name in catalog_names("hardware") and isinstance(fixed.get("system"), str):
                from dse import catalog
                row = catalog.system(fixed["system"])
                if name in row.index and pd.notna(row[name]):
                    return row[name].item() if hasattr(row[name], "item") else row[name]
        except ConfigError as exc:
            raise self._ctx.error("fixed", str(exc)) from None
        return None

    def _build(self) -> None:
        b = GroupBuilder(self.spec, self._ctx, self._constant).run()
        groups = sorted(b.groups, key=lambda g: g.pos)
        self._fixed = dict(self.spec.fixed)
        self._categories, self._kinds, self._lazy = b.categories, b.kinds, b.lazy
        self._groups = groups
        self._radices = np.array([g.n for g in groups], dtype=np.int64)
        self.size = int(math.prod(int(g.n) for g in groups)) if groups else 1
        self.exact = not self._lazy
        self._consts = b.consts
        self.columns = list(self.spec.fixed) + b.axis_names
        self.int_bounds = {}
        for k, v in self.spec.fixed.items():
            if self._kinds[k] == "int":
                self.int_bounds[k] = (int(v), int(v))
        for g in groups:
            for c in g.cols:
                if self._kinds[c] == "int" and g.n:
                    self.int_bounds[c] = (int(g.table[c].min()), int(g.table[c].max()))
        self.categories = dict(self._categories)
        for g in groups:  # compact tables: small integer codes travel and cache better
            for c in g.cols:
                if self._kinds[c] == "int" and g.n:
                    g.table[c] = g.table[c].astype(_small_int(*self.int_bounds[c]))
        self._group_of = {c: (gi, g) for gi, g in enumerate(groups) for c in g.cols}

    @property
    def constants(self) -> dict:
        """Fixed values and the catalog constants the expressions read (name -> scalar)."""
        return dict(self._consts)

    # -- enumeration
    def codes(self, start: int, stop: int) -> dict:
        """Rows start..stop before lazy constraints, string columns as integer codes into
        `Space.categories[column]` (fixed strings: code 0); numeric columns as in `chunk`."""
        start, stop = max(0, int(start)), min(int(stop), self.size)
        n = max(0, stop - start)
        idx = np.arange(start, start + n, dtype=np.int64)
        digits = [None] * len(self._groups)
        for gi in range(len(self._groups) - 1, -1, -1):
            r = self._radices[gi]
            digits[gi] = idx % r
            idx //= r
        out: dict = {}
        for k, v in self._fixed.items():
            dtype = np.int8 if isinstance(v, str) else bool if isinstance(v, bool) else \
                np.int64 if isinstance(v, int) else float
            out[k] = np.full(n, 0 if isinstance(v, str) else v, dtype=dtype)
        for ax in self.spec.axes:
            gi, g = self._group_of[ax.name]
            vals = g.table[ax.name][digits[gi]]
            out[ax.name] = vals.astype(np.int64) if self._kinds[ax.name] == "int" else vals
        return out

    def chunk(self, start: int, stop: int) -> dict:
        """Rows start..stop of the mixed-radix index (valid rows only), as a dict of columns."""
        out = self.codes(start, stop)
        for k, cats in self._categories.items():
            out[k] = pd.Categorical.from_codes(out[k], categories=cats)
        n = len(next(iter(out.values()))) if out else 0
        if self._lazy and n:
            env = dict(self._consts)
            for k, v in out.items():
                env[k] = np.asarray(v) if isinstance(v, pd.Categorical) else v
            keep = np.ones(n, bool)
            for ex in self._lazy:
                keep &= np.broadcast_to(np.asarray(ex(env), dtype=bool), (n,))
            if not keep.all():
                out = {k: v[keep] for k, v in out.items()}
        return out

    def n_chunks(self, chunk_size: int | None = None) -> int:
        cs = int(chunk_size or self.chunk_size)
        return -(-self.size // cs)

    def chunks(self, chunk_size: int | None = None):
        """(chunk_id, start, stop) for every chunk of the index."""
        cs = int(chunk_size or self.chunk_size)
        for i in range(self.n_chunks(cs)):
            yield i, i * cs, min((i + 1) * cs, self.size)

    def __reduce__(self):  # pickles as its canonical mapping: small, rebuilt once per process
        return (_rebuild, (self.canonical, self.source, self.hash))

    def __repr__(self) -> str:
        return (f"Space(name={self.name!r}, size={self.size:,}, columns={len(self.columns)}, "
                f"exact={self.exact}, hash={self.hash[:12]})")


_CACHE: dict = {}


def _rebuild(canonical, source, digest):
    space = _CACHE.get(digest)
    if space is None:
        space = Space(parse_spec(canonical, source or f"space '{canonical.get('name')}'"), canonical, source)
        _CACHE.clear()  # one space per worker process at a time is the common case
        _CACHE[digest] = space
    return space


def _small_int(lo: int, hi: int):
    """Smallest signed integer dtype holding [lo, hi]."""
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return np.dtype(dt)
    return np.dtype(np.int64)
