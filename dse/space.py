"""Search spaces: a YAML file -> validated `Space` -> chunks of design points (dict of columns).

Space file schema (YAML; unknown keys anywhere are a `ConfigError` naming file, key path and
the allowed keys)::

    name: gpt3-175b-a100-4096      # results go to results/<name>/
    description: free text          # optional
    evaluator: training             # training (default) | inference | package.module:function
    seed: 0                         # recorded in the run manifest
    chunk_size: 131072              # optional: rows per chunk (one Parquet part file each)
    fixed:                          # scalar columns, the same on every row
      model: gpt3-175b
      system: a100-80gb
      gpus: 4096
    axes:                           # ordered: an axis may refer to fixed values and EARLIER axes
      tp: {divisors_of: [gpus, heads]}       # divisors of the gcd of the items
      pp: {divisors_of: layers}              # `heads`, `layers`: catalog dimensions of the fixed model
      cp: [1, 2, 4, 8]                       # a list, same as {values: [...]}
      dp: {derive: "gpus / (tp * pp * cp)"}  # rows where a split does not divide are dropped
      global_batch: {pow2: [256, 2048]}      # powers of two, inclusive
      micro_batch: {divisors_of: "global_batch // dp"}   # per-row divisors of an expression
      zero: {range: [0, 3]}                  # inclusive; optional step: k
      layers_per_stage: {derive: "layers / pp", real: true}  # real: a float column, no integrality
    constraints:                    # boolean expressions over columns; rows where False are dropped
      - "global_batch % dp == 0"
      - "tp > 1 or zero < 3"

Expressions (derive, divisors_of, constraints) are evaluated vectorized over numpy arrays with
a restricted grammar: numbers, strings, column names, + - * / // % **, comparisons (chains
allowed), and/or/not (also & | ~), and the functions min, max, abs, floor, ceil, round, sqrt,
log, log2, log10, exp, where, gcd, lcm, clip, float, int, is_pow2. Besides fixed values and
axes, a name may be a model dimension (`layers`, `heads`, `hidden`, `seq_len`, ...) of a fixed
catalog `model`, or a per-GPU hardware column (`scaleup_domain`, ...) of a fixed `system`;
such catalog constants are used in expressions but not emitted as columns.

Enumeration. Axes that refer to each other (through derive, divisors_of or constraints) form a
group; each group is enumerated once at load time into a small table of its valid rows (valid
by construction: only splits that divide), and independent axes are their own groups. Rows of
the space are the mixed-radix product of the groups (first group most significant; within a
group, nested-loop order of its axes in file order), so row `i` depends only on `i` and
`Space.chunk(start, stop)` only on start and stop. A constraint linking groups whose product
would exceed `MAX_GROUP_ROWS` is applied lazily, per chunk, instead (then chunks may hold fewer
than stop - start rows; `Space.exact` is False).

Public API (stable; `dse.study` builds inner mapping spaces with it):
    load_space(path_or_mapping, name=None) -> Space
    Space.from_dict(mapping, name=None) -> Space
    Space.name, .hash (sha256 of the canonical content: the parsed file as JSON, top-level
        keys sorted, axis order kept; comments and layout do not count), .size (length of the mixed-radix
        index; the row count when .exact), .exact, .columns (ordered output columns),
        .evaluator, .seed, .chunk_size, .source (file path or None), .spec (the validated
        SpaceSpec), .canonical (the canonical mapping that was hashed)
    Space.chunk(start, stop) -> dict[str, array]: numeric columns are numpy arrays (int64,
        float64 or bool); string columns are pandas.Categorical with the axis' categories
        (accepted by dse.evaluate_*; np.asarray gives strings)
    Space.chunks(chunk_size=None) -> iterator of (chunk_id, start, stop)
    Space.n_chunks(chunk_size=None), Space.int_bounds (column -> (min, max)),
    Space.categories (column -> list of strings)
"""
from __future__ import annotations

import ast
import hashlib
import json
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dse.errors import ConfigError

DEFAULT_CHUNK_SIZE = 1 << 17
MAX_GROUP_ROWS = 20_000_000  # larger products of linked axes fall back to per-chunk filtering

