"""The space file's validated model: `parse_spec(mapping) -> SpaceSpec` (ConfigError on any problem).

Also the small validation helpers the study file reuses (`Ctx`, `check_keys`, `as_int`,
`parse_axis`, `parse_constraints`) and `catalog_names`, the one place that says which names are
catalog constants (model dimensions, per-GPU hardware columns).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dse.errors import ConfigError

TOP_KEYS = ("name", "description", "evaluator", "seed", "chunk_size", "fixed", "axes", "constraints")
AXIS_KINDS = ("values", "range", "pow2", "divisors_of", "derive")
AXIS_EXTRA = {"values": (), "range": ("step",), "pow2": (), "divisors_of": (), "derive": ("real",)}
EVALUATORS = ("training", "inference", "serving")
# Registered evaluators: the names a space file may give, each one of dse's own functions (also
# accepted under that dotted spelling). Any other `package.module:function` names code to import
# and run: the sweep refuses it unless the caller allows it (see `code_evaluator`).
REGISTERED_EVALUATORS = {"training": "dse:evaluate_training", "inference": "dse:evaluate_inference",
                         "serving": "dse:evaluate_serving", "toy": "dse.sweep:evaluate_toy"}
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def code_evaluator(evaluator) -> bool:
    """True when `evaluator` (a space's evaluator string) names code outside the registry."""
    return isinstance(evaluator, str) and evaluator not in REGISTERED_EVALUATORS \
        and evaluator not in REGISTERED_EVALUATORS.values()


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


class Ctx:
    """Where we are in the file, for one-line error messages."""

    def __init__(self, source: str):
        self.source = source

    def error(self, path: str, message: str) -> ConfigError:
        where = f"{self.source}: {path}: " if path else f"{self.source}: "
        return ConfigError(where + message)


def catalog_names(kind: str | None = None) -> set:
    """Names that are catalog constants: 'model' dimensions, per-GPU 'hardware' columns, or both."""
    from dse.schema import HARDWARE_COLUMNS, MODEL_COLUMNS
    model, hardware = set(MODEL_COLUMNS), set(HARDWARE_COLUMNS)
    return model if kind == "model" else hardware if kind == "hardware" else model | hardware


def check_columns(ctx: Ctx, fixed: Mapping, axes, prefix: str = "") -> None:
    """Values a registered evaluator reads: every fixed number and listed value of a schema column
    inside its column's domain (dse.schema), caught when the file loads. (Names the schema does not
    know are refused by the evaluator itself, on the rows `dse sweep` probes before any work.)"""
    from dse import schema
    for key, value in fixed.items():
        _check_column(ctx, schema, f"{prefix}fixed.{key}", key, [value])
    for ax in axes:
        if ax.kind == "derive" and ax.real:
            continue  # a helper column of real numbers, kept beside the evaluator's inputs
        _check_column(ctx, schema, f"{prefix}axes.{ax.name}", ax.name, ax.values)


def _check_column(ctx, schema, path: str, name: str, values) -> None:
    if name not in schema.columns():
        return
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not numbers:
        return
    bad = schema.out_of_domain(name, numbers)  # one vectorized test for a whole axis
    if bad.any():
        try:
            schema.check_value(name, numbers[int(bad.argmax())])
        except ConfigError as exc:
            raise ctx.error(path, str(exc)) from None


def check_keys(ctx: Ctx, path: str, mapping: Mapping, allowed) -> None:
    for key in mapping:
        if key not in allowed:
            close = [a for a in allowed if _similar(str(key), a)]
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            where = f"{path}.{key}" if path else str(key)
            raise ctx.error(where, f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}")


def _similar(a: str, b: str) -> bool:
    import difflib
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= 0.7


def scalar_ok(v) -> bool:
    return isinstance(v, (bool, int, float, str)) and not (isinstance(v, float) and math.isnan(v))


def as_int(ctx: Ctx, path: str, v, what: str = "an integer") -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ctx.error(path, f"expected {what}, got {v!r}")
    return int(v)


# ----------------------------------------------------------------------------- axes

def parse_axis(ctx: Ctx, name: str, raw) -> AxisSpec:
    """One entry of `axes:` (a list, a scalar or a mapping with exactly one axis kind)."""
    path = f"axes.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise ctx.error(path, "axis names must be identifiers (letters, digits, _)")
    if isinstance(raw, (list, tuple)):
        raw = {"values": list(raw)}
    elif scalar_ok(raw):
        raw = {"values": [raw]}
    if not isinstance(raw, Mapping):
        raise ctx.error(path, f"expected a list of values or a mapping with one of: {', '.join(AXIS_KINDS)}")
    kinds = [k for k in raw if k in AXIS_KINDS]
    if len(kinds) != 1:
        if not kinds:
            check_keys(ctx, path, raw, AXIS_KINDS)
            raise ctx.error(path, f"give exactly one of: {', '.join(AXIS_KINDS)}")
        raise ctx.error(path, f"give exactly one of {', '.join(AXIS_KINDS)} (got {', '.join(kinds)})")
    kind = kinds[0]
    check_keys(ctx, path, raw, (kind,) + AXIS_EXTRA[kind])
    return _AXIS_PARSERS[kind](ctx, name, raw, raw[kind], f"{path}.{kind}")


def _values_axis(ctx, name, raw, v, kpath) -> AxisSpec:
    if not isinstance(v, (list, tuple)):
        raise ctx.error(kpath, "expected a list of values")
    if not v:
        raise ctx.error(kpath, "the list is empty, so the space is empty; give at least one value")
    for x in v:
        if not scalar_ok(x):
            raise ctx.error(kpath, f"values must be numbers, strings or booleans, got {x!r}")
    types = {("bool" if isinstance(x, bool) else "str" if isinstance(x, str) else "num") for x in v}
    if len(types) > 1:
        raise ctx.error(kpath, f"mixes {' and '.join(sorted(types))} values; use one type per axis")
    if len(set(v)) != len(v):
        raise ctx.error(kpath, "repeats a value; list each value once")
    return AxisSpec(name, "values", values=tuple(v))


def _range_axis(ctx, name, raw, v, kpath) -> AxisSpec:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ctx.error(kpath, "expected [lo, hi] (inclusive)")
    lo, hi = as_int(ctx, kpath, v[0]), as_int(ctx, kpath, v[1])
    step = as_int(ctx, f"axes.{name}.step", raw.get("step", 1))
    if step <= 0:
        raise ctx.error(f"axes.{name}.step", "must be a positive integer")
    vals = tuple(range(lo, hi + 1, step))
    if not vals:
        raise ctx.error(kpath, f"range [{lo}, {hi}] is empty, so the space is empty; use lo <= hi")
    return AxisSpec(name, "range", values=vals)


def _pow2_axis(ctx, name, raw, v, kpath) -> AxisSpec:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ctx.error(kpath, "expected [lo, hi] (inclusive, positive)")
    lo, hi = as_int(ctx, kpath, v[0]), as_int(ctx, kpath, v[1])
    if lo <= 0:
        raise ctx.error(kpath, "bounds must be positive")
    vals = tuple(1 << k for k in range(0, 63) if lo <= (1 << k) <= hi)
    if not vals:
        raise ctx.error(kpath, f"no power of two in [{lo}, {hi}], so the space is empty")
    return AxisSpec(name, "pow2", values=vals)


def _divisors_axis(ctx, name, raw, v, kpath) -> AxisSpec:
    items = v if isinstance(v, (list, tuple)) else [v]
    if not items:
        raise ctx.error(kpath, "give a number, a column name or an expression")
    exprs = []
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (int, str)):
            raise ctx.error(kpath, f"expected an integer, a column name or an expression, got {x!r}")
        exprs.append(str(x))
    return AxisSpec(name, "divisors_of", exprs=tuple(exprs))


