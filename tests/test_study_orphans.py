"""A worker killed while asking leaves a RUNNING trial with only some of its parameters stored
(Optuna stores them one by one). The next worker adopts it and completes its parameters. If the
completed design is one the study already has, the adopted trial is a repeat of that design: told
its values, never evaluated a second time. A second evaluation would write a second row for one
design, and the budget counts designs."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from dse.study import optuna_loop as L
from dse.study.designs import design_key
from dse.study.spec import load_study

sys.path.insert(0, str(Path(__file__).parent))
from test_study import tiny  # noqa: E402


@pytest.fixture
def study_and_dists():
    st = load_study(tiny(name="orphans"))
    return st, L.distributions(st)


def _partial_orphan(ostudy, dists, params, missing):
    """A RUNNING trial with every parameter of `params` but `missing` stored, as a killed ask leaves it."""
    trial = ostudy.ask()
    for name, dist in dists.items():
        if name != missing:
            ostudy._storage.set_trial_param(trial._trial_id, name, dist.to_internal_repr(params[name]), dist)
    return trial


def _directions(st):
    return ["maximize" if s == "max" else "minimize" for s in st.senses]


def test_an_orphan_completed_into_a_known_design_is_told_not_evaluated(study_and_dists, monkeypatch):
    st, dists = study_and_dists
    ostudy = optuna.create_study(directions=_directions(st))
    done = ostudy.ask(fixed_distributions=dists)
    ostudy.tell(done, [1.0] * len(st.senses))
    known = dict(done.params)
    missing = next(iter(dists))
    orphan = _partial_orphan(ostudy, dists, known, missing)
    assert set(ostudy.get_trials()[orphan.number].params) == set(dists) - {missing}
    monkeypatch.setattr(L, "is_orphan", lambda *a, **k: True)              # its worker is dead
    monkeypatch.setattr(L, "_complete_params", lambda tr, ft, d: {**ft.params, missing: known[missing]})
    asked = L._ask_batch(st, ostudy, dists, {"worker": "w", "host": "h", "pid": 0}, np.random.default_rng(0))
    assert orphan.number not in [t.number for t in asked.todo]             # not evaluated again
    frozen = ostudy.get_trials()[orphan.number]
    assert frozen.state == TrialState.COMPLETE and frozen.values == [1.0] * len(st.senses)
    # every design the batch evaluates is new: none is the finished one
    assert design_key(st, known) not in {design_key(st, p) for p in asked.params}


def test_an_orphan_completed_into_a_new_design_is_adopted(study_and_dists, monkeypatch):
    st, dists = study_and_dists
    ostudy = optuna.create_study(directions=_directions(st))
    params = {name: (d.choices[0] if hasattr(d, "choices") else d.low) for name, d in dists.items()}
    missing = next(iter(dists))
    orphan = _partial_orphan(ostudy, dists, params, missing)
    monkeypatch.setattr(L, "is_orphan", lambda *a, **k: True)
    asked = L._ask_batch(st, ostudy, dists, {"worker": "w", "host": "h", "pid": 0}, np.random.default_rng(0))
    assert orphan.number in [t.number for t in asked.todo]
    adopted = asked.params[[t.number for t in asked.todo].index(orphan.number)]
    assert set(adopted) == set(dists)                      # completed before it is evaluated
