"""Optuna multi-objective studies: outer hardware search x inner exhaustive, vectorized mapping search.

Study file schema (YAML, `studies/*.yaml`; unknown keys anywhere are a ConfigError naming the file,
the key path and the allowed keys)::

    name: quickstart                 # results go to results/<name>/
    description: free text
    workload:                        # what is run on every design point
      kind: training                 # training (default) | inference
      model: llama3.1-8b             # a catalog model (or model columns under fixed)
      train_tokens: 1.0e12           # training: tokens of the whole run (-> time_to_train_*, cost_per_run_usd)
      serve_tokens: 1.0e9            # inference: tokens served (-> cost_per_run_usd)
      fixed: {global_batch: 512, precision: bf16}   # any other fixed input columns
    outer:                           # hardware and cluster: searched by the Optuna sampler
      fixed: {package: cowos-l}      # same syntax as a space file's fixed / axes / constraints
      axes:
        node: [n5, n3, n2]
        compute_dies: {pow2: [1, 8]}
        gpus: {pow2: [1024, 32768]}
      constraints: ["compute_dies * die_area_mm2 <= 4000"]
    inner:                           # mapping: enumerated exhaustively for every outer point
      axes:                          # may refer to workload and outer columns (gpus, scaleup_domain, ...)
        tp: {pow2: [1, 8]}
        dp: {derive: "gpus / (tp * pp)"}
      constraints: ["tp <= scaleup_domain"]
    objectives:                      # columns of the evaluated rows, each min or max
      - time_to_train_days: min
      - cost_per_run_usd: min
    constraints: ["tdp_w <= 1500"]   # over output (and hardware) columns; `fits` is always implied
    sampler: nsga2                   # nsga2 (default) | tpe | gp | random
    budget: 256                      # outer trials in total (all workers together)
    batch_size: 32                   # outer points per batch (= NSGA-II population size)
    seed: 0
    storage: null                    # default: Optuna journal file results/<name>/journal.log;
                                     # or postgresql+psycopg://user@host:port/db (shared by workers)

Outer axes of kind values/range/pow2 become Optuna parameters (`range` -> int, `pow2` -> int
exponent `log2_<name>`, numeric and string lists -> categorical); `derive` axes are computed from
them; `divisors_of` is not allowed in the outer space (give the values). Outer constraints are
checked on every proposed point (a violating point is an infeasible trial).

Evaluation of one batch (`evaluate_outer`): hardware columns are derived once per outer point
(`dse.hardware.accelerator_columns` when the outer space has `node`; catalog `system` names
otherwise), the inner mapping space of every outer point is enumerated (`Space.from_dict` with
the workload, inner fixed and referenced outer values as fixed columns; spaces cached by those
values), all rows of all outer points are evaluated in ONE vectorized call of the workload's
evaluator, and the study constraints are applied to the rows.

Best mapping rule (documented, deterministic): among the feasible rows of an outer point (fits,
hardware buildable, every study constraint true, finite objectives), the best is the
lexicographic minimum of the objectives in file order (each turned into minimisation; ties by
the next objective, then by row order). For time vs cost of training the two agree on a fixed
system (cost = capex x time + energy ~ time), so this is also the front of that point's mappings.
An outer point with no feasible row is infeasible: the trial is told with finite penalty values
(the worst feasible value seen so far plus the spread, per objective; 1e30 before any feasible
point) and a positive violation via `Trial.set_constraint("violation", v)`, never as FAIL; its
Parquet row is the least-violating mapping. Violations: row constraints unmet on a fitting row
0.001..1 (graded by how far), out of memory 1 + overflow ratio, other infeasible mapping 20,
hardware not buildable 50, empty inner space 100, outer constraint violated 200 + count.

Derived columns added to every row: training `time_to_train_s`, `time_to_train_days`
(train_tokens / tokens_per_s); inference `cost_per_million_tokens_usd` and the other cost
columns when the evaluator does not give them (dse.hardware.workload_costs).

Distributed runs: all workers share one Optuna storage. Asking is serialised by a lock (fcntl
on results/<name>/.ask.lock for the journal file; a PostgreSQL advisory lock for a database):
under it a worker counts all trials in the storage and asks at most budget - count, so all
workers together make exactly `budget` trials. Every trial carries user attributes worker,
host, pid, asked_at. A RUNNING trial whose worker is dead (same host, pid gone) or that is older
than `stale_after_s` (default 900 s) is adopted by the next worker that asks: its parameters are
re-read, it is evaluated again and told, so a killed worker loses nothing.

Parquet: each batch's rows are written, before the trials are told, as one part file of the
dataset results/<name>/trials/ (dse.store.write_part; part id = first trial number x 10^6 +
random, unique across workers); `trial` and `worker` columns identify the rows, and readers
keep one row per trial (the last written). After a run: results/<name>/trials.parquet (the
deduplicated union), pareto.parquet (feasible non-dominated rows), pareto.png, manifest.json.

API: load_study(path_or_mapping) -> Study; run_study(study, budget=None, storage=None,
out=None, worker=False, seed=None, exhaustive_check=False, progress=None) -> StudyResult;
evaluate_outer(study, outer_cols) -> (rows, values, violation); read_trials(out);
pareto_rows(study, frame); exhaustive_check(study, out, trials) -> dict; plot_front(...).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dse import store
from dse.errors import ConfigError
from dse.space import (Expr, Space, _check_keys, _Ctx, _int, _parse_axis, parse_constraints, parse_spec,
                       read_yaml)

TOP_KEYS = ("name", "description", "workload", "outer", "inner", "objectives", "constraints",
            "sampler", "budget", "batch_size", "seed", "storage", "stale_after_s")
WORKLOAD_KEYS = ("kind", "model", "train_tokens", "serve_tokens", "fixed")
SUB_KEYS = ("fixed", "axes", "constraints")
SAMPLERS = ("nsga2", "tpe", "gp", "random")
KINDS = ("training", "inference")
PENALTY = 1e30
MAX_EXHAUSTIVE = 500_000          # outer points the exhaustive check will enumerate
DEFAULT_STALE_S = 900.0

# Violation levels (see the module docstring)
V_OUTER, V_EMPTY, V_HW, V_STRUCT = 200.0, 100.0, 50.0, 20.0
OOM_REASON_PREFIX = "out of memory"

DERIVED = {"training": ("time_to_train_s", "time_to_train_days"), "inference": ()}
ID_COLUMNS = ("trial", "worker", "feasible", "violation", "n_mappings", "n_feasible_mappings")


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
    from dse import columns as C
    from dse.hardware.accelerator import COST_COLUMNS, EXTRA_COLUMNS
    from dse.hardware.economics import COST_OUTPUTS
    names = set(C.HARDWARE_COLUMNS) | set(COST_COLUMNS) | set(EXTRA_COLUMNS) | set(COST_OUTPUTS)
    names |= set(C.MODEL_COLUMNS) | set(DERIVED[kind]) | {"fits"}
    if kind == "training":
        from dse.perf.training import OUTPUT_COLUMNS
    else:
        from dse.perf.inference import OUTPUT_COLUMNS
    return names | set(OUTPUT_COLUMNS)


def _sub_space(ctx: _Ctx, key: str, raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ctx.error(key, f"expected a mapping with keys: {', '.join(SUB_KEYS)}")
    _check_keys(ctx, key, raw, SUB_KEYS)
    out = {k: raw[k] for k in SUB_KEYS if raw.get(k) is not None}
    for name, ax in (out.get("axes") or {}).items():  # axis syntax errors name the study key path
        try:
            _parse_axis(ctx, name, ax)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace(": axes.", f": {key}.axes.", 1)) from None
    return out


def _objectives(ctx: _Ctx, raw, known: set) -> tuple[list, list]:
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
    ctx = _Ctx(src)
    if not isinstance(raw, Mapping):
        raise ctx.error("", "a study file must be a mapping with keys: " + ", ".join(TOP_KEYS))
    _check_keys(ctx, "", raw, TOP_KEYS)
    name = raw.get("name") or (Path(src).stem if src.endswith((".yaml", ".yml")) else None)
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ctx.error("name", f"expected a plain name (no '/'), got {name!r}")
    wl = raw.get("workload")
    if not isinstance(wl, Mapping):
        raise ctx.error("workload", f"missing or not a mapping; give keys among: {', '.join(WORKLOAD_KEYS)}")
    _check_keys(ctx, "workload", wl, WORKLOAD_KEYS)
    kind = wl.get("kind", "training")
    if kind not in KINDS:
        raise ctx.error("workload.kind", f"unknown kind {kind!r}; use training or inference")
    fixed = {}
    if wl.get("model") is not None:
        if not isinstance(wl["model"], str):
            raise ctx.error("workload.model", "expected a catalog model name such as llama3.1-8b")
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
    outer = _sub_space(ctx, "outer", raw.get("outer"))
    inner = _sub_space(ctx, "inner", raw.get("inner"))
    if not (outer.get("axes")):
        raise ctx.error("outer.axes", "the outer (hardware) space has no axes; give at least one")
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
    sampler = raw.get("sampler", "nsga2")
    if sampler not in SAMPLERS:
        raise ctx.error("sampler", f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    bs = _int(ctx, "batch_size", raw.get("batch_size", 16))
    if bs < 1:
        raise ctx.error("batch_size", "must be a positive integer")
    bud = _int(ctx, "budget", raw.get("budget", 4 * bs))
    seed = _int(ctx, "seed", raw.get("seed", 0))
    stale = raw.get("stale_after_s", DEFAULT_STALE_S)
    if isinstance(stale, bool) or not isinstance(stale, (int, float)) or stale <= 0:
        raise ctx.error("stale_after_s", "expected a positive number of seconds")
    sto = raw.get("storage")
    if sto is not None and not isinstance(sto, str):
        raise ctx.error("storage", "expected a URL such as postgresql+psycopg://user@host:5432/db")
    desc = raw.get("description", "") or ""
    canonical = {"workload": dict(wl), "outer": outer, "inner": inner,
                 "objectives": [{n: s} for n, s in zip(names, senses)], "constraints": list(cons), "name": name}
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, default=str).encode()).hexdigest()
    st = Study(name=name, source=src, kind=kind, workload_fixed=fixed, outer=outer, inner=inner,
               objectives=names, senses=senses, constraints=list(cons), sampler=sampler, budget=bud,
               batch_size=bs, seed=seed, storage=sto, stale_after_s=float(stale), description=str(desc),
               hash=digest, canonical=canonical)
    _build(st, ctx)
    return _apply_overrides(st, budget, storage)


def _apply_overrides(st: Study, budget, storage) -> Study:
    if budget is not None:
        st.budget = int(budget)
    if storage is not None:
        st.storage = storage
    if st.budget < st.batch_size:
        raise ConfigError(f"{st.source}: budget: {st.budget} is below one batch ({st.batch_size}); "
                          f"give a budget of at least batch_size")
    return st


def _build(st: Study, ctx: _Ctx) -> None:
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
            elif ax.kind == "pow2" and len(vals) > 1:
                st.params.append((f"log2_{ax.name}", ax.name, "log2", vals))
            else:
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
        a = _parse_axis(ctx, name, ax)
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
                _inner_space(st, row, {})
            except ConfigError as exc:
                if "the space is empty" not in str(exc):
                    raise


def _graded(text: str):
    """For 'a <= b' / 'a < b' / 'a >= b' / 'a > b': (lhs Expr, rhs Expr, sign) giving a graded violation."""
    import ast
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
        ctx = _Ctx("constraint")
        lhs = Expr(ast.unparse(tree.left), ctx, "")
        rhs = Expr(ast.unparse(tree.comparators[0]), ctx, "")
        sign = 1.0 if isinstance(tree.ops[0], (ast.Lt, ast.LtE)) else -1.0
        return lhs, rhs, sign
    return None


def _py(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


# ----------------------------------------------------------------------------- evaluation

def _inner_space(st: Study, outer_row: dict, cache: dict) -> Space | None:
    key = tuple((r, outer_row.get(r)) for r in st.inner_refs)
    if key in cache:
        return cache[key]
    fixed = dict(st.workload_fixed)
    fixed.update(st.inner.get("fixed") or {})
    for r in st.inner_refs:
        fixed[r] = outer_row[r]
    mapping = {"name": st.name + "-inner", "fixed": fixed, "axes": st.inner.get("axes") or {},
               "constraints": st.inner.get("constraints") or []}
    try:
        sp = Space.from_dict(mapping, source=f"{st.source}: inner")
    except ConfigError as exc:
        if "the space is empty" not in str(exc):
            raise
        sp = None
    if len(cache) > 4096:
        cache.clear()
    cache[key] = sp
    return sp


def outer_columns_from_params(st: Study, params_list: list[dict]) -> dict:
    """Optuna params of B trials -> dict of B-long outer columns (fixed, sampled and derived)."""
    n = len(params_list)
    cols = {}
    for k, v in {**st.workload_fixed, **(st.outer.get("fixed") or {})}.items():
        cols[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
    for pname, col, kind, vals in st.params:
        raw = [p.get(pname) for p in params_list]
        if kind == "log2":
            raw = [None if r is None else 1 << int(r) for r in raw]
        if any(r is None for r in raw):
            raise ConfigError(f"{st.source}: a trial lacks parameter '{pname}'; the storage holds another study")
        cols[col] = np.asarray(raw, dtype=object if isinstance(vals[0], str) else None)
    return cols


def _consts(st: Study) -> dict:
    sp = st.outer_space
    return dict(getattr(sp, "_consts", {}) or {}) if sp is not None else {}


def evaluate_outer(st: Study, outer: dict, cache: dict | None = None):
    """Evaluate B outer points (dict of B-long columns): best mapping per point.

    Returns (rows: dict of B-long columns of each point's chosen mapping, values: (B, k) objective
    values in the objectives' own senses, NaN where infeasible; violation: (B,) >= 0, 0 = feasible).
    """
    from dse.hardware import accelerator_columns

    cache = {} if cache is None else cache
    B = len(next(iter(outer.values())))
    outer = dict(outer)
    env = {**_consts(st), **outer}
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
    outer_violation = np.where(ok, 0.0, V_OUTER + n_bad)
    hw = {}
    if "node" in outer:
        hw = accelerator_columns({k: (np.asarray(v, dtype=object) if np.asarray(v).dtype.kind in "OUS" else v)
                                  for k, v in outer.items()})
    # enumerate inner spaces
    parts, owner, sizes = [], [], np.zeros(B, np.int64)
    for i in range(B):
        if not ok[i]:
            continue
        row = {k: _py(np.asarray(v)[i]) for k, v in outer.items()}
        sp = _inner_space(st, row, cache)
        if sp is None or sp.size == 0:
            continue
        ch = sp.chunk(0, sp.size)
        m = len(next(iter(ch.values()))) if ch else 0
        if m == 0:
            continue
        parts.append(ch)
        owner.append(np.full(m, i, np.int64))
        sizes[i] = m
    empty_violation = np.where(ok & (sizes == 0), V_EMPTY, 0.0)
    k = len(st.objectives)
    values = np.full((B, k), np.nan)
    violation = np.maximum(outer_violation, empty_violation)
    n_feasible = np.zeros(B, np.int64)
    if not parts:
        rows = {k2: np.asarray(v) for k2, v in outer.items()}
        return _finish_rows(st, rows, B, values, violation, sizes, n_feasible)
    own = np.concatenate(owner)
    n = len(own)
    batch: dict = {}
    inner_names = list(parts[0].keys())
    for c in inner_names:
        arrs = [np.asarray(p[c]) if not isinstance(p[c], pd.Categorical) else np.asarray(p[c], dtype=object) for p in parts]
        batch[c] = np.concatenate(arrs)
    for c, v in outer.items():
        if c not in batch:
            batch[c] = np.asarray(v)[own]
    for c, v in hw.items():
        if c not in batch or c in ("scaleup_domain",):
            batch[c] = np.asarray(v)[own]
    if hw:  # hardware is given explicitly: the evaluator must not derive it again per row
        tech = ("node",)
        for c in tech:
            batch.pop(c, None)
    for c, v in list(batch.items()):
        if np.asarray(v).dtype.kind in "OUS":
            batch[c] = pd.Categorical(np.asarray(v).astype(str))
    out = _evaluate_rows(st, batch, n)
    for c in ("node",):
        if c in outer:
            out[c] = pd.Categorical(np.asarray(outer[c]).astype(str)[own])
    # feasibility and violations per row
    fits = np.asarray(out["fits"], dtype=bool)
    if "hw_fits" in out:
        fits &= np.asarray(out["hw_fits"], dtype=bool)
    envr = {**_consts(st), **{c: (np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else np.asarray(v))
                              for c, v in out.items()}}
    cons_ok = np.ones(n, bool)
    graded = np.zeros(n)
    with np.errstate(all="ignore"):
        for text, ex, gr in st.row_cons:
            good = np.broadcast_to(np.asarray(ex(envr), dtype=bool), (n,))
            cons_ok &= good
            if gr is not None:
                lhs, rhs, sign = gr
                a = np.asarray(lhs(envr), dtype=float)
                b = np.asarray(rhs(envr), dtype=float)
                g = sign * (a - b) / np.maximum(np.abs(b), 1e-300)
                g = np.where(np.isfinite(g), np.clip(g, 0, None), 1.0)
            else:
                g = (~good).astype(float)
            graded += np.where(good, 0.0, np.maximum(g, 1e-3))
    obj = np.column_stack([np.asarray(out[c], dtype=float) for c in st.objectives])
    finite = np.isfinite(obj).all(axis=1)
    feasible = fits & cons_ok & finite
    reason = np.asarray(out.get("infeasible_reason", np.full(n, "", dtype=object)), dtype=object).astype(str)
    hw_bad = ~np.asarray(out.get("hw_fits", np.ones(n, bool)), dtype=bool)
    oom = np.char.startswith(reason, OOM_REASON_PREFIX)
    mem = np.asarray(out.get("mem_per_gpu_bytes", np.full(n, np.nan)), dtype=float)
    cap = np.asarray(out.get("memory_capacity_bytes", np.full(n, np.nan)), dtype=float)
    with np.errstate(all="ignore"):
        over = np.clip(np.nan_to_num(mem / cap - 1.0, nan=10.0, posinf=10.0), 0, 10)
    row_v = np.where(feasible, 0.0,
             np.where(hw_bad, V_HW,
             np.where(~fits & oom, 1.0 + over,
             np.where(~fits, V_STRUCT,
             np.where(~finite, V_STRUCT, 1e-3 + np.minimum(graded, 0.999))))))
    # best row per outer point: feasible first, then lexicographic objectives, then least violation
    sign = np.array([1.0 if s == "min" else -1.0 for s in st.senses])
    keyed = np.where(np.isfinite(obj), obj * sign, np.inf)
    keys = [np.arange(n)] + [keyed[:, j] for j in range(k - 1, -1, -1)] + [row_v, own]
    order = np.lexsort(keys)
    first = np.unique(own[order], return_index=True)[1]
    pick = order[first]                       # one row per outer point that has rows
    pts = own[pick]
    counts = np.bincount(own[feasible], minlength=B)
    n_feasible[:] = counts
    violation[pts] = np.maximum(violation[pts], row_v[pick])
    fe = row_v[pick] == 0
    values[pts[fe]] = obj[pick[fe]]
    # rows: the chosen mapping of points with rows; outer columns only for the others
    rows = {}
    for c, v in out.items():
        arr = v[pick] if isinstance(v, pd.Categorical) else np.asarray(v)[pick]
        full = _scatter(arr, pts, B)
        rows[c] = full
    for c, v in outer.items():
        rows[c] = np.asarray(v)
    return _finish_rows(st, rows, B, values, violation, sizes, n_feasible)


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


def _finish_rows(st, rows, B, values, violation, sizes, n_feasible):
    rows["feasible"] = violation == 0
    rows["violation"] = violation.astype(float)
    rows["n_mappings"] = sizes.astype(np.int64)
    rows["n_feasible_mappings"] = n_feasible.astype(np.int64)
    if "fits" in rows:
        rows["fits"] = np.asarray(rows["fits"], dtype=bool)
    return rows, values, violation


def _evaluate_rows(st: Study, batch: dict, n: int) -> dict:
    from dse.hardware import workload_costs
    with np.errstate(all="ignore"):
        if st.kind == "training":
            from dse.perf.training import evaluate_training
            out = evaluate_training(batch)
            tps = np.asarray(out["tokens_per_s"], dtype=float)
            tok = np.broadcast_to(np.asarray(out.get("train_tokens", np.nan), dtype=float), (n,))
            out["time_to_train_s"] = tok / tps
            out["time_to_train_days"] = out["time_to_train_s"] / 86400.0
            if "cost_per_run_usd" not in out:  # older evaluator without the cost columns
                out.update(workload_costs(out, out["step_time_s"], out["tokens_per_step"], out["gpus"]))
        else:
            from dse.perf.inference import evaluate_inference
            out = evaluate_inference(batch)
            if "cost_per_million_tokens_usd" not in out:
                batch_sz = np.asarray(out.get("batch", 1), dtype=float)
                osl = np.asarray(out.get("osl", 1), dtype=float)
                gpus = np.asarray(out.get("gpus", 1), dtype=float)
                out.update(workload_costs(out, out["e2e_latency_s"], batch_sz * osl, gpus))
            if "hw_fits" in out:
                out["fits"] = np.asarray(out["fits"], dtype=bool) & np.asarray(out["hw_fits"], dtype=bool)
    return dict(out)


# ----------------------------------------------------------------------------- storage

def _redact(url: str | None) -> str | None:
    if not url or "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    cred, host = rest.rsplit("@", 1)
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"


def _normal_url(url: str) -> str:
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def open_storage(st: Study, out: Path):
    """(Optuna storage, lock context factory). ConfigError if a URL is unreachable or unknown."""
    import optuna
    url = st.storage
    if url is None or url.startswith("journal:") or url.endswith(".log"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage
        path = Path(url.split(":", 1)[1]) if url and url.startswith("journal:") else \
            Path(url) if url else out / "journal.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFileBackend(str(path)))
        lockfile = path.parent / ".ask.lock"
        return storage, lambda: _file_lock(lockfile)
    url = _normal_url(url)
    if not url.startswith(("postgresql", "mysql", "sqlite")):
        raise ConfigError(f"storage: '{_redact(url)}' is not a supported URL; use postgresql+psycopg://user@host:port/db "
                          "or leave it out for the journal file under results/<study>/")
    import sqlalchemy
    kwargs = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        kwargs["connect_args"] = {"connect_timeout": 5}
    try:
        eng = sqlalchemy.create_engine(url, **kwargs)
        with eng.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any driver error means: cannot use this storage
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"storage: cannot reach {_redact(url)} ({first[:160]}); check host, port, "
                          "user and that the server is running") from None
    if url.startswith("postgresql"):  # workers starting together on a fresh database: one creates the schema
        with _pg_lock(eng, 0x647365_0001):
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    else:
        storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    if url.startswith("postgresql"):
        key = int(hashlib.sha256(("dse-study:" + st.name).encode()).hexdigest()[:15], 16)
        return storage, lambda: _pg_lock(eng, key)
    return storage, lambda: contextlib.nullcontext()


@contextlib.contextmanager
def _file_lock(path: Path):
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def _pg_lock(engine, key: int):
    import sqlalchemy
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()


def make_sampler(st: Study, seed: int):
    import optuna
    if st.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=st.batch_size, seed=seed)
    if st.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=max(10, st.batch_size))
    if st.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=max(10, st.batch_size))
    return optuna.samplers.RandomSampler(seed=seed)


def distributions(st: Study) -> dict:
    import optuna.distributions as D
    out = {}
    for pname, col, kind, vals in st.params:
        if kind == "int":
            step = vals[1] - vals[0]
            out[pname] = D.IntDistribution(vals[0], vals[-1], step=step)
        elif kind == "log2":
            out[pname] = D.IntDistribution(int(math.log2(vals[0])), int(math.log2(vals[-1])))
        else:
            out[pname] = D.CategoricalDistribution(list(vals))
    return out


# ----------------------------------------------------------------------------- the loop

@dataclass
class StudyResult:
    study: Study
    out: Path
    trials: pd.DataFrame
    front: pd.DataFrame
    n_trials: int
    evaluated_here: int
    wall_s: float
    check: dict | None = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphans(trials, host: str, stale_s: float, now: float) -> list:
    from optuna.trial import TrialState
    out = []
    for t in trials:
        if t.state != TrialState.RUNNING:
            continue
        ua = t.user_attrs
        if ua.get("host") == host and isinstance(ua.get("pid"), int) and not _alive(ua["pid"]):
            out.append(t)
        elif now - float(ua.get("asked_at", 0.0)) > stale_s:
            out.append(t)
    return out


def _penalties(st: Study, done_values: list, batch_values: np.ndarray) -> np.ndarray:
    """Finite penalty per objective: the worst feasible value seen plus the spread (1e30 if none)."""
    k = len(st.objectives)
    sign = np.array([1.0 if s == "min" else -1.0 for s in st.senses])
    vals = [np.asarray(v, dtype=float) for v in done_values]
    fb = batch_values[np.isfinite(batch_values).all(axis=1)] if len(batch_values) else np.zeros((0, k))
    allv = np.vstack(vals + [fb]) if vals or len(fb) else np.zeros((0, k))
    if len(allv) == 0:
        return sign * PENALTY
    m = allv * sign
    worst, best = m.max(axis=0), m.min(axis=0)
    return sign * (worst + (worst - best) + np.abs(worst) * 0.1 + 1.0)


def run_study(study, budget: int | None = None, storage: str | None = None, out=None,
              worker: bool = False, seed: int | None = None, exhaustive_check: bool = False,
              progress=None, write_outputs: bool = True, max_batches: int | None = None) -> StudyResult:
    """Run (or join, or resume) a study until all workers together made `budget` trials."""
    import optuna
    from optuna.trial import Trial, TrialState

    t0 = time.perf_counter()
    st = load_study(study, budget=budget, storage=storage)
    out = Path(out) if out is not None else st.default_out
    out.mkdir(parents=True, exist_ok=True)
    tdir = out / "trials"
    tdir.mkdir(exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    stor, lock = open_storage(st, out)
    directions = ["minimize" if s == "min" else "maximize" for s in st.senses]
    with lock():
        ostudy = optuna.create_study(storage=stor, study_name=st.name, directions=directions, load_if_exists=True)
        ua = ostudy.user_attrs
        if not ua.get("dse_hash"):
            ostudy.set_user_attr("dse_hash", st.hash)
            ostudy.set_user_attr("dse_objectives", [f"{c}:{s}" for c, s in zip(st.objectives, st.senses)])
        elif ua["dse_hash"] != st.hash:
            raise ConfigError(f"{st.source}: the storage already holds a study '{st.name}' made from a different "
                              f"study file (hash {ua['dse_hash'][:12]} vs {st.hash[:12]}); rename the study or "
                              f"remove {out}/journal.log (or the database study)")
        if [d.name.lower()[:3] for d in ostudy.directions] != [s for s in st.senses]:
            raise ConfigError(f"{st.source}: objectives: directions differ from the stored study's; rename the study")
    manifest = _manifest(st, out)
    store._write_json_atomic(tdir / store.MANIFEST, manifest)
    n_existing = len(ostudy.get_trials(deepcopy=False))
    if seed is None:
        seed = st.seed + n_existing if not worker else (st.seed * 1_000_003 + os.getpid() * 7919 + time.time_ns()) % (2**31)
    ostudy.sampler = make_sampler(st, int(seed))
    dists = distributions(st)
    wid = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    host, pid = socket.gethostname(), os.getpid()
    cache: dict = {}
    evaluated = 0
    show = (sys.stderr.isatty() and not os.environ.get("CI")) if progress is None else bool(progress)
    batches = 0
    while True:
        if max_batches is not None and batches >= max_batches:
            break
        with lock():
            trials = ostudy.get_trials(deepcopy=False)
            now = time.time()
            adopt = _orphans(trials, host, st.stale_after_s, now)[: st.batch_size]
            todo = []
            for ft in adopt:
                tr = Trial(ostudy, ft._trial_id)
                tr.set_user_attr("worker", wid)
                tr.set_user_attr("host", host)
                tr.set_user_attr("pid", pid)
                tr.set_user_attr("asked_at", now)
                tr.set_user_attr("adopted", True)
                todo.append(tr)
            k = min(st.batch_size - len(todo), st.budget - len(trials))
            for _ in range(max(0, k)):
                tr = ostudy.ask()
                tr.set_user_attr("worker", wid)
                tr.set_user_attr("host", host)
                tr.set_user_attr("pid", pid)
                tr.set_user_attr("asked_at", now)
                todo.append(tr)
            # suggest inside the lock: a killed worker leaves complete parameters behind
            params = []
            for tr in todo:
                p = {}
                for pname, d in dists.items():
                    p[pname] = tr._suggest(pname, d)
                params.append(p)
            done_values = [t.values for t in trials if t.state == TrialState.COMPLETE
                           and all(v <= 0 for v in t.constraints.values()) and t.values is not None]
        if not todo:
            break
        batches += 1
        if os.environ.get("DSE_STUDY_PAUSE_S"):  # tests: a window to kill a worker mid-batch
            time.sleep(float(os.environ["DSE_STUDY_PAUSE_S"]))
        cols = outer_columns_from_params(st, params)
        rows, values, violation = evaluate_outer(st, cols, cache)
        n = len(todo)
        rows["trial"] = np.array([tr.number for tr in todo], dtype=np.int64)
        rows["worker"] = np.full(n, wid, dtype=object)
        pen = _penalties(st, done_values, values)
        told = np.where(np.isfinite(values).all(axis=1)[:, None] & (violation == 0)[:, None], values, pen[None, :])
        for c in st.objectives:
            if c not in rows:
                rows[c] = np.full(n, np.nan)
        table = store.to_arrow(_ordered(rows, st), None, keep_catalog=True,
                               metadata={store.META_KEY: json.dumps(manifest, default=str)})
        part_id = int(min(tr.number for tr in todo)) * 1_000_000 + int.from_bytes(os.urandom(3), "big") % 1_000_000
        store.write_part(tdir, part_id, table)       # rows first, then tell: a kill in between re-evaluates
        for i, tr in enumerate(todo):
            try:
                _set_constraint(tr, float(violation[i]))
                ostudy.tell(tr, [float(x) for x in told[i]], skip_if_finished=True)
            except RuntimeError:  # finished meanwhile by a worker that adopted it: its rows are identical
                pass
        evaluated += n
        if show:
            done = min(len(trials) + k, st.budget)
            print(f"\r{st.name}: {done}/{st.budget} trials", end="", file=sys.stderr, flush=True)
    if show:
        print(file=sys.stderr)
    frame = read_trials(out)
    front = pareto_rows(st, frame)
    check = None
    if exhaustive_check:
        check = run_exhaustive_check(st, out, frame)
    wall = time.perf_counter() - t0
    if write_outputs:
        write_outputs_fn(st, out, frame, front, manifest, wall, check)
    return StudyResult(st, out, frame, front, len(ostudy.get_trials(deepcopy=False)), evaluated, wall, check)


def _set_constraint(tr, v: float) -> None:
    if hasattr(tr, "set_constraint"):
        if "violation" not in tr.constraints:
            tr.set_constraint("violation", v)
    else:  # Optuna 4.x: the list-valued system attribute read by the samplers
        from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
        tr.storage.set_trial_system_attr(tr._trial_id, _CONSTRAINTS_KEY, (v,))


def _ordered(rows: dict, st: Study) -> dict:
    first = ["trial", "worker", "feasible", "violation"] + list(st.objectives)
    keys = [c for c in first if c in rows] + [c for c in rows if c not in first]
    out = {}
    for c in keys:
        v = rows[c]
        a = np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else np.asarray(v)
        if a.dtype.kind == "O":
            a = np.array([None if x is None or (isinstance(x, float) and math.isnan(x)) else str(x) for x in a], dtype=object)
        out[c] = a
    return out


def _manifest(st: Study, out: Path) -> dict:
    from dse import __version__
    return {
        "dse_version": __version__,
        "study": {"name": st.name, "file": st.source, "hash": st.hash, "content": st.canonical},
        "objectives": [f"{c}:{s}" for c, s in zip(st.objectives, st.senses)],
        "sampler": st.sampler, "budget": st.budget, "batch_size": st.batch_size, "seed": st.seed,
        "storage": _redact(st.storage) or str(out / "journal.log"),
        "best_mapping_rule": "lexicographic over the objectives in file order among feasible mappings",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": store._git_revision(),
        "packages": store._package_versions(),
    }


# ----------------------------------------------------------------------------- results

def read_trials(out) -> pd.DataFrame:
    """The union of every worker's Parquet rows, one row per trial (the last written), by trial."""
    tdir = Path(out) / "trials"
    files = store.part_files(tdir) if tdir.is_dir() else []
    if not files:
        return pd.DataFrame(columns=list(ID_COLUMNS))
    import pyarrow as pa
    import pyarrow.parquet as pq
    tables = []
    for f in files:
        t = pq.read_table(f)
        t = t.append_column("_order", pa.array(np.full(t.num_rows, f.stat().st_mtime_ns, np.int64)))
        tables.append(t)
    df = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    df = df.sort_values(["trial", "_order"], kind="stable").drop_duplicates("trial", keep="last")
    return df.drop(columns="_order").reset_index(drop=True)


def pareto_rows(st: Study, frame: pd.DataFrame) -> pd.DataFrame:
    from dse.pareto import pareto_mask
    if frame.empty or "feasible" not in frame:
        return frame.iloc[0:0]
    feas = frame[frame["feasible"].astype(bool)]
    if feas.empty:
        return feas
    v = feas[st.objectives].to_numpy(dtype=float)
    m = pareto_mask(v, st.senses)
    sort_sign = 1 if st.senses[0] == "min" else -1
    front = feas[m]
    return front.iloc[np.argsort(sort_sign * front[st.objectives[0]].to_numpy(dtype=float), kind="stable")]


def write_outputs_fn(st: Study, out: Path, frame: pd.DataFrame, front: pd.DataFrame, manifest: dict,
                     wall_s: float, check: dict | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    meta = {store.META_KEY: json.dumps(manifest, default=str).encode()}
    for name, df in (("trials.parquet", frame), ("pareto.parquet", front)):
        t = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
        t = t.replace_schema_metadata({**(t.schema.metadata or {}), **meta})
        tmp = out / f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        pq.write_table(t, tmp, compression=store.COMPRESSION)
        os.replace(tmp, out / name)
    if len(frame):
        plot_front(st, frame, front, out / "pareto.png",
                   true_front=None if check is None else check.get("_true_front"))
    m = dict(manifest)
    m.update(trials=int(len(frame)), feasible=int(frame["feasible"].astype(bool).sum()) if len(frame) else 0,
             front=int(len(front)), complete=bool(len(frame) >= st.budget),
             last_session_wall_s=round(float(wall_s), 3),
             finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    if check is not None:
        m["exhaustive_check"] = {k: v for k, v in check.items() if not k.startswith("_")}
    store._write_json_atomic(out / store.MANIFEST, m)


UNITS = {"_days": "days", "_usd": "USD", "_s": "s", "_bytes": "bytes", "_j": "J", "_w": "W",
         "_per_s": "1/s", "_mm2": "mm²"}
LABELS = {"time_to_train_days": "time to train (days)", "time_to_train_s": "time to train (s)",
          "cost_per_run_usd": "cost per run (USD)", "cost_per_million_tokens_usd": "cost per million tokens (USD)",
          "tokens_per_s": "training throughput (tokens/s)", "output_tokens_per_s": "output tokens/s",
          "step_time_s": "step time (s)", "system_capex_usd": "system capex (USD)", "energy_j": "energy per step (J)",
          "mem_per_gpu_bytes": "memory per GPU (bytes)", "mfu": "MFU (fraction)", "tdp_w": "TDP per GPU (W)"}


def label(col: str) -> str:
    if col in LABELS:
        return LABELS[col]
    for suf, unit in sorted(UNITS.items(), key=lambda kv: -len(kv[0])):
        if col.endswith(suf):
            return f"{col[: -len(suf)].replace('_', ' ')} ({unit})"
    return col.replace("_", " ")


def plot_front(st: Study, frame: pd.DataFrame, front: pd.DataFrame, path: Path, true_front: pd.DataFrame | None = None) -> None:
    """pareto.png: trials and the front. One objective: value per trial. Two: the front as a
    staircase. Three or more: one panel per pair of objectives (the front is non-dominated in the
    full space, so in a projection its points are highlighted, not joined)."""
    import itertools

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    feas = frame["feasible"].astype(bool).to_numpy()
    pairs = list(itertools.combinations(range(len(st.objectives)), 2)) or [None]
    cols = min(len(pairs), 3)
    rows = -(-len(pairs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 if cols == 1 else 5.2 * cols, 5.2 * rows), dpi=110, squeeze=False)
    for ax, pair in zip(axes.flat, pairs):
        if pair is None:
            _single_objective_panel(ax, st, frame, front, feas)
        else:
            _pair_panel(ax, st, frame, front, feas, *pair, true_front=true_front if len(pairs) == 1 else None,
                        staircase=len(pairs) == 1)
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    fig.suptitle(f"{st.name}: {len(frame)} outer trials, {int(feas.sum())} feasible, sampler {st.sampler}", fontsize=11)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)


def _single_objective_panel(ax, st: Study, frame: pd.DataFrame, front: pd.DataFrame, feas: np.ndarray) -> None:
    c = st.objectives[0]
    y = frame[c].to_numpy(dtype=float)
    x = frame["trial"].to_numpy()
    ax.scatter(x[feas], y[feas], s=14, c="#7fa7d4", label="feasible trials")
    ax.scatter(x[~feas], y[~feas], s=14, marker="x", c="#999999", label="infeasible trials")
    if len(front):
        ax.scatter(front["trial"], front[c], s=60, c="#d62728", label="best")
    ax.set_xlabel("trial number")
    ax.set_ylabel(label(c))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="best")


def _pair_panel(ax, st: Study, frame: pd.DataFrame, front: pd.DataFrame, feas: np.ndarray, i: int, j: int,
                true_front: pd.DataFrame | None, staircase: bool) -> None:
    cx, cy = st.objectives[i], st.objectives[j]
    x, y = frame[cx].to_numpy(dtype=float), frame[cy].to_numpy(dtype=float)
    dom = feas.copy()
    if len(front):
        dom &= ~frame["trial"].isin(front["trial"]).to_numpy()
    inf = ~feas & np.isfinite(x) & np.isfinite(y)
    ax.scatter(x[inf], y[inf], s=16, marker="x", c="#aaaaaa", linewidths=0.8,
               label=f"infeasible ({int((~feas).sum())}; least-violating mapping shown)")
    ax.scatter(x[dom], y[dom], s=16, c="#7fa7d4", alpha=0.8, label=f"dominated ({int(dom.sum())})")
    if true_front is not None and len(true_front):
        tf = true_front.sort_values(cx)
        ax.plot(tf[cx], tf[cy], "--", c="#2ca02c", lw=1, drawstyle="steps-post", label="true front (exhaustive)")
    if len(front):
        fr = front.sort_values(cx)
        if staircase:
            ax.plot(fr[cx], fr[cy], "-", c="#d62728", lw=1.2, drawstyle="steps-post")
        ax.scatter(fr[cx], fr[cy], s=46, c="#d62728", edgecolors="black", linewidths=0.5, zorder=3,
                   label=f"Pareto front ({len(fr)} trials, {len(fr[list(st.objectives)].drop_duplicates())} distinct points)")
    for arr, setter in ((x[feas | inf], ax.set_xscale), (y[feas | inf], ax.set_yscale)):
        a = arr[np.isfinite(arr) & (arr > 0)]
        if len(a) and a.max() / max(a.min(), 1e-300) > 30:
            setter("log")
    for axis in ("x", "y"):  # large linear values (dollars) in scientific notation, not run together
        if getattr(ax, f"get_{axis}scale")() == "linear":
            ax.ticklabel_format(axis=axis, style="sci", scilimits=(-3, 4), useMathText=True)
    ax.set_xlabel(label(cx) + (" [min]" if st.senses[i] == "min" else " [max]"))
    ax.set_ylabel(label(cy) + (" [min]" if st.senses[j] == "min" else " [max]"))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="best")