TOP_KEYS = ("name", "description", "evaluator", "seed", "chunk_size", "fixed", "axes", "constraints")
AXIS_KINDS = ("values", "range", "pow2", "divisors_of", "derive")
AXIS_EXTRA = {"values": (), "range": ("step",), "pow2": (), "divisors_of": (), "derive": ("real",)}
EVALUATORS = ("training", "inference")


# ----------------------------------------------------------------------------- validated models

@dataclass(frozen=True)
class AxisSpec:
    name: str
    kind: str                       # values | range | pow2 | divisors_of | derive
    values: tuple = ()              # for values / range / pow2 (expanded)
    exprs: tuple = ()               # for divisors_of (items) and derive (one)
    real: bool = False              # derive: keep a float column (no integrality filter)


@dataclass(frozen=True)
class SpaceSpec:
    name: str
    evaluator: str = "training"
    seed: int = 0
    chunk_size: int | None = None
    description: str = ""
    fixed: dict = field(default_factory=dict)
    axes: tuple = ()                # of AxisSpec, in file order
    constraints: tuple = ()         # of str


class _Ctx:
    """Where we are in the file, for one-line error messages."""

    def __init__(self, source: str):
        self.source = source

    def error(self, path: str, message: str) -> ConfigError:
        where = f"{self.source}: {path}: " if path else f"{self.source}: "
        return ConfigError(where + message)


def _check_keys(ctx: _Ctx, path: str, mapping: Mapping, allowed) -> None:
    for key in mapping:
        if key not in allowed:
            close = [a for a in allowed if _similar(str(key), a)]
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            where = f"{path}.{key}" if path else str(key)
            raise ctx.error(where, f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}")


def _similar(a: str, b: str) -> bool:
    import difflib
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= 0.7


def _scalar_ok(v) -> bool:
    return isinstance(v, (bool, int, float, str)) and not (isinstance(v, float) and math.isnan(v))


def _int(ctx, path, v, what="an integer") -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ctx.error(path, f"expected {what}, got {v!r}")
    return int(v)


def _parse_axis(ctx: _Ctx, name: str, raw) -> AxisSpec:
    path = f"axes.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise ctx.error(path, "axis names must be identifiers (letters, digits, _)")
    if isinstance(raw, (list, tuple)):
        raw = {"values": list(raw)}
    elif _scalar_ok(raw):
        raw = {"values": [raw]}
    if not isinstance(raw, Mapping):
        raise ctx.error(path, f"expected a list of values or a mapping with one of: {', '.join(AXIS_KINDS)}")
    kinds = [k for k in raw if k in AXIS_KINDS]
    if len(kinds) != 1:
        if not kinds:
            _check_keys(ctx, path, raw, AXIS_KINDS)
            raise ctx.error(path, f"give exactly one of: {', '.join(AXIS_KINDS)}")
        raise ctx.error(path, f"give exactly one of {', '.join(AXIS_KINDS)} (got {', '.join(kinds)})")
    kind = kinds[0]
    _check_keys(ctx, path, raw, (kind,) + AXIS_EXTRA[kind])
    v = raw[kind]
    kpath = f"{path}.{kind}"
    if kind == "values":
        if not isinstance(v, (list, tuple)):
            raise ctx.error(kpath, "expected a list of values")
        if not v:
            raise ctx.error(kpath, "the list is empty, so the space is empty; give at least one value")
        for x in v:
            if not _scalar_ok(x):
                raise ctx.error(kpath, f"values must be numbers, strings or booleans, got {x!r}")
        types = {("bool" if isinstance(x, bool) else "str" if isinstance(x, str) else "num") for x in v}
        if len(types) > 1:
            raise ctx.error(kpath, f"mixes {' and '.join(sorted(types))} values; use one type per axis")
        if len(set(v)) != len(v):
            raise ctx.error(kpath, "repeats a value; list each value once")
        return AxisSpec(name, "values", values=tuple(v))
    if kind == "range":
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise ctx.error(kpath, "expected [lo, hi] (inclusive)")
        lo, hi = _int(ctx, kpath, v[0]), _int(ctx, kpath, v[1])
        step = _int(ctx, f"{path}.step", raw.get("step", 1))
        if step <= 0:
            raise ctx.error(f"{path}.step", "must be a positive integer")
        vals = tuple(range(lo, hi + 1, step))
        if not vals:
            raise ctx.error(kpath, f"range [{lo}, {hi}] is empty, so the space is empty; use lo <= hi")
        return AxisSpec(name, "range", values=vals)
    if kind == "pow2":
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise ctx.error(kpath, "expected [lo, hi] (inclusive, positive)")
        lo, hi = _int(ctx, kpath, v[0]), _int(ctx, kpath, v[1])
        if lo <= 0:
            raise ctx.error(kpath, "bounds must be positive")
        vals = tuple(1 << k for k in range(0, 63) if lo <= (1 << k) <= hi)
        if not vals:
            raise ctx.error(kpath, f"no power of two in [{lo}, {hi}], so the space is empty")
        return AxisSpec(name, "pow2", values=vals)
    if kind == "divisors_of":
        items = v if isinstance(v, (list, tuple)) else [v]
        if not items:
            raise ctx.error(kpath, "give a number, a column name or an expression")
        exprs = []
        for x in items:
            if isinstance(x, bool) or not isinstance(x, (int, str)):
                raise ctx.error(kpath, f"expected an integer, a column name or an expression, got {x!r}")
            exprs.append(str(x))
        return AxisSpec(name, "divisors_of", exprs=tuple(exprs))
    # derive
    if not isinstance(v, (str, int, float)) or isinstance(v, bool):
        raise ctx.error(kpath, "expected an expression string, e.g. \"gpus / (tp * pp)\"")
    real = raw.get("real", False)
    if not isinstance(real, bool):
        raise ctx.error(f"{path}.real", "expected true or false")
    return AxisSpec(name, "derive", exprs=(str(v),), real=real)


