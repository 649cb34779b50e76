"""Enumeration of a space's axes into groups: small tables of valid rows, built once.

Axes that refer to each other (through derive, divisors_of or constraints) form a group; each
group is enumerated at load time into a table of its valid rows (valid by construction: only
splits that divide), independent axes are their own groups. A constraint linking groups whose
product would exceed `MAX_GROUP_ROWS` is kept aside (`lazy`) and applied per chunk instead.
"""
from __future__ import annotations

import math

import numpy as np

from dse.space.expr import Expr, eval_checked
from dse.space.spec import Ctx, SpaceSpec, catalog_names

MAX_GROUP_ROWS = 20_000_000  # larger products of linked axes fall back to per-chunk filtering


class Group:
    __slots__ = ("pos", "cols", "table", "n")

    def __init__(self, pos, cols, table, n):
        self.pos, self.cols, self.table, self.n = pos, cols, table, n


def divisors(n: int) -> np.ndarray:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return np.array(small + large[::-1], dtype=np.int64)


def _as_int_divisor_base(vals) -> tuple[np.ndarray, np.ndarray]:
    """(integer values, valid mask): positive and integral."""
    v = np.asarray(vals)
    if v.dtype == bool or v.dtype.kind not in "iuf":
        return np.zeros(v.shape, np.int64), np.zeros(v.shape, bool)
    if v.dtype.kind == "f":
        ok = np.isfinite(v) & (v == np.round(v)) & (v > 0)
        return np.where(ok, v, 1).astype(np.int64), ok
    return v.astype(np.int64), v > 0


def column_array(values: tuple):
    """Values of a list axis -> (array, categories or None). Strings become codes."""
    if isinstance(values[0], str):
        return np.arange(len(values), dtype=np.int32), list(values)
    if isinstance(values[0], bool):
        return np.array(values, dtype=bool), None
    if all(isinstance(x, int) for x in values):
        return np.array(values, dtype=np.int64), None
    return np.array(values, dtype=float), None


def kind_of(arr: np.ndarray, cats) -> str:
    if cats is not None:
        return "str"
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}[arr.dtype.kind]


