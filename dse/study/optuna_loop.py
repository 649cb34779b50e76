"""The Optuna loop: ask a batch of new designs under the storage lock, evaluate them, write their
rows, tell.

Designs, not trials: a design is a distinct outer point (the tuple of the outer parameters). The
first trial of a design is evaluated; every later trial that proposes the same point (the sampler
may repeat itself) is a repeat: it is told the values, constraint and result attribute of its
design, is never evaluated and writes no row. The budget is a number of designs: under the lock a
worker counts the designs in the storage and asks until it has budget - count new ones. A repeat
of a design still being evaluated (by this worker or another) stays RUNNING until its design is
told: whoever tells a design tells, under the same lock, every RUNNING repeat of it. When the
sampler keeps repeating itself (REPEAT_STREAK repeats in a row), the next design is an unvisited
point drawn at random (seeded), so a discrete outer space is sampled without replacement; once
every point is a design the study stops short of its budget.

Workers: orphans (RUNNING designs of a dead worker on this host, or older than stale_after_s) are
adopted: their stored parameters are evaluated again and told. Infeasible points are told with
finite penalty values and a positive violation in the trial's `constraints` system attribute (the
list Optuna's samplers, `optuna.visualization` and optuna-dashboard all read), never as FAIL.

For Optuna's own tools: the study's metric names are the objective columns, the parameters are the
outer axes as the study file names them, and every trial carries one user attribute `dse_result`
(its best mapping, key metrics, feasibility; `repeat_of` on a repeat), written at tell time.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dse import store
from dse.errors import ConfigError
from dse.study.check import run_exhaustive_check, start_exhaustive
from dse.study.nested import evaluate_outer, outer_columns_from_params
from dse.study.progress import Progress
from dse.study.results import check_out, make_manifest, ordered, pareto_rows, prepare_out, read_trials
from dse.study.results import write_outputs as write_result_files
from dse.study.spec import Study, load_study
from dse.study.designs import CONSTRAINTS_ATTR, RESULT_ATTR, design_key, first_trials, tell_repeat, unvisited
from dse.study.storage import open_storage
from dse.study.workers import BATCH_ATTR, askers, is_orphan

PENALTY = 1e30
REPEAT_STREAK = 8                 # repeats in a row before the next design is drawn among unvisited points
KEY_METRICS = ("step_time_s", "tokens_per_s", "mfu", "mem_per_gpu_bytes", "tdp_w", "system_capex_usd",
               "ttft_s", "tpot_s", "output_tokens_per_s", "cost_per_million_tokens_usd",
               "n_mappings", "n_feasible_mappings", "infeasible_reason")


@dataclass
class StudyResult:
    study: Study
    out: Path
    trials: pd.DataFrame          # one row per design (distinct outer point)
    front: pd.DataFrame
    n_trials: int                 # Optuna trials in the storage (designs + repeats)
    evaluated_here: int           # designs evaluated by this call
    wall_s: float
    check: dict | None = None
    repeats_here: int = 0         # sampler proposals of known designs told from stored values

    @property
    def n_designs(self) -> int:
        return int(len(self.trials))


def make_sampler(st: Study, seed: int):
    import optuna
    opts = dict(st.sampler_options)
    if st.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(**{"population_size": st.batch_size, **opts}, seed=seed)
    if st.sampler == "tpe":
        return optuna.samplers.TPESampler(**{"multivariate": True, "constant_liar": True,
                                             "n_startup_trials": max(10, st.batch_size), **opts}, seed=seed)
    if st.sampler == "gp":
        return optuna.samplers.GPSampler(**{"n_startup_trials": max(10, st.batch_size), **opts}, seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def distributions(st: Study) -> dict:
    import optuna.distributions as D
    out = {}
    for pname, col, kind, vals in st.params:
        if kind == "int":
            step = vals[1] - vals[0]
            out[pname] = D.IntDistribution(vals[0], vals[-1], step=step)
        else:
            out[pname] = D.CategoricalDistribution(list(vals))
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


def _open_study(st: Study, stor, lock, out: Path):
    import optuna
    directions = ["minimize" if s == "min" else "maximize" for s in st.senses]
    with lock():
        ostudy = optuna.create_study(storage=stor, study_name=st.name, directions=directions, load_if_exists=True)
        ua = ostudy.user_attrs
        if not ua.get("dse_hash"):
            ostudy.set_user_attr("dse_hash", st.hash)
            ostudy.set_user_attr("dse_objectives", [f"{c}:{s}" for c, s in zip(st.objectives, st.senses)])
            ostudy.set_metric_names(list(st.objectives))
        elif ua["dse_hash"] != st.hash:
            raise ConfigError(f"{st.source}: the storage already holds a study '{st.name}' made from a different "
                              f"study file (hash {ua['dse_hash'][:12]} vs {st.hash[:12]}); rename the study or "
                              f"remove {out}/journal.log (or the database study)")
        if [d.name.lower()[:3] for d in ostudy.directions] != [s for s in st.senses]:
            raise ConfigError(f"{st.source}: objectives: directions differ from the stored study's; rename the study")
    return ostudy


def _feasible_done(t) -> bool:
    from optuna.trial import TrialState
    if t.state != TrialState.COMPLETE or t.values is None:
        return False
    return all(v <= 0 for v in t.constraints.values())


def _adopt(ostudy, ft):
    """A Trial handle on an orphaned RUNNING trial (its parameters are already stored)."""
    from optuna.trial import Trial
    return Trial(ostudy, ft._trial_id)  # Optuna has no public lookup of a running trial by number


def _complete_params(tr, ft, dists: dict) -> dict:
    """An adopted trial's stored parameters; any its worker did not store are suggested now."""
    import optuna.distributions as D
    params = dict(ft.params)
    for name, d in dists.items():
        if name not in params:
            params[name] = (tr.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
                            if isinstance(d, D.IntDistribution) else tr.suggest_categorical(name, d.choices))
    return params


