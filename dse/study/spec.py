"""The study file -> a validated `Study` (outer parameters, inner space, objectives, constraints).

See the `dse.study` docstring for the file schema. ConfigError on any problem, naming the file,
the key path and the allowed keys.
"""
from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dse import resolve
from dse.errors import ConfigError
from dse.space import (Ctx, Expr, Space, as_int, check_columns, check_keys, parse_axis, parse_constraints, parse_spec,
                       read_yaml)

TOP_KEYS = ("name", "description", "workload", "outer", "inner", "objectives", "constraints",
            "sampler", "sampler_options", "budget", "batch_size", "seed", "storage", "stale_after_s")
WORKLOAD_KEYS = ("kind", "model", "train_tokens", "serve_tokens", "fixed")
SUB_KEYS = ("fixed", "axes", "constraints")
SAMPLERS = ("nsga2", "tpe", "gp", "random")
KINDS = ("training", "inference")
DEFAULT_STALE_S = 900.0
DERIVED = {"training": ("time_to_train_s", "time_to_train_days"), "inference": ()}


# ----------------------------------------------------------------------------- the study file

@dataclass
class Study:
    name: str
    source: str
    kind: str
    workload_fixed: dict            # columns fixed for every row (model, train_tokens, ...)
    outer: dict                     # validated space mapping (fixed, axes, constraints)
    inner: dict
    objectives: list                # column names
    senses: list                    # "min" / "max"
    constraints: list               # expression strings
    sampler: str = "nsga2"
    sampler_options: dict = field(default_factory=dict)   # keyword arguments of the Optuna sampler
    budget: int = 64
    batch_size: int = 16
    seed: int = 0
    storage: str | None = None
    stale_after_s: float = DEFAULT_STALE_S
    description: str = ""
    hash: str = ""
    canonical: dict = field(default_factory=dict)
    # built
    outer_space: Space | None = None
    params: list = field(default_factory=list)       # (param name, column, kind, values)
    derived_outer: list = field(default_factory=list)  # (column, Expr, real)
    outer_cons: list = field(default_factory=list)     # Expr
    inner_refs: list = field(default_factory=list)     # outer columns the inner space reads
    row_cons: list = field(default_factory=list)       # (text, Expr, graded lhs-rhs fn or None)

    @property
    def default_out(self) -> Path:
        return Path("results") / self.name


def _known_output_columns(kind: str) -> set:
    """Every column a study may name in objectives and constraints: the schema's (dse.schema)."""
    from dse import schema
    return set(schema.columns())


def _check_study_columns(ctx: Ctx, fixed: dict, outer: dict, inner: dict) -> None:
    """Every column a study gives its evaluator is one the schema knows, with values in its domain,
    refused when the file loads (not in a batch)."""
    from dse import schema
    sections = [("workload.fixed", fixed), ("outer.fixed", outer.get("fixed") or {}),
                ("inner.fixed", inner.get("fixed") or {})]
    for where, cols in sections:
        for key in cols:
            try:
                schema.check_known([key], "study")
            except ConfigError as exc:
                raise ctx.error(f"{where}.{key}", str(exc)) from None
    for part, sub in (("outer", outer), ("inner", inner)):
        axes = [parse_axis(ctx, name, ax) for name, ax in (sub.get("axes") or {}).items()]
        for ax in axes:
            if not (ax.kind == "derive" and ax.real) and not ax.name.startswith(schema.USER_PREFIX):
                try:
                    schema.check_known([ax.name], "study")
                except ConfigError as exc:
                    raise ctx.error(f"{part}.axes.{ax.name}", str(exc)) from None
        check_columns(ctx, sub.get("fixed") or {}, axes, prefix=f"{part}.")
    check_columns(ctx, fixed, [], prefix="workload.")


def _sub_space(ctx: Ctx, key: str, raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ctx.error(key, f"expected a mapping with keys: {', '.join(SUB_KEYS)}")
    check_keys(ctx, key, raw, SUB_KEYS)
    out = {k: raw[k] for k in SUB_KEYS if raw.get(k) is not None}
    for name, ax in (out.get("axes") or {}).items():  # axis syntax errors name the study key path
        try:
            parse_axis(ctx, name, ax)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace(": axes.", f": {key}.axes.", 1)) from None
    return out