def front_table(st: Study, front: pd.DataFrame, max_rows: int = 40) -> str:
    """The front as a text table: objectives first, then the outer choices and the best mapping."""
    if front.empty:
        return "(no feasible point yet)"
    outer_cols = [c for _, c, _, _ in st.params] + [c for c, _, _ in st.derived_outer]
    inner_cols = [c for c in (st.inner.get("axes") or {}) if c in front.columns]
    cols = ["trial"] + list(st.objectives) + [c for c in outer_cols if c in front.columns] + inner_cols
    for extra in ("mfu", "tdp_w"):
        if extra in front.columns and extra not in cols:
            cols.append(extra)
    df = front[cols].copy()
    df = df.loc[~df.drop(columns="trial").astype(str).duplicated()].head(max_rows)
    for c in df.columns:
        if df[c].dtype.kind == "f":
            df[c] = df[c].map(lambda v: f"{v:.4g}")
    return df.to_string(index=False)


# ----------------------------------------------------------------------------- exhaustive check

def enumerate_outer(st: Study) -> dict:
    """Every point of the outer space (ConfigError if it is not enumerable)."""
    sp = st.outer_space
    if sp is None or not sp.exact:
        raise ConfigError(f"{st.source}: outer: --exhaustive-check needs an enumerable outer space "
                          "(values/range/pow2/derive axes, constraints linking fewer than 20M combinations)")
    if sp.size > MAX_EXHAUSTIVE:
        raise ConfigError(f"{st.source}: outer: {sp.size:,} points is too many for --exhaustive-check "
                          f"(limit {MAX_EXHAUSTIVE:,}); restrict the outer axes")
    ch = sp.chunk(0, sp.size)
    return {k: (np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else np.asarray(v)) for k, v in ch.items()}