def parse_constraints(ctx: _Ctx, raw, example: str = "'tp * pp <= 64'") -> list[str]:
    """The `constraints:` entry of a space or study file: one expression or a list of them."""
    cons = raw or []
    if isinstance(cons, str):
        cons = [cons]
    if not isinstance(cons, (list, tuple)):
        raise ctx.error("constraints", f"expected a list of expressions such as {example}")
    for i, c in enumerate(cons):
        if not isinstance(c, str):
            raise ctx.error(f"constraints[{i}]", f"expected an expression string, got {c!r}")
    return list(cons)


def parse_spec(raw, source: str, name: str | None = None) -> SpaceSpec:
    """Validate a parsed space mapping into a SpaceSpec (ConfigError on any problem)."""
    ctx = _Ctx(source)
    if not isinstance(raw, Mapping):
        raise ctx.error("", "a space file must be a mapping with keys: " + ", ".join(TOP_KEYS))
    _check_keys(ctx, "", raw, TOP_KEYS)
    nm = raw.get("name", name)
    if nm is None:
        if source.endswith((".yaml", ".yml")):
            nm = Path(source).stem
        else:
            raise ctx.error("name", "missing; give the space a name")
    if not isinstance(nm, str) or not nm or "/" in nm or nm.startswith("."):
        raise ctx.error("name", f"expected a plain name (no '/'), got {nm!r}")
    ev = raw.get("evaluator", "training")
    if not isinstance(ev, str) or (ev not in EVALUATORS and ":" not in ev):
        raise ctx.error("evaluator", f"unknown evaluator {ev!r}; use training, inference or package.module:function")
    seed = _int(ctx, "seed", raw.get("seed", 0))
    cs = raw.get("chunk_size")
    if cs is not None:
        cs = _int(ctx, "chunk_size", cs)
        if cs <= 0:
            raise ctx.error("chunk_size", "must be a positive integer")
    desc = raw.get("description", "") or ""
    fixed_raw = raw.get("fixed") or {}
    if not isinstance(fixed_raw, Mapping):
        raise ctx.error("fixed", "expected a mapping of column: value")
    fixed = {}
    for k, v in fixed_raw.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ctx.error(f"fixed.{k}", "column names must be identifiers (letters, digits, _)")
        if not _scalar_ok(v):
            raise ctx.error(f"fixed.{k}", f"must be a single number, string or boolean (got {v!r}); put lists under axes")
        fixed[k] = v
    axes_raw = raw.get("axes") or {}
    if not isinstance(axes_raw, Mapping):
        raise ctx.error("axes", "expected an ordered mapping of column: axis")
    axes = []
    for k, v in axes_raw.items():
        if k in fixed:
            raise ctx.error(f"axes.{k}", f"'{k}' is also under fixed; keep it in one place")
        axes.append(_parse_axis(ctx, k, v))
    cons_raw = parse_constraints(ctx, raw.get("constraints"))
    if not fixed and not axes:
        raise ctx.error("axes", "the space is empty; give fixed columns and/or axes")
    return SpaceSpec(name=nm, evaluator=ev, seed=seed, chunk_size=cs, description=str(desc),
                     fixed=fixed, axes=tuple(axes), constraints=tuple(cons_raw))


