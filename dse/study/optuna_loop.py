"""The Optuna loop: ask a batch under the storage lock, evaluate it, write its rows, tell.

Budget across workers: under the lock a worker counts all trials in the storage and asks at
most budget - count. Orphans (RUNNING trials of a dead worker on this host, or older than
stale_after_s) are adopted: their stored parameters are evaluated again and told. Infeasible
points are told with finite penalty values and a positive constraint violation
(`Trial.set_constraint("violation", v)`), never as FAIL.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sys
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
from dse.study.results import make_manifest, ordered, pareto_rows, read_trials
from dse.study.results import write_outputs as write_result_files
from dse.study.spec import Study, load_study
from dse.study.storage import open_storage

PENALTY = 1e30
BATCH_ATTR = "dse_batch:"         # study user attribute per asked batch: {worker, host, pid, asked_at, trials}


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


def make_sampler(st: Study, seed: int):
    import optuna
    cons = {}  # Optuna >= 5: constraints set on the trial (Trial.set_constraint) reach every sampler
    if st.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=st.batch_size, seed=seed, **cons)
    if st.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=max(10, st.batch_size), **cons)
    if st.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=max(10, st.batch_size), **cons)
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _askers(ostudy) -> dict:
    """Trial number -> who asked it ({worker, host, pid, asked_at}), from the batch records."""
    who = {}
    records = [v for k, v in ostudy.user_attrs.items() if k.startswith(BATCH_ATTR)]
    for rec in sorted(records, key=lambda r: r.get("asked_at", 0.0)):  # a later adoption wins
        for number in rec.get("trials", ()):
            who[number] = rec
    return who


def _orphans(ostudy, trials, host: str, stale_s: float, now: float) -> list:
    from optuna.trial import TrialState
    out = []
    running = [t for t in trials if t.state == TrialState.RUNNING]
    who = _askers(ostudy) if running else {}
    for t in running:
        ua = who.get(t.number, {})
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


def _open_study(st: Study, stor, lock, out: Path):
    import optuna
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
    return ostudy


def _feasible_done(t) -> bool:
    from optuna.trial import TrialState
    if t.state != TrialState.COMPLETE or t.values is None:
        return False
    return all(v <= 0 for v in getattr(t, "constraints", {}).values())


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


def _ask_batch(st: Study, ostudy, dists: dict, attrs: dict) -> tuple[list, list, list, int]:
    """Under the lock: (trials to evaluate, their params, feasible values so far, trials seen)."""
    trials = ostudy.get_trials(deepcopy=False)
    now = time.time()
    todo, params = [], []
    adopted = []
    for ft in _orphans(ostudy, trials, attrs["host"], st.stale_after_s, now)[: st.batch_size]:
        todo.append(_adopt(ostudy, ft))
        params.append(_complete_params(todo[-1], ft, dists))
        adopted.append(ft.number)
    k = min(st.batch_size - len(todo), st.budget - len(trials))
    # suggest inside the lock: a killed worker leaves complete parameters behind
    asked = [ostudy.ask(fixed_distributions=dists) for _ in range(max(0, k))]
    params += [dict(tr.params) for tr in asked]
    todo += asked
    if todo:  # one journal entry per batch: who asked which trials, where, when (orphan adoption reads it)
        numbers = [tr.number for tr in todo]
        ostudy.set_user_attr(f"{BATCH_ATTR}{numbers[0]}-{attrs['worker']}",
                             {**attrs, "asked_at": now, "trials": numbers, "adopted": adopted})
    done_values = [t.values for t in trials if _feasible_done(t)]
    return todo, params, done_values, len(trials) + max(0, k)


def _tell(ostudy, todo: list, told: np.ndarray, violation: np.ndarray) -> None:
    for i, tr in enumerate(todo):
        v = float(violation[i])
        try:
            if "violation" not in tr.constraints:
                tr.set_constraint("violation", v)
            ostudy.tell(tr, [float(x) for x in told[i]], skip_if_finished=True)
        except RuntimeError:  # finished meanwhile by a worker that adopted it: its rows are identical
            pass


def _run_batch(st: Study, todo, params, done_values, wid, manifest, tdir, cache):
    """Evaluate one asked batch, write its rows (before telling), tell Optuna."""
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
    return told, violation


def run_study(study, budget: int | None = None, storage: str | None = None, out=None,
              worker: bool = False, seed: int | None = None, exhaustive_check: bool = False,
              progress=None, write_outputs: bool = True, max_batches: int | None = None) -> StudyResult:
    """Run (or join, or resume) a study until all workers together made `budget` trials."""
    import optuna
    t0 = time.perf_counter()
    st = load_study(study, budget=budget, storage=storage)
    out = Path(out) if out is not None else st.default_out
    tdir = out / "trials"
    tdir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    stor, lock = open_storage(st, out)
    ostudy = _open_study(st, stor, lock, out)
    side, sweep = start_exhaustive(st, out) if exhaustive_check else (None, None)
    manifest = make_manifest(st, out)
    store.write_manifest(tdir / store.MANIFEST, manifest)
    n_existing = len(ostudy.get_trials(deepcopy=False))
    if seed is None:
        seed = st.seed + n_existing if not worker else (st.seed * 1_000_003 + os.getpid() * 7919 + time.time_ns()) % (2**31)
    ostudy.sampler = make_sampler(st, int(seed))
    dists = distributions(st)
    wid = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    attrs = {"worker": wid, "host": socket.gethostname(), "pid": os.getpid()}
    cache: dict = {}
    evaluated = batches = 0
    show = (sys.stderr.isatty() and not os.environ.get("CI")) if progress is None else bool(progress)
    while max_batches is None or batches < max_batches:
        with lock():
            todo, params, done_values, seen = _ask_batch(st, ostudy, dists, attrs)
        if not todo:
            break
        batches += 1
        if os.environ.get("DSE_STUDY_PAUSE_S"):  # tests: a window to kill a worker mid-batch
            time.sleep(float(os.environ["DSE_STUDY_PAUSE_S"]))
        told, violation = _run_batch(st, todo, params, done_values, wid, manifest, tdir, cache)
        _tell(ostudy, todo, told, violation)
        evaluated += len(todo)
        if show:
            print(f"\r{st.name}: {min(seen, st.budget)}/{st.budget} trials", end="", file=sys.stderr, flush=True)
    if show:
        print(file=sys.stderr)
    frame = read_trials(out)
    front = pareto_rows(st, frame)
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
    return StudyResult(st, out, frame, front, len(ostudy.get_trials(deepcopy=False)), evaluated, wall, check)