def _derive_axis(ctx, name, raw, v, kpath) -> AxisSpec:
    if not isinstance(v, (str, int, float)) or isinstance(v, bool):
        raise ctx.error(kpath, "expected an expression string, e.g. \"gpus / (tp * pp)\"")
    real = raw.get("real", False)
    if not isinstance(real, bool):
        raise ctx.error(f"axes.{name}.real", "expected true or false")
    return AxisSpec(name, "derive", exprs=(str(v),), real=real)


_AXIS_PARSERS = {"values": _values_axis, "range": _range_axis, "pow2": _pow2_axis,
                 "divisors_of": _divisors_axis, "derive": _derive_axis}


# ----------------------------------------------------------------------------- the file

def parse_constraints(ctx: Ctx, raw, example: str = "'tp * pp <= 64'") -> list[str]:
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


def _parse_name(ctx: Ctx, raw: Mapping, source: str, name: str | None) -> str:
    nm = raw.get("name", name)
    if nm is None:
        if source.endswith((".yaml", ".yml")):
            nm = Path(source).stem
        else:
            raise ctx.error("name", "missing; give the space a name")
    if not isinstance(nm, str) or not nm or "/" in nm or nm.startswith("."):
        raise ctx.error("name", f"expected a plain name (no '/'), got {nm!r}")
    return nm