@dataclass
class _Asked:
    todo: list          # trials to evaluate (new designs and adopted orphans)
    params: list
    done_values: list   # values of the feasible finished trials (for the penalties)
    designs: int        # designs in the storage after this ask
    repeats: int        # proposals of known designs told now
    exhausted: bool     # every point of the outer space is a design


def _ask_batch(st: Study, ostudy, dists: dict, attrs: dict, rng) -> _Asked:
    """Under the lock: adopt orphans, tell finished designs' repeats, ask new designs."""
    from optuna.trial import TrialState
    trials = ostudy.get_trials(deepcopy=False)
    now = time.time()
    whole = [t for t in trials if set(dists) <= set(t.params)]   # a worker killed mid-ask leaves a part
    known = first_trials(st, whole)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    who = askers(ostudy) if running else {}
    todo, params, adopted, repeats = [], [], [], 0
    for t in running:
        design = known.get(design_key(st, t.params)) if t.params else None
        if design is not None and design.number != t.number:       # a repeat
            if design.state == TrialState.COMPLETE:                 # its teller died before telling it
                tell_repeat(ostudy, _adopt(ostudy, t), design)
        elif len(todo) < st.batch_size and is_orphan(t, who, attrs["host"], st.stale_after_s, now):
            trial = _adopt(ostudy, t)
            p = _complete_params(trial, t, dists)
            first = known.setdefault(design_key(st, p), t)
            if first.number != t.number:   # its parameters, completed, make it a repeat of a known design
                repeats += 1
                if first.state == TrialState.COMPLETE:
                    tell_repeat(ostudy, trial, first)
                continue                   # else told with that design (_tell tells its running repeats)
            todo.append(trial)
            params.append(p)
            adopted.append(t.number)
    need = min(st.batch_size - len(todo), st.budget - len(known))
    asked, streak, exhausted = [], 0, False
    while len(asked) < need:
        if streak >= REPEAT_STREAK:  # the sampler keeps repeating itself: an unvisited point next
            fresh = unvisited(st, known, rng)
            if fresh is None:
                exhausted = True
                break
            ostudy.enqueue_trial(fresh, skip_if_exists=False)
            streak = 0
        tr = ostudy.ask(fixed_distributions=dists)  # inside the lock: a killed worker leaves whole parameters
        key = design_key(st, tr.params)
        design = known.get(key)
        if design is None:
            known[key] = tr
            asked.append(tr)
            streak = 0
            continue
        streak += 1
        repeats += 1
        if getattr(design, "state", None) == TrialState.COMPLETE:
            tell_repeat(ostudy, tr, design)
        # else: a repeat of a design being evaluated; told with it (see _tell)
    params += [dict(tr.params) for tr in asked]
    todo += asked
    if todo:  # one journal entry per batch: who asked which trials, where, when (orphan adoption reads it)
        numbers = [tr.number for tr in todo]
        ostudy.set_user_attr(f"{BATCH_ATTR}{numbers[0]}-{attrs['worker']}",
                             {**attrs, "asked_at": now, "trials": numbers, "adopted": adopted})
    done_values = [t.values for t in trials if _feasible_done(t)]
    return _Asked(todo, params, done_values, len(known), repeats, exhausted)