def _objectives(ctx: Ctx, raw, known: set) -> tuple[list, list]:
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ctx.error("objectives", "give a list such as [time_to_train_days: min, cost_per_run_usd: min]")
    names, senses = [], []
    for i, item in enumerate(raw):
        path = f"objectives[{i}]"
        if isinstance(item, str):
            col, _, sense = item.partition(":")
            col, sense = col.strip(), (sense.strip() or "min")
        elif isinstance(item, Mapping) and len(item) == 1:
            col, sense = next(iter(item.items()))
        else:
            raise ctx.error(path, f"expected 'column: min' or 'column: max', got {item!r}")
        if not isinstance(sense, str) or sense.lower() not in ("min", "max"):
            raise ctx.error(f"{path}.{col}", f"direction {sense!r}: use min or max")
        if col not in known:
            close = sorted(c for c in known if c.startswith(str(col)[:4]))[:6]
            raise ctx.error(path, f"unknown objective column '{col}'; use an output column such as "
                                  f"{', '.join(close or ['time_to_train_days', 'cost_per_run_usd', 'step_time_s', 'tokens_per_s'])}")
        if col in names:
            raise ctx.error(path, f"'{col}' is listed twice; give each objective once")
        names.append(str(col))
        senses.append(sense.lower())
    if len(names) > 3:
        raise ctx.error("objectives", "at most 3 objectives (hypervolume and plots support 2 or 3)")
    return names, senses


def load_study(path_or_mapping, budget: int | None = None, storage: str | None = None) -> Study:
    """Validate a study file (path) or mapping into a Study. ConfigError on any problem."""
    if isinstance(path_or_mapping, Study):
        st = path_or_mapping
        return _apply_overrides(st, budget, storage)
    if isinstance(path_or_mapping, Mapping):
        raw, src = dict(path_or_mapping), f"study '{path_or_mapping.get('name', '?')}'"
    else:
        p = Path(path_or_mapping)
        src = str(path_or_mapping)
        if not p.is_file():
            alt = Path("studies") / f"{path_or_mapping}.yaml"
            if alt.is_file():
                p, src = alt, str(alt)
            else:
                raise ConfigError(f"{src}: no such study file; give the path of a YAML file (see studies/)")
        raw = read_yaml(p, "study")
        if raw is None:
            raise ConfigError(f"{src}: the file is empty; see studies/quickstart.yaml for the keys")
    ctx = Ctx(src)
    if not isinstance(raw, Mapping):
        raise ctx.error("", "a study file must be a mapping with keys: " + ", ".join(TOP_KEYS))
    check_keys(ctx, "", raw, TOP_KEYS)
    name = raw.get("name") or (Path(src).stem if src.endswith((".yaml", ".yml")) else None)
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ctx.error("name", f"expected a plain name (no '/'), got {name!r}")
    wl, kind, fixed = _workload(ctx, raw.get("workload"))
    outer = _sub_space(ctx, "outer", raw.get("outer"))
    inner = _sub_space(ctx, "inner", raw.get("inner"))
    if not (outer.get("axes")):
        raise ctx.error("outer.axes", "the outer (hardware) space has no axes; give at least one")
    _check_study_columns(ctx, fixed, outer, inner)
    known = _known_output_columns(kind) | set(fixed) | set(outer.get("axes") or {}) | set(outer.get("fixed") or {}) \
        | set(inner.get("axes") or {}) | set(inner.get("fixed") or {})
    names, senses = _objectives(ctx, raw.get("objectives"), known)
    cons = parse_constraints(ctx, raw.get("constraints"), "'tdp_w <= 1500'")
    for i, c in enumerate(cons):
        ex = Expr(c, ctx, f"constraints[{i}]")
        for nm in ex.names:
            if nm not in known:
                raise ctx.error(f"constraints[{i}]", f"unknown column '{nm}' in {c!r}; use output, hardware "
                                                     "or input columns (e.g. tdp_w, mem_per_gpu_bytes, gpus)")
    sampler, bs, bud, seed, stale, sto = _settings(ctx, raw)
    sopts = _sampler_options(ctx, sampler, raw.get("sampler_options"))
    desc = raw.get("description", "") or ""
    canonical = {"workload": dict(wl), "outer": outer, "inner": inner,
                 "objectives": [{n: s} for n, s in zip(names, senses)], "constraints": list(cons), "name": name}
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, default=str).encode()).hexdigest()
    st = Study(name=name, source=src, kind=kind, workload_fixed=fixed, outer=outer, inner=inner,
               objectives=names, senses=senses, constraints=list(cons), sampler=sampler, sampler_options=sopts, budget=bud,
               batch_size=bs, seed=seed, storage=sto, stale_after_s=float(stale), description=str(desc),
               hash=digest, canonical=canonical)
    _build(st, ctx)
    return _apply_overrides(st, budget, storage)