def _outer_key_frame(st: Study, df: pd.DataFrame) -> pd.Series:
    cols = [c for _, c, _, _ in st.params]
    return df[cols].astype(str).agg("|".join, axis=1)


def run_exhaustive_check(st: Study, out: Path, trials: pd.DataFrame, batch: int = 512) -> dict:
    """Sweep the whole outer space; hypervolume ratio of the study's front to the true front."""
    from dse.pareto import hypervolume, pareto_mask
    path = out / "exhaustive.parquet"
    allo = enumerate_outer(st)
    N = len(next(iter(allo.values())))
    ex = None
    if path.is_file():
        import pyarrow.parquet as pq
        meta = pq.read_schema(path).metadata or {}
        if meta.get(b"dse.study_hash", b"").decode() == st.hash:
            ex = pd.read_parquet(path)
    if ex is None:
        cache: dict = {}
        parts = []
        for s in range(0, N, batch):
            sub = {k: v[s:s + batch] for k, v in allo.items()}
            rows, values, violation = evaluate_outer(st, sub, cache)
            parts.append(pd.DataFrame(_ordered(rows, st)))
        ex = pd.concat(parts, ignore_index=True)
        import pyarrow as pa
        import pyarrow.parquet as pq
        t = pa.Table.from_pandas(ex, preserve_index=False)
        t = t.replace_schema_metadata({**(t.schema.metadata or {}), b"dse.study_hash": st.hash.encode()})
        tmp = out / f".exhaustive.{os.getpid()}.tmp"
        pq.write_table(t, tmp, compression=store.COMPRESSION)
        os.replace(tmp, path)
    feas = ex[ex["feasible"].astype(bool)]
    tv = feas[st.objectives].to_numpy(dtype=float)
    true_front = feas[pareto_mask(tv, st.senses)] if len(feas) else feas
    sf = pareto_rows(st, trials)
    result = hv_ratio(st, true_front[st.objectives].to_numpy(dtype=float), sf[st.objectives].to_numpy(dtype=float))
    space_keys = set(_outer_key_frame(st, ex))
    study_keys = set(_outer_key_frame(st, trials)) if len(trials) else set()
    result.update(outer_points=int(N), trials=int(len(trials)),
                  unique_outer_points_evaluated=int(len(study_keys & space_keys)),
                  evaluated_fraction=float(len(study_keys & space_keys) / N) if N else 0.0,
                  trials_fraction=float(len(trials) / N) if N else 0.0,
                  true_front_points=int(len(true_front)), study_front_points=int(len(sf)),
                  feasible_outer_points=int(len(feas)))
    result["_true_front"] = true_front   # for the plot; not written to the manifest
    return result