def _json_value(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _result_attrs(st: Study, rows: dict, i: int) -> dict:
    """The `dse_result` user attribute of the i-th trial of a batch (JSON-safe)."""
    inner = [c for c in (st.inner.get("axes") or {}) if c in rows]
    metrics = [c for c in list(st.objectives) + list(KEY_METRICS) if c in rows]
    return {"feasible": bool(rows["feasible"][i]), "violation": float(rows["violation"][i]),
            "mapping": {c: _json_value(np.asarray(rows[c], dtype=object)[i]) for c in inner},
            "metrics": {c: _json_value(np.asarray(rows[c], dtype=object)[i]) for c in dict.fromkeys(metrics)}}


def _tell(st: Study, ostudy, todo: list, told: np.ndarray, violation: np.ndarray, results: list) -> None:
    """Under the lock: tell the batch's designs, then every RUNNING repeat of them (any worker's)."""
    from optuna.trial import TrialState
    stor = ostudy._storage
    told_keys = {}
    for i, tr in enumerate(todo):
        try:
            stor.set_trial_system_attr(tr._trial_id, CONSTRAINTS_ATTR, [float(violation[i])])
            stor.set_trial_user_attr(tr._trial_id, RESULT_ATTR, results[i])
            ostudy.tell(tr, [float(x) for x in told[i]], skip_if_finished=True)
        except RuntimeError:  # finished meanwhile by a worker that adopted it: its rows are identical
            pass
        told_keys[design_key(st, tr.params)] = tr.number
    trials = ostudy.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    for t in trials:
        if t.state == TrialState.RUNNING and t.params:
            n = told_keys.get(design_key(st, t.params))
            if n is not None and n != t.number:
                tell_repeat(ostudy, _adopt(ostudy, t), by_number[n])


def _run_batch(st: Study, todo, params, done_values, wid, manifest, tdir, cache):
    """Evaluate one asked batch and write its rows (before telling): (told values, violation,
    result attributes, rows)."""
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
    table = store.to_arrow(ordered(rows, st), None, keep_catalog=True,
                           metadata={store.META_KEY: json.dumps(manifest, default=str)})
    part_id = int(min(tr.number for tr in todo)) * 1_000_000 + int.from_bytes(os.urandom(3), "big") % 1_000_000
    store.write_part(tdir, part_id, table)       # rows first, then tell: a kill in between re-evaluates
    return told, violation, [_result_attrs(st, rows, i) for i in range(n)], rows


def _default_seed(st: Study, worker: bool, n_existing: int) -> int:
    if worker:
        return (st.seed * 1_000_003 + os.getpid() * 7919 + time.time_ns()) % (2**31)
    return st.seed + n_existing


def run_study(study, budget: int | None = None, storage: str | None = None, out=None,
              worker: bool = False, seed: int | None = None, exhaustive_check: bool = False,
              progress=None, write_outputs: bool = True, max_batches: int | None = None) -> StudyResult:
    """Run (or join, or resume) a study until all workers together evaluated `budget` designs."""
    import optuna
    t0 = time.perf_counter()
    st = load_study(study, budget=budget, storage=storage)
    out = Path(out) if out is not None else st.default_out
    check_out(st, out)  # another run's directory is refused before anything is created
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    stor, lock = open_storage(st, out)
    manifest = make_manifest(st, out)
    tdir = prepare_out(st, out, manifest)
    ostudy = _open_study(st, stor, lock, out)
    side, sweep = start_exhaustive(st, out) if exhaustive_check else (None, None)
    existing = ostudy.get_trials(deepcopy=False)
    seed = _default_seed(st, worker, len(existing)) if seed is None else seed
    ostudy.sampler = make_sampler(st, int(seed))
    rng = np.random.default_rng(int(seed))
    dists = distributions(st)
    wid = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    attrs = {"worker": wid, "host": socket.gethostname(), "pid": os.getpid()}
    cache: dict = {}
    evaluated = repeats = batches = 0
    bar = Progress(st, len(first_trials(st, existing)), enabled=progress)
    try:
        while max_batches is None or batches < max_batches:
            with lock():
                a = _ask_batch(st, ostudy, dists, attrs, rng)
            repeats += a.repeats
            if not a.todo:
                break
            batches += 1
            if os.environ.get("DSE_STUDY_PAUSE_S"):  # tests: a window to kill a worker mid-batch
                time.sleep(float(os.environ["DSE_STUDY_PAUSE_S"]))
            told, violation, results, rows = _run_batch(st, a.todo, a.params, a.done_values, wid, manifest, tdir, cache)
            with lock():
                _tell(st, ostudy, a.todo, told, violation, results)
            evaluated += len(a.todo)
            bar.update(a.designs, rows, repeats)
    finally:
        bar.close()
    frame = read_trials(out)
    front = pareto_rows(st, frame)
    n_trials = len(ostudy.get_trials(deepcopy=False))
    manifest = {**manifest, "budget_unit": "designs (distinct outer points)", "designs": int(len(frame)),
                "optuna_trials": int(n_trials), "repeats_told_from_stored_values": int(n_trials - len(frame))}
    try:
        if sweep is not None:
            sweep.result()  # exhaustive.parquet written by the side worker
        check = run_exhaustive_check(st, out, frame) if exhaustive_check else None
        wall = time.perf_counter() - t0
        if write_outputs:
            write_result_files(st, out, frame, front, manifest, wall, check, side)
    finally:
        if side is not None:
            side.close()
    return StudyResult(st, out, frame, front, n_trials, evaluated, wall, check, repeats)
