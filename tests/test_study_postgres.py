"""Shared studies on a real PostgreSQL server: two workers at once, and a worker killed mid-batch."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from dse import study as S
from test_study import tiny  # noqa: E402 (pytest puts tests/ on sys.path)

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.postgres


def _worker(study_file, url, out, budget, env_extra=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "dse.cli", "study", "worker", str(study_file), "--storage", url,
                             "--out", str(out), "--budget", str(budget), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _optuna_study(name, url):
    import optuna
    return optuna.load_study(study_name=name, storage=url)


def _batch_recorded(name, url) -> bool:
    from dse.study.workers import BATCH_ATTR
    try:
        return any(k.startswith(BATCH_ATTR) for k in _optuna_study(name, url).user_attrs)
    except KeyError:
        return False


def _space(name):
    # a larger outer space than the unit tests' (so two workers rarely propose the same point)
    d = tiny(name=name, budget=48, batch_size=8)
    d["outer"]["axes"]["die_area_mm2"] = [400, 500, 600, 700, 800]
    d["outer"]["axes"]["node"] = ["n7", "n5", "n3", "n2"]
    return d


def test_two_workers_share_one_budget(tmp_path, postgres_url):
    from optuna.trial import TrialState
    p = tmp_path / "pg2.yaml"
    p.write_text(yaml.safe_dump(_space("pg2"), sort_keys=False))
    out = tmp_path / "res"
    procs = [_worker(p, postgres_url, out, 48, env_extra={"DSE_STUDY_PAUSE_S": "0.5"})  # overlap for sure
             for _ in range(2)]
    for pr in procs:
        o, e = pr.communicate(timeout=120)
        assert pr.returncode == 0, e
    ost = _optuna_study("pg2", postgres_url)
    trials = ost.get_trials()
    st = S.load_study(p)
    designs = {S.design_key(st, t.params) for t in trials}
    assert len(designs) == 48 and all(t.state == TrialState.COMPLETE for t in trials)  # 48 designs shared
    firsts = {t.number for t in trials if "repeat_of" not in t.user_attrs["dse_result"]}
    assert len(firsts) == 48                        # one evaluated trial per design, whoever asked it
    rows = S.read_trials(out)                       # union of both workers' part files, one row per design
    assert sorted(rows["trial"]) == sorted(firsts)
    from dse.study.workers import askers as _askers
    who = _askers(ost)                              # batch records: who asked each evaluated trial
    assert set(who) == firsts
    workers = {rec["worker"] for rec in who.values()}
    assert set(rows["worker"]) == workers and len(workers) == 2  # both took part
    front = S.pareto_rows(st, rows)
    by_number = {t.number: t for t in trials}
    assert {S.design_key(st, by_number[n].params) for n in front["trial"]} == \
        {S.design_key(st, t.params) for t in ost.best_trials}
    for _, r in front.iterrows():
        assert np.allclose(by_number[int(r["trial"])].values, r[st.objectives].to_numpy(float))


def test_killed_worker_loses_nothing(tmp_path, postgres_url):
    from optuna.trial import TrialState
    p = tmp_path / "pgkill.yaml"
    p.write_text(yaml.safe_dump(_space("pgkill"), sort_keys=False))
    out = tmp_path / "res"
    st = S.load_study(p)
    pr = _worker(p, postgres_url, out, 24, env_extra={"DSE_STUDY_PAUSE_S": "30"})
    deadline = time.time() + 60
    running = []
    while time.time() < deadline:
        try:
            running = [t for t in _optuna_study("pgkill", postgres_url).get_trials()
                       if t.state == TrialState.RUNNING]
        except KeyError:
            running = []
        # the whole batch asked and recorded (the record follows the asks; a kill between two asks
        # leaves a trial with part of its parameters, test_study_orphans.py): it pauses 30 s
        if len({S.design_key(st, t.params) for t in running}) == 8 and _batch_recorded("pgkill", postgres_url):
            break
        time.sleep(0.3)
    assert running, "the worker never asked a batch"
    pr.send_signal(signal.SIGKILL)                 # mid-batch: trials asked, nothing told
    pr.communicate(timeout=30)
    firsts = {}                                    # the evaluated trial of each design: its first
    for t in sorted(running, key=lambda t: t.number):
        firsts.setdefault(S.design_key(st, t.params), t.number)
    assert len(firsts) == 8
    pr2 = _worker(p, postgres_url, out, 24)
    o, e = pr2.communicate(timeout=120)
    assert pr2.returncode == 0, e
    trials = _optuna_study("pgkill", postgres_url).get_trials()
    assert len({S.design_key(st, t.params) for t in trials}) == 24
    assert all(t.state == TrialState.COMPLETE for t in trials)          # repeats of the orphans told too
    from dse.study.workers import askers as _askers
    who = _askers(_optuna_study("pgkill", postgres_url))
    assert all(n in who[n]["adopted"] for n in firsts.values())
    rows = S.read_trials(out)
    assert len(rows) == 24 and len(S.pareto_rows(st, rows)) >= 1