def _parse_fixed(ctx: Ctx, fixed_raw) -> dict:
    if not isinstance(fixed_raw, Mapping):
        raise ctx.error("fixed", "expected a mapping of column: value")
    fixed = {}
    for k, v in fixed_raw.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ctx.error(f"fixed.{k}", "column names must be identifiers (letters, digits, _)")
        if not scalar_ok(v):
            raise ctx.error(f"fixed.{k}", f"must be a single number, string or boolean (got {v!r}); put lists under axes")
        fixed[k] = v
    return fixed


def parse_spec(raw, source: str, name: str | None = None) -> SpaceSpec:
    """Validate a parsed space mapping into a SpaceSpec (ConfigError on any problem)."""
    ctx = Ctx(source)
    if not isinstance(raw, Mapping):
        raise ctx.error("", "a space file must be a mapping with keys: " + ", ".join(TOP_KEYS))
    check_keys(ctx, "", raw, TOP_KEYS)
    nm = _parse_name(ctx, raw, source, name)
    ev = raw.get("evaluator", "training")
    if not isinstance(ev, str) or (ev not in REGISTERED_EVALUATORS and not _DOTTED.match(ev)):
        raise ctx.error("evaluator", f"unknown evaluator {ev!r}; use one of {', '.join(EVALUATORS)} (a custom "
                        "evaluator is a callable given to dse.sweep(space, evaluator=...))")
    seed = as_int(ctx, "seed", raw.get("seed", 0))
    cs = raw.get("chunk_size")
    if cs is not None:
        cs = as_int(ctx, "chunk_size", cs)
        if cs <= 0:
            raise ctx.error("chunk_size", "must be a positive integer")
    desc = raw.get("description", "") or ""
    fixed = _parse_fixed(ctx, raw.get("fixed") or {})
    axes_raw = raw.get("axes") or {}
    if not isinstance(axes_raw, Mapping):
        raise ctx.error("axes", "expected an ordered mapping of column: axis")
    axes = []
    for k, v in axes_raw.items():
        if k in fixed:
            raise ctx.error(f"axes.{k}", f"'{k}' is also under fixed; keep it in one place")
        axes.append(parse_axis(ctx, k, v))
    cons_raw = parse_constraints(ctx, raw.get("constraints"))
    if not fixed and not axes:
        raise ctx.error("axes", "the space is empty; give fixed columns and/or axes")
    if ev in EVALUATORS:
        check_columns(ctx, fixed, axes)
    return SpaceSpec(name=nm, evaluator=ev, seed=seed, chunk_size=cs, description=str(desc),
                     fixed=fixed, axes=tuple(axes), constraints=tuple(cons_raw))