def _workload(ctx: Ctx, wl) -> tuple[Mapping, str, dict]:
    """The `workload:` entry -> (raw mapping, kind, columns fixed for every row)."""
    if not isinstance(wl, Mapping):
        raise ctx.error("workload", f"missing or not a mapping; give keys among: {', '.join(WORKLOAD_KEYS)}")
    check_keys(ctx, "workload", wl, WORKLOAD_KEYS)
    kind = wl.get("kind", "training")
    if kind not in KINDS:
        raise ctx.error("workload.kind", f"unknown kind {kind!r}; use training or inference")
    fixed = {}
    if wl.get("model") is not None:
        if not isinstance(wl["model"], str):
            raise ctx.error("workload.model", "expected a catalog model name such as llama3.1-8b")
        try:   # an unknown name is the file's error, found before any trial runs
            resolve.model_entry(wl["model"])   # a catalog name or a Hugging Face config
        except ConfigError as exc:
            raise ctx.error("workload.model", str(exc).removeprefix("model: ")) from None
        fixed["model"] = wl["model"]
    for k in ("train_tokens", "serve_tokens"):
        if wl.get(k) is not None:
            v = wl[k]
            if isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    raise ctx.error(f"workload.{k}", f"expected a number of tokens, got {v!r}") from None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ctx.error(f"workload.{k}", f"expected a positive number of tokens, got {v!r}")
            fixed[k] = float(v)
    if kind == "training" and "train_tokens" not in fixed:
        raise ctx.error("workload.train_tokens", "missing; a training workload needs the run's token count")
    wf = wl.get("fixed") or {}
    if not isinstance(wf, Mapping):
        raise ctx.error("workload.fixed", "expected a mapping of column: value")
    for k, v in wf.items():
        if k in fixed:
            raise ctx.error(f"workload.fixed.{k}", f"'{k}' is also given under workload; keep it in one place")
        fixed[k] = v
    return wl, kind, fixed


