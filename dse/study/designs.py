"""Designs: distinct outer points. The first trial that proposes a point evaluates it; a later
proposal of the same point (a repeat) is told the stored result, never evaluated; a sampler that
keeps repeating itself gets an unvisited point instead (sampling without replacement)."""
from __future__ import annotations

import math

from dse.study.spec import Study

RESULT_ATTR = "dse_result"        # trial user attribute: {feasible, violation, mapping, metrics[, repeat_of]}
CONSTRAINTS_ATTR = "constraints"  # trial system attribute: [violation] (> 0 infeasible), as Optuna stores it


def design_key(st: Study, params: dict) -> tuple:
    """The outer point of a trial: its parameters in the study's order."""
    return tuple(params.get(p) for p, _, _, _ in st.params)


def first_trials(st: Study, trials: list) -> dict:
    """Design key -> its first trial (the one evaluated); later trials with the key are repeats."""
    first: dict = {}
    for t in sorted(trials, key=lambda t: t.number):
        if t.params:
            first.setdefault(design_key(st, t.params), t)
    return first


def tell_repeat(ostudy, number_or_trial, design) -> None:
    """Tell a repeat what its (finished) design was told; no evaluation, no row."""
    from optuna.trial import TrialState
    tid = number_or_trial._trial_id
    if design.state != TrialState.COMPLETE or design.values is None:
        return
    stor = ostudy._storage
    stor.set_trial_system_attr(tid, CONSTRAINTS_ATTR, list(design.system_attrs.get(CONSTRAINTS_ATTR, [0.0])))
    res = design.user_attrs.get(RESULT_ATTR)
    stor.set_trial_user_attr(tid, RESULT_ATTR, {**(res or {}), "repeat_of": int(design.number)})
    try:
        ostudy.tell(number_or_trial, list(design.values), skip_if_finished=True)
    except RuntimeError:  # finished meanwhile by another worker
        pass


def unvisited(st: Study, known: dict, rng) -> dict | None:
    """Parameters of an outer point that is not a design yet, drawn at random (None: all visited)."""
    choices = [list(v) for _, _, _, v in st.params]   # range axes hold their expanded values
    size = math.prod(len(c) for c in choices)
    if len(known) >= size:
        return None
    names = [p for p, _, _, _ in st.params]
    for _ in range(64):  # rejection sampling: cheap while a fair share of the space is unvisited
        params = {n: c[int(rng.integers(len(c)))] for n, c in zip(names, choices)}
        if design_key(st, params) not in known:
            return params
    if size > 2_000_000:
        return None
    import itertools
    free = [dict(zip(names, combo)) for combo in itertools.product(*choices)
            if design_key(st, dict(zip(names, combo))) not in known]
    return free[int(rng.integers(len(free)))] if free else None