# ----------------------------------------------------------------------------- expressions

def _is_pow2(x):
    x = np.asarray(x)
    xi = x.astype(np.int64)
    return (x > 0) & (xi == x) & ((xi & (xi - 1)) == 0)


FUNCS = {
    "min": np.minimum, "max": np.maximum, "minimum": np.minimum, "maximum": np.maximum,
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "sqrt": np.sqrt,
    "log": np.log, "log2": np.log2, "log10": np.log10, "exp": np.exp, "where": np.where,
    "gcd": lambda a, b: np.gcd(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)),
    "lcm": lambda a, b: np.lcm(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)),
    "clip": np.clip, "float": lambda a: np.asarray(a, dtype=float),
    "int": lambda a: np.trunc(a).astype(np.int64), "is_pow2": _is_pow2,
}
CONSTS = {"true": True, "false": False, "inf": math.inf, "pi": math.pi}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}


class Expr:
    """A parsed, whitelisted expression; `names` are the columns it reads."""

    def __init__(self, text: str, ctx: _Ctx, path: str):
        self.text = text
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ctx.error(path, f"cannot parse expression {text!r} ({exc.msg})") from None
        self.names: list[str] = []
        self._check(tree.body, ctx, path)
        self.tree = tree.body

    def _check(self, node, ctx, path):
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bool)):
                raise ctx.error(path, f"unsupported constant {node.value!r} in {self.text!r}")
        elif isinstance(node, ast.Name):
            if node.id not in CONSTS and node.id not in self.names:
                self.names.append(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            self._check(node.left, ctx, path)
            self._check(node.right, ctx, path)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not, ast.Invert)):
            self._check(node.operand, ctx, path)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self._check(v, ctx, path)
        elif isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            self._check(node.left, ctx, path)
            for c in node.comparators:
                self._check(c, ctx, path)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCS \
                and not node.keywords:
            for a in node.args:
                self._check(a, ctx, path)
        elif isinstance(node, ast.IfExp):
            for n in (node.test, node.body, node.orelse):
                self._check(n, ctx, path)
        else:
            what = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                else type(node).__name__
            raise ctx.error(path, f"'{what}' is not allowed in {self.text!r}; use arithmetic, "
                                  f"comparisons, and/or/not and {', '.join(sorted(FUNCS))}")

    def __call__(self, env: Mapping):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._eval(self.tree, env)

    def _eval(self, node, env):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return CONSTS[node.id] if node.id in CONSTS else env[node.id]
        if isinstance(node, ast.BinOp):
            a, b = self._eval(node.left, env), self._eval(node.right, env)
            if isinstance(node.op, ast.Div):
                return np.true_divide(a, b)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)):  # integer semantics, 0 divisor -> invalid
                a, b = np.asarray(a), np.asarray(b)
                bad = b == 0
                if np.any(bad):
                    b = np.where(bad, 1, b)
                    r = _BINOPS[type(node.op)](a, b)
                    return np.where(bad, -1 if r.dtype.kind in "iu" else np.nan, r)
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp):
            v = self._eval(node.operand, env)
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
            if isinstance(node.op, ast.Not):
                return np.logical_not(v)
            return np.logical_not(v) if np.asarray(v).dtype == bool else ~np.asarray(v)
        if isinstance(node, ast.BoolOp):
            f = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            out = self._eval(node.values[0], env)
            for v in node.values[1:]:
                out = f(out, self._eval(v, env))
            return out
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            out = True
            for op, comp in zip(node.ops, node.comparators):
                right = self._eval(comp, env)
                out = np.logical_and(out, _CMPOPS[type(op)](left, right))
                left = right
            return out
        if isinstance(node, ast.IfExp):
            return np.where(self._eval(node.test, env), self._eval(node.body, env), self._eval(node.orelse, env))
        return FUNCS[node.func.id](*[self._eval(a, env) for a in node.args])


# ----------------------------------------------------------------------------- enumeration