class GroupBuilder:
    """Builds the groups of one space. `constant(name, path)` gives catalog constants (or None).

    After `run()`: groups, consts, categories, kinds (column -> int|float|bool|str), lazy.
    """

    def __init__(self, spec: SpaceSpec, ctx: Ctx, constant):
        self.spec, self.ctx, self.constant = spec, ctx, constant
        self.consts: dict = dict(spec.fixed)
        self.categories: dict[str, list] = {}
        self.kinds: dict[str, str] = {}
        for k, v in spec.fixed.items():
            self.kinds[k] = ("bool" if isinstance(v, bool) else "str" if isinstance(v, str)
                             else "int" if isinstance(v, int) else "float")
            if isinstance(v, str):
                self.categories[k] = [v]
        self.axis_names = [a.name for a in spec.axes]
        self.groups: list[Group] = []
        self.owner: dict[str, Group] = {}
        self.lazy: list[Expr] = []
        self.defined: set = set()
        self.pending: list = []

    # -- names and groups
    def resolve_names(self, expr: Expr, path: str, defined: set) -> None:
        ctx, consts = self.ctx, self.consts
        for nm in expr.names:
            if nm in consts or nm in defined:
                continue
            if nm in self.axis_names:
                raise ctx.error(path, f"refers to '{nm}', which is defined later under axes; "
                                      "axes are evaluated in file order, so move it earlier")
            c = self.constant(nm, path)
            if c is None:
                known = sorted(set(consts) | defined)
                raise ctx.error(path, f"unknown name '{nm}' in {expr.text!r}; known columns: "
                                      f"{', '.join(known) or '(none)'}"
                                      + ("; model/system dimensions need a fixed model/system"
                                         if nm in catalog_names() else ""))
            consts[nm] = c

    def merged(self, names: list[str], path: str | None) -> Group | None:
        """Merge the groups owning `names` into one (cross product); None if no varying name
        (or, with path None, if the product is too large to link)."""
        owner = self.owner
        gs = sorted({id(owner[n]): owner[n] for n in names if n in owner}.values(), key=lambda g: g.pos)
        if not gs:
            return None
        if len(gs) == 1:
            return gs[0]
        total = math.prod(g.n for g in gs)
        if total > MAX_GROUP_ROWS:
            return None if path is None else self.too_big(path, total)
        table, cols, reps = {}, [], total
        for g in gs:
            reps //= g.n
            tiles = total // (g.n * reps)
            for c in g.cols:
                table[c] = np.tile(np.repeat(g.table[c], reps), tiles)
            cols.extend(g.cols)
        new = Group(gs[0].pos, cols, table, total)
        for g in gs:
            self.groups.remove(g)
        self.groups.append(new)
        for c in cols:
            owner[c] = new
        return new

    def too_big(self, path, total):
        raise self.ctx.error(path, f"linked axes have {total:,} combinations (limit {MAX_GROUP_ROWS:,}); "
                                   "split the space or remove the link")

    def env_for(self, g: Group | None) -> dict:
        env = dict(self.consts)
        if g is not None:
            for c in g.cols:
                env[c] = (np.asarray(self.categories[c], dtype=object)[g.table[c]]
                          if c in self.categories else g.table[c])
        return env

    def filter_group(self, g: Group, keep, path: str, why: str) -> None:
        keep = np.broadcast_to(np.asarray(keep, dtype=bool), (g.n,))
        if not keep.all():
            for c in g.cols:
                g.table[c] = g.table[c][keep]
            g.n = int(keep.sum())
        if g.n == 0:
            raise self.ctx.error(path, f"the space is empty: {why}")

    def new_group(self, pos: int, name: str | None, col, n: int) -> Group:
        g = Group(pos, [name] if name else [], {name: col} if name else {}, n)
        self.groups.append(g)
        if name:
            self.owner[name] = g
        return g

    # -- the run
    def run(self) -> "GroupBuilder":
        constraints = [(i, Expr(c, self.ctx, f"constraints[{i}]")) for i, c in enumerate(self.spec.constraints)]
        every = set(self.axis_names)
        for i, ex in constraints:  # catalog constants and unknown names, early
            self.resolve_names(ex, f"constraints[{i}]", every)
        self.pending = list(constraints)
        self.apply_ready()  # constraints over fixed values only
        for pos, ax in enumerate(self.spec.axes):
            path = f"axes.{ax.name}.{ax.kind}"
            if ax.kind in ("values", "range", "pow2"):
                arr, cats = column_array(ax.values)
                if cats is not None:
                    self.categories[ax.name] = cats
                self.kinds[ax.name] = kind_of(arr, cats)
                self.new_group(pos, ax.name, arr, len(arr))
            else:
                exprs = [Expr(t, self.ctx, path) for t in ax.exprs]
                for ex in exprs:
                    self.resolve_names(ex, path, self.defined)
                varying = sorted({nm for ex in exprs for nm in ex.names if nm in self.owner})
                g = self.merged(varying, path)
                n = g.n if g is not None else 1
                env = self.env_for(g)
                vals = [np.broadcast_to(eval_checked(ex, env, self.ctx, path), (n,)) for ex in exprs]
                if ax.kind == "derive":
                    self.add_derived(pos, ax, g, vals[0], path)
                else:
                    self.add_divisors(pos, ax, g, vals, path)
            self.defined.add(ax.name)
            self.apply_ready()
        assert not self.pending, self.pending  # every name is fixed, a catalog constant or an axis
        return self

    def apply_ready(self) -> None:
        """Apply the constraints whose names are all known by now."""
        for item in list(self.pending):
            i, ex = item
            path = f"constraints[{i}]"
            if not all(nm in self.consts or nm in self.defined for nm in ex.names):
                continue
            self.pending.remove(item)
            varying = [nm for nm in ex.names if nm in self.owner]
            g = self.merged(varying, None) if varying else None
            if varying and g is None:       # too many combinations to link: filter per chunk
                self.lazy.append(ex)
                continue
            val = eval_checked(ex, self.env_for(g), self.ctx, path)
            if g is None:
                if not bool(np.all(val)):
                    raise self.ctx.error(path, f"the space is empty: {ex.text!r} is false for the fixed values")
                continue
            self.filter_group(g, val, path, f"no row satisfies {ex.text!r}")

    def add_derived(self, pos: int, ax, g: Group | None, value, path: str) -> None:
        v = np.asarray(value)
        n = len(v)
        if v.dtype.kind not in "biuf":
            raise self.ctx.error(path, f"{ax.exprs[0]!r} must give numbers or booleans")
        if v.dtype == bool:
            col, keep = v, np.ones(n, bool)
        elif ax.real:
            col = v.astype(float)
            keep = np.isfinite(col)
        elif v.dtype.kind == "f":
            keep = np.isfinite(v) & (v == np.round(v))
            col = np.where(keep, v, 0).astype(np.int64)
        else:
            col, keep = v.astype(np.int64), np.ones(n, bool)
        self.kinds[ax.name] = kind_of(col, None)
        if g is None:
            if not keep.all():
                raise self.ctx.error(path, f"the space is empty: {ax.exprs[0]!r} is not a whole number")
            g = self.new_group(pos, None, None, 1)
        g.table[ax.name] = col
        g.cols.append(ax.name)
        self.owner[ax.name] = g
        self.filter_group(g, keep, path, f"{ax.exprs[0]!r} never gives a whole number")

    def add_divisors(self, pos: int, ax, g: Group | None, vals: list, path: str) -> None:
        """divisors_of: per-row divisors of the gcd of the items."""
        base, ok = _as_int_divisor_base(vals[0])
        for extra in vals[1:]:
            b2, ok2 = _as_int_divisor_base(extra)
            base, ok = np.gcd(base, b2), ok & ok2
        self.kinds[ax.name] = "int"
        if g is None:
            if not ok.all():
                raise self.ctx.error(path, "the space is empty: not a positive whole number")
            d = divisors(int(base[0]))
            self.new_group(pos, ax.name, d, len(d))
            return
        base = np.where(ok, base, 0)
        uniq, inv = np.unique(base, return_inverse=True)
        divs = [divisors(int(u)) if u > 0 else np.zeros(0, np.int64) for u in uniq]
        lens = np.array([len(d) for d in divs], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        flat = np.concatenate(divs) if divs else np.zeros(0, np.int64)
        counts = lens[inv.reshape(-1)]
        total = int(counts.sum())
        if total > MAX_GROUP_ROWS:
            self.too_big(path, total)
        parent = np.repeat(np.arange(g.n), counts)
        within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        col = flat[starts[inv.reshape(-1)][parent] + within]
        for c in g.cols:
            g.table[c] = g.table[c][parent]
        g.table[ax.name] = col
        g.cols.append(ax.name)
        g.n = total
        if total == 0:
            raise self.ctx.error(path, "the space is empty: no row has a positive whole number to divide")
        self.owner[ax.name] = g