def hv_ratio(st: Study, true_vals: np.ndarray, study_vals: np.ndarray) -> dict:
    """Hypervolume of the study front / the true front, with a common reference point: per objective,
    the worst value over both fronts plus 10% of their combined range (in the objective's sense)."""
    from dse.pareto import hypervolume
    k = len(st.objectives)
    if k < 2:
        raise ConfigError("exhaustive check: the hypervolume ratio needs 2 or 3 objectives")
    if len(true_vals) == 0:
        return {"hypervolume_ratio": float("nan"), "reference_point": None}
    both = np.vstack([true_vals, study_vals]) if len(study_vals) else true_vals
    sign = np.array([1.0 if s == "min" else -1.0 for s in st.senses])
    m = both * sign
    worst, best = m.max(axis=0), m.min(axis=0)
    ref_min = worst + 0.1 * np.where(worst > best, worst - best, np.maximum(np.abs(worst), 1.0))
    ref = ref_min * sign
    hv_true = hypervolume(true_vals, ref, st.senses)
    hv_study = hypervolume(study_vals, ref, st.senses) if len(study_vals) else 0.0
    return {"hypervolume_ratio": float(hv_study / hv_true) if hv_true > 0 else float("nan"),
            "hypervolume_study": float(hv_study), "hypervolume_true": float(hv_true),
            "reference_point": [float(x) for x in ref]}