def _divisors(n: int) -> np.ndarray:
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


class _Group:
    __slots__ = ("pos", "cols", "table", "n")

    def __init__(self, pos, cols, table, n):
        self.pos, self.cols, self.table, self.n = pos, cols, table, n


def _column_array(values: tuple):
    """Values of a list axis -> (array, categories or None). Strings become codes."""
    if isinstance(values[0], str):
        return np.arange(len(values), dtype=np.int32), list(values)
    if isinstance(values[0], bool):
        return np.array(values, dtype=bool), None
    if all(isinstance(x, int) for x in values):
        return np.array(values, dtype=np.int64), None
    return np.array(values, dtype=float), None


class Space:
    """A validated, enumerable search space. See the module docstring for the API."""

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
        self._ctx = _Ctx(source or f"space '{spec.name}'")
        self._build()

    # -- construction
    @classmethod
    def from_dict(cls, d: Mapping, name: str | None = None, source: str | None = None) -> "Space":
        """A Space from an in-memory mapping with the space-file schema (name optional if given)."""
        d = dict(d)
        if name is not None and "name" not in d:
            d["name"] = name
        spec = parse_spec(d, source or f"space '{d.get('name', name) or '?'}'", name)
        return cls(spec, _canonical(d), source)

    def _constant(self, name: str, path: str):
        """A catalog constant (model dimension or system column) usable in expressions, or None."""
        from dse import columns as C
        fixed = self.spec.fixed
        try:
            if name in C.MODEL_COLUMNS and isinstance(fixed.get("model"), str):
                from dse import catalog
                row = catalog.model(fixed["model"])
                if name in row.index and pd.notna(row[name]):
                    return row[name].item() if hasattr(row[name], "item") else row[name]
                if name == "head_dim":
                    return row["hidden"] / row["heads"]
            if name in C.HARDWARE_COLUMNS and isinstance(fixed.get("system"), str):
                from dse import catalog
                row = catalog.system(fixed["system"])
                if name in row.index and pd.notna(row[name]):
                    return row[name].item() if hasattr(row[name], "item") else row[name]
        except ConfigError as exc:
            raise self._ctx.error("fixed", str(exc)) from None
        return None

    def _build(self) -> None:
        spec, ctx = self.spec, self._ctx
        self._fixed = dict(spec.fixed)
        consts: dict = {k: v for k, v in spec.fixed.items()}
        self._categories: dict[str, list] = {}
        self._kinds: dict[str, str] = {}        # column -> 'int' | 'float' | 'bool' | 'str'
        for k, v in spec.fixed.items():
            self._kinds[k] = ("bool" if isinstance(v, bool) else "str" if isinstance(v, str)
                              else "int" if isinstance(v, int) else "float")
            if isinstance(v, str):
                self._categories[k] = [v]
        axis_names = [a.name for a in spec.axes]
        groups: list[_Group] = []
        owner: dict[str, _Group] = {}

        def resolve_names(expr: Expr, path: str, defined: set):
            for nm in expr.names:
                if nm in consts or nm in defined:
                    continue
                if nm in axis_names:
                    raise ctx.error(path, f"refers to '{nm}', which is defined later under axes; "
                                          "axes are evaluated in file order, so move it earlier")
                c = self._constant(nm, path)
                if c is None:
                    known = sorted(set(consts) | defined)
                    raise ctx.error(path, f"unknown name '{nm}' in {expr.text!r}; known columns: "
                                          f"{', '.join(known) or '(none)'}"
                                          + ("; model/system dimensions need a fixed model/system"
                                             if nm in _catalog_names() else ""))
                consts[nm] = c

        def merged(names: list[str], path: str) -> _Group | None:
            """Merge the groups owning `names` into one (cross product); None if no varying name."""
            gs = sorted({id(owner[n]): owner[n] for n in names if n in owner}.values(), key=lambda g: g.pos)
            if not gs:
                return None
            if len(gs) == 1:
                return gs[0]
            total = math.prod(g.n for g in gs)
            if total > MAX_GROUP_ROWS:
                return None if path is None else _too_big(path, total)
            table, cols, reps = {}, [], total
            for g in gs:
                reps //= g.n
                tiles = total // (g.n * reps)
                for c in g.cols:
                    table[c] = np.tile(np.repeat(g.table[c], reps), tiles)
                cols.extend(g.cols)
            new = _Group(gs[0].pos, cols, table, total)
            for g in gs:
                groups.remove(g)
            groups.append(new)
            for c in cols:
                owner[c] = new
            return new

        def _too_big(path, total):
            raise ctx.error(path, f"linked axes have {total:,} combinations (limit {MAX_GROUP_ROWS:,}); "
                                  "split the space or remove the link")

        def env_for(g: _Group | None) -> dict:
            env = dict(consts)
            if g is not None:
                for c in g.cols:
                    env[c] = self._decode(c, g.table[c])
            return env

        def filter_group(g: _Group, keep: np.ndarray, path: str, why: str):
            keep = np.broadcast_to(np.asarray(keep, dtype=bool), (g.n,))
            if not keep.all():
                for c in g.cols:
                    g.table[c] = g.table[c][keep]
                g.n = int(keep.sum())
            if g.n == 0:
                raise ctx.error(path, f"the space is empty: {why}")

        constraints = [(i, Expr(c, ctx, f"constraints[{i}]")) for i, c in enumerate(spec.constraints)]
        every = set(axis_names)
        for i, ex in constraints:  # catalog constants and unknown names, early
            resolve_names(ex, f"constraints[{i}]", every)
        pending = list(constraints)
        self._lazy: list[Expr] = []
        defined: set = set()

        def apply_ready():
            for item in list(pending):
                i, ex = item
                path = f"constraints[{i}]"
                if not all(nm in consts or nm in defined for nm in ex.names):
                    continue
                pending.remove(item)
                varying = [nm for nm in ex.names if nm in owner]
                g = merged(varying, None) if varying else None
                if varying and g is None:       # too many combinations to link: filter per chunk
                    self._lazy.append(ex)
                    continue
                val = _eval_checked(ex, env_for(g), ctx, path)
                if g is None:
                    if not bool(np.all(val)):
                        raise ctx.error(path, f"the space is empty: {ex.text!r} is false for the fixed values")
                    continue
                filter_group(g, val, path, f"no row satisfies {ex.text!r}")

        apply_ready()  # constraints over fixed values only
        for pos, ax in enumerate(spec.axes):
            path = f"axes.{ax.name}.{ax.kind}"
            if ax.kind in ("values", "range", "pow2"):
                arr, cats = _column_array(ax.values)
                if cats is not None:
                    self._categories[ax.name] = cats
                self._kinds[ax.name] = _kind_of(arr, cats)
                g = _Group(pos, [ax.name], {ax.name: arr}, len(arr))
                groups.append(g)
                owner[ax.name] = g
            else:
                exprs = [Expr(t, ctx, path) for t in ax.exprs]
                for ex in exprs:
                    resolve_names(ex, path, defined)
                varying = sorted({nm for ex in exprs for nm in ex.names if nm in owner})
                g = merged(varying, path)
                env = env_for(g)
                n = g.n if g is not None else 1
                vals = [np.broadcast_to(_eval_checked(ex, env, ctx, path), (n,)) for ex in exprs]
                if ax.kind == "derive":
                    v = np.asarray(vals[0])
                    if v.dtype.kind not in "biuf":
                        raise ctx.error(path, f"{ax.exprs[0]!r} must give numbers or booleans")
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
                    self._kinds[ax.name] = _kind_of(col, None)
                    if g is None:
                        if not keep.all():
                            raise ctx.error(path, f"the space is empty: {ax.exprs[0]!r} is not a whole number")
                        g = _Group(pos, [], {}, 1)
                        groups.append(g)
                    g.table[ax.name] = col
                    g.cols.append(ax.name)
                    owner[ax.name] = g
                    filter_group(g, keep, path, f"{ax.exprs[0]!r} never gives a whole number")
                else:  # divisors_of: per-row divisors of the gcd of the items
                    base, ok = _as_int_divisor_base(vals[0])
                    for extra in vals[1:]:
                        b2, ok2 = _as_int_divisor_base(extra)
                        base, ok = np.gcd(base, b2), ok & ok2
                    self._kinds[ax.name] = "int"
                    if g is None:
                        if not ok.all():
                            raise ctx.error(path, "the space is empty: not a positive whole number")
                        d = _divisors(int(base[0]))
                        g = _Group(pos, [ax.name], {ax.name: d}, len(d))
                        groups.append(g)
                    else:
                        base = np.where(ok, base, 0)
                        uniq, inv = np.unique(base, return_inverse=True)
                        divs = [_divisors(int(u)) if u > 0 else np.zeros(0, np.int64) for u in uniq]
                        lens = np.array([len(d) for d in divs], dtype=np.int64)
                        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
                        flat = np.concatenate(divs) if divs else np.zeros(0, np.int64)
                        counts = lens[inv.reshape(-1)]
                        total = int(counts.sum())
                        if total > MAX_GROUP_ROWS:
                            _too_big(path, total)
                        parent = np.repeat(np.arange(g.n), counts)
                        within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
                        col = flat[starts[inv.reshape(-1)][parent] + within]
                        for c in g.cols:
                            g.table[c] = g.table[c][parent]
                        g.table[ax.name] = col
                        g.cols.append(ax.name)
                        g.n = total
                        if total == 0:
                            raise ctx.error(path, "the space is empty: no row has a positive whole number to divide")
                    owner[ax.name] = g
            defined.add(ax.name)
            apply_ready()

        assert not pending, pending  # every name is fixed, a catalog constant or an axis

        groups.sort(key=lambda g: g.pos)
        self._groups = groups
        self._radices = np.array([g.n for g in groups], dtype=np.int64)
        self.size = int(math.prod(int(g.n) for g in groups)) if groups else 1
        self.exact = not self._lazy
        self._consts = consts
        self.columns = list(spec.fixed) + axis_names
        self.int_bounds = {}
        for k, v in spec.fixed.items():
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

    def _decode(self, col: str, arr: np.ndarray):
        if col in self._categories:
            return np.asarray(self._categories[col], dtype=object)[arr]
        return arr

    # -- enumeration
    def chunk(self, start: int, stop: int) -> dict:
        """Rows start..stop of the mixed-radix index (valid rows only), as a dict of columns."""
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
            if isinstance(v, str):
                out[k] = pd.Categorical.from_codes(np.zeros(n, np.int8), categories=[v])
            else:
                out[k] = np.full(n, v, dtype=bool if isinstance(v, bool) else np.int64 if isinstance(v, int) else float)
        for ax in self.spec.axes:
            gi, g = self._group_of[ax.name]
            vals = g.table[ax.name][digits[gi]]
            if self._kinds[ax.name] == "int":
                vals = vals.astype(np.int64)
            if ax.name in self._categories:
                out[ax.name] = pd.Categorical.from_codes(vals, categories=self._categories[ax.name])
            else:
                out[ax.name] = vals
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