def _settings(ctx: Ctx, raw: Mapping) -> tuple:
    """sampler, batch_size, budget, seed, stale_after_s, storage."""
    sampler = raw.get("sampler", "nsga2")
    if sampler not in SAMPLERS:
        raise ctx.error("sampler", f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    bs = as_int(ctx, "batch_size", raw.get("batch_size", 16))
    if bs < 1:
        raise ctx.error("batch_size", "must be a positive integer")
    bud = as_int(ctx, "budget", raw.get("budget", 4 * bs))
    seed = as_int(ctx, "seed", raw.get("seed", 0))
    stale = raw.get("stale_after_s", DEFAULT_STALE_S)
    if isinstance(stale, bool) or not isinstance(stale, (int, float)) or stale <= 0:
        raise ctx.error("stale_after_s", "expected a positive number of seconds")
    sto = raw.get("storage")
    if sto is not None and not isinstance(sto, str):
        raise ctx.error("storage", "expected a URL such as postgresql+psycopg://user@host:5432/db")
    return sampler, bs, bud, seed, float(stale), sto


SAMPLER_OPTIONS = {  # keyword arguments a study file may give each sampler (seed is the study's)
    "tpe": ("n_startup_trials", "n_ei_candidates", "multivariate", "group", "constant_liar", "consider_endpoints",
            "prior_weight", "consider_magic_clip", "warn_independent_sampling"),
    "nsga2": ("population_size", "mutation_prob", "crossover_prob", "swapping_prob"),
    "gp": ("n_startup_trials", "deterministic_objective"),
    "random": (),
}


def _sampler_options(ctx: Ctx, sampler: str, raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ctx.error("sampler_options", f"expected a mapping of {sampler} sampler settings")
    check_keys(ctx, "sampler_options", raw, SAMPLER_OPTIONS[sampler])
    for k, v in raw.items():
        if not isinstance(v, (bool, int, float)):
            raise ctx.error(f"sampler_options.{k}", f"expected a number or true/false, got {v!r}")
    return dict(raw)


def _apply_overrides(st: Study, budget, storage) -> Study:
    if budget is not None:
        st.budget = int(budget)
    if storage is not None:
        st.storage = storage
    if st.budget < st.batch_size:
        raise ConfigError(f"{st.source}: budget: {st.budget} is below one batch ({st.batch_size}); "
                          f"give a budget of at least batch_size")
    return st


def _build(st: Study, ctx: Ctx) -> None:
    """Outer parameters, derived outer columns, compiled constraints, inner references."""
    ofixed = dict(st.workload_fixed)
    ofixed.update(st.outer.get("fixed") or {})
    mapping = {"name": st.name + "-outer", "fixed": ofixed, "axes": st.outer.get("axes") or {},
               "constraints": st.outer.get("constraints") or []}
    try:
        st.outer_space = Space.from_dict(mapping, source=f"{st.source}: outer")
    except ConfigError as exc:
        msg = str(exc)
        if "the space is empty" in msg or "exceed" in msg or "combinations" in msg:
            st.outer_space = None  # not enumerable / not pre-checkable; sampled points are still checked
        else:
            raise
    spec = parse_spec(mapping, f"{st.source}: outer")
    for ax in spec.axes:
        if ax.kind in ("values", "range", "pow2"):
            vals = list(ax.values)
            if ax.kind == "range" and len(vals) > 1:
                st.params.append((ax.name, ax.name, "int", vals))
            else:  # values and pow2: a categorical over the listed values, named as the axis (see dse.study)
                st.params.append((ax.name, ax.name, "cat", vals))
        elif ax.kind == "derive":
            st.derived_outer.append((ax.name, Expr(ax.exprs[0], ctx, f"outer.axes.{ax.name}.derive"), ax.real))
        else:
            raise ctx.error(f"outer.axes.{ax.name}", "divisors_of is not supported in the outer space; "
                                                   "list the values (values/range/pow2) instead")
    st.outer_cons = [Expr(c, ctx, f"outer.constraints[{i}]") for i, c in enumerate(spec.constraints)]
    outer_cols = set(ofixed) | {a.name for a in spec.axes}
    refs = []
    for name, ax in (st.inner.get("axes") or {}).items():
        a = parse_axis(ctx, name, ax)
        for t in a.exprs:
            refs += Expr(t, ctx, f"inner.axes.{name}").names
    for i, c in enumerate(st.inner.get("constraints") or []):
        refs += Expr(c, ctx, f"inner.constraints[{i}]").names
    outer_axes = {a.name for a in spec.axes} | set(st.outer.get("fixed") or {})
    st.inner_refs = sorted({r for r in refs if r in outer_axes})
    del outer_cols
    st.row_cons = [(c, Expr(c, ctx, f"constraints[{i}]"), _graded(c)) for i, c in enumerate(st.constraints)]
    # an inner space with the first outer point must build (catches unknown names early)
    if st.outer_space is not None and st.outer_space.size:
        probe = st.outer_space.chunk(0, 1)
        if probe and len(next(iter(probe.values()))):
            row = {k: _py(np.asarray(v)[0]) for k, v in probe.items()}
            try:
                inner_space(st, row)
            except ConfigError as exc:
                if "the space is empty" not in str(exc):
                    raise


def _graded(text: str):
    """For 'a <= b' / 'a < b' / 'a >= b' / 'a > b': (lhs Expr, rhs Expr, sign) giving a graded violation."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
        ctx = Ctx("constraint")
        lhs = Expr(ast.unparse(tree.left), ctx, "")
        rhs = Expr(ast.unparse(tree.comparators[0]), ctx, "")
        sign = 1.0 if isinstance(tree.ops[0], (ast.Lt, ast.LtE)) else -1.0
        return lhs, rhs, sign
    return None


def _py(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


def inner_space(st: Study, outer_row: dict) -> Space | None:
    """The inner mapping space of one outer point (None if it is empty): workload, inner fixed
    and the outer values the inner space reads (`st.inner_refs`) as fixed columns."""
    fixed = dict(st.workload_fixed)
    fixed.update(st.inner.get("fixed") or {})
    for r in st.inner_refs:
        fixed[r] = outer_row[r]
    mapping = {"name": st.name + "-inner", "fixed": fixed, "axes": st.inner.get("axes") or {},
               "constraints": st.inner.get("constraints") or []}
    try:
        return Space.from_dict(mapping, source=f"{st.source}: inner")
    except ConfigError as exc:
        if "the space is empty" not in str(exc):
            raise
        return None