def _kind_of(arr: np.ndarray, cats) -> str:
    if cats is not None:
        return "str"
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}[arr.dtype.kind]


def _catalog_names() -> set:
    from dse import columns as C
    return set(C.MODEL_COLUMNS) | set(C.HARDWARE_COLUMNS)


def _eval_checked(ex: Expr, env: dict, ctx: _Ctx, path: str):
    try:
        return ex(env)
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
        raise ctx.error(path, f"cannot evaluate {ex.text!r}: {exc}") from None


def _canonical(raw: Mapping) -> dict:
    """Top-level keys sorted; nested order kept (axis order defines row order)."""
    return {k: raw[k] for k in sorted(raw, key=str)}


def read_yaml(path: Path, kind: str):
    """The parsed content of a YAML space or study file; a syntax error is a ConfigError with
    its line and column."""
    import yaml
    try:
        return yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{where}: {problem}; fix the syntax") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file; give a YAML {kind} file") from None


def load_space(path_or_mapping, name: str | None = None) -> Space:
    """Load and validate a space from a YAML file path or a mapping. ConfigError on bad input."""
    if isinstance(path_or_mapping, Space):
        return path_or_mapping
    if isinstance(path_or_mapping, Mapping):
        return Space.from_dict(path_or_mapping, name)
    path = Path(path_or_mapping)
    src = str(path_or_mapping)
    if not path.is_file():
        raise ConfigError(f"{src}: no such space file; give the path of a YAML file (see spaces/)")
    raw = read_yaml(path, "space")
    if raw is None:
        raise ConfigError(f"{src}: the file is empty, so the space is empty; give fixed columns and axes")
    spec = parse_spec(raw, src, name)
    return Space(spec, _canonical(raw), src)
