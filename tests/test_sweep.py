"""Sweeps: parallel chunks, resume after SIGKILL, Dask backend, Pareto/top, and the pareto module."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dse import store
from dse.errors import ConfigError
from dse.pareto import ParetoFront, hypervolume, merge_fronts, pareto_mask, parse_objectives
from dse.space import Space
from dse.sweep import _show_progress, evaluate_toy, sweep

ROOT = Path(__file__).resolve().parent.parent

SPACE = {
    "name": "sweep-toy",
    "evaluator": "dse.sweep:evaluate_toy",
    "chunk_size": 500,
    "fixed": {"gpus": 64, "model": "gpt3-175b"},
    "axes": {
        "tp": {"divisors_of": ["gpus", "heads"]},
        "pp": {"pow2": [1, 16]},
        "dp": {"derive": "gpus / (tp * pp)"},
        "micro_batch": {"divisors_of": "64 // dp"},
        "recompute": ["none", "selective", "full"],
        "sp": [False, True],
        "x": {"range": [0, 19]},
    },
    "constraints": ["tp > 1 or not sp"],
}


def reference(space: Space) -> pd.DataFrame:
    """Uninterrupted, single-process evaluation of the whole space, through the store's encodings."""
    t = store.to_arrow(evaluate_toy(space.chunk(0, space.size)), space)
    return t.to_pandas()


def same_rows(df: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert len(df) == len(ref)
    pd.testing.assert_frame_equal(df.reset_index(drop=True), ref.reset_index(drop=True), check_categorical=False)


def cli_cmd(*args) -> list[str]:
    from dse import cli as C
    if all(importlib.util.find_spec(m) is not None for m in C.COMMAND_MODULES):
        return [sys.executable, "-m", "dse.cli", *map(str, args)]
    return [sys.executable, "-c", "import sys, dse.cli as c; c.COMMAND_MODULES = ('dse.cli.sweep',); "  # pragma: no cover
            "sys.exit(c.main(sys.argv[1:]))", *map(str, args)]


# ----------------------------------------------------------------------------- sweeps

def test_sweep_in_process_equals_the_enumeration(tmp_path):
    sp = Space.from_dict(SPACE)
    res = sweep(sp, out=tmp_path / "r", jobs=1, progress=False)
    assert res.rows == res.rows_written == sp.size and res.chunks == sp.n_chunks() == res.chunks_run
    same_rows(store.read_results(tmp_path / "r"), reference(sp))
    m = store.read_manifest(tmp_path / "r")
    assert m["complete"] and m["rows"] == sp.size and m["evaluator"] == "dse.sweep:evaluate_toy"


def test_loky_workers_give_the_same_rows(tmp_path):
    sp = Space.from_dict(SPACE)
    res = sweep(sp, out=tmp_path / "r", jobs=2, progress=False)
    assert res.rows == sp.size
    same_rows(store.read_results(tmp_path / "r"), reference(sp))


def test_resume_runs_only_missing_chunks(tmp_path):
    sp = Space.from_dict(SPACE)
    out = tmp_path / "r"
    sweep(sp, out=out, jobs=1, progress=False)
    parts = store.part_files(out)
    for f in parts[1::3]:
        f.unlink()
    res = sweep(sp, out=out, jobs=1, progress=False)
    assert res.chunks_run == len(parts[1::3]) and res.rows == sp.size
    same_rows(store.read_results(out), reference(sp))


def test_callable_evaluator_and_output_dtypes(tmp_path):
    sp = Space.from_dict(SPACE)

    def ev(cols):
        out = evaluate_toy(cols)
        out["infeasible_reason"] = np.where(out["toy_gpus_used"] > 64, "too many gpus", "").astype(object)
        return out

    sweep(sp, out=tmp_path / "r", jobs=1, progress=False, evaluator=ev)
    df = store.read_results(tmp_path / "r")
    assert isinstance(df["infeasible_reason"].dtype, pd.CategoricalDtype)
    assert df["tp"].dtype == np.int32  # at least int32 in files: products of degrees do not wrap


def test_unknown_evaluator_and_backend():
    code = Space.from_dict({**SPACE, "evaluator": "nope.module:fn"})
    with pytest.raises(ConfigError, match="names Python code"):  # no code from data files
        sweep(code, out="/tmp/never-written")
    with pytest.raises(ConfigError, match="cannot import"):
        sweep(code, out="/tmp/never-written", allow_code_evaluator=True)
    with pytest.raises(ConfigError, match="--backend"):
        sweep(Space.from_dict(SPACE), out="/tmp/never-written", backend="ray")
    assert not Path("/tmp/never-written").exists()


def test_progress_only_on_a_terminal(monkeypatch):
    monkeypatch.setenv("CI", "1")
    assert not _show_progress(None)
    assert _show_progress(True)
    monkeypatch.delenv("CI")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not _show_progress(None)


SLOW_EVALUATOR = """
import time
from dse.sweep import evaluate_toy

def slow(cols):
    time.sleep(0.15)
    return evaluate_toy(cols)
"""


def test_sigkill_and_restart_yields_every_row_exactly_once(tmp_path):
    (tmp_path / "slow_eval.py").write_text(textwrap.dedent(SLOW_EVALUATOR))
    d = {**SPACE, "name": "killed", "evaluator": "slow_eval:slow", "chunk_size": 200}
    import yaml
    spath = tmp_path / "space.yaml"
    spath.write_text(yaml.safe_dump(d, sort_keys=False))
    sp = Space.from_dict(d)
    assert sp.n_chunks() >= 30
    out = tmp_path / "out"
    env = dict(os.environ, CI="1", PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(cli_cmd("sweep", spath, "--out", out, "--jobs", "2", "--allow-code-evaluator"), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if out.is_dir() and len(store.part_files(out)) >= 4:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"sweep ended before it could be killed: {proc.stderr.read()}"
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its own workers (its session)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    done_before = len(store.done_chunks(out))
    assert 0 < done_before < sp.n_chunks()
    r = subprocess.run(cli_cmd("sweep", spath, "--out", out, "--jobs", "2", "--allow-code-evaluator"), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "already done" in r.stdout
    df = store.read_results(out)
    ref = reference(sp)
    same_rows(df, ref)  # every row, in order, exactly once
    assert not df.duplicated(subset=list(sp.columns)).any()
    assert not any(f.name.endswith(".tmp") for d in (out, out.parent) for f in d.iterdir())


@pytest.fixture
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        yield cluster
    finally:
        client.close()
        cluster.close()


def test_dask_backend_gives_the_same_rows(tmp_path, dask_cluster):
    sp = Space.from_dict(SPACE)
    res = sweep(sp, out=tmp_path / "r", backend="dask", scheduler=dask_cluster.scheduler_address, progress=False)
    assert res.rows == sp.size and res.chunks_run == sp.n_chunks()
    same_rows(store.read_results(tmp_path / "r"), reference(sp))


def test_real_training_evaluator_on_example_space(tmp_path):
    if importlib.util.find_spec("dse.perf.training") is None:  # pragma: no cover
        pytest.skip("dse.perf.training not built yet")
    res = sweep(ROOT / "spaces" / "example.yaml", out=tmp_path / "r", jobs=1, progress=False)
    df = store.read_results(tmp_path / "r")
    assert len(df) == res.rows > 1000
    for col in ("step_time_s", "tokens_per_s", "mfu", "mem_per_gpu_bytes", "fits"):
        assert col in df.columns
    assert "layers" not in df.columns  # catalog lookups are not stored
    assert df["fits"].any()


# ----------------------------------------------------------------------------- pareto / top commands

def test_pareto_and_top_commands_match_pandas(tmp_path, capsys):
    from dse.cli import main
    sp = Space.from_dict({**SPACE, "chunk_size": 333})
    out = tmp_path / "r"
    sweep(sp, out=out, jobs=1, progress=False)
    df = store.read_results(out)
    assert main(["pareto", str(out), "--objective", "toy_score_s:min", "--objective", "x:max"]) == 0
    front = pd.read_parquet(tmp_path / "r.dse" / "pareto.parquet")  # the sidecar, outside the dataset
    assert [f.name for f in out.iterdir() if not f.name.startswith("part-")] == []
    feas = df[df["fits"]]
    mask = pareto_mask(np.column_stack([feas["toy_score_s"], feas["x"]]), ["min", "max"])
    expect = feas[mask]
    assert len(front) == len(expect) > 0
    assert sorted(zip(front["toy_score_s"], front["x"])) == sorted(zip(expect["toy_score_s"], expect["x"]))
    assert "Pareto front" in capsys.readouterr().out
    assert main(["top", str(out), "--by", "toy_score_s", "-k", "7"]) == 0
    printed = capsys.readouterr().out
    assert "top 7" in printed
    from dse.query import top_rows
    top = top_rows(out, "toy_score_s", 7)
    assert top["toy_score_s"].tolist() == sorted(feas["toy_score_s"], reverse=True)[:7]
    low = top_rows(out, "toy_score_s", 3, ascending=True)
    assert low["toy_score_s"].tolist() == sorted(feas["toy_score_s"])[:3]
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"{sp.size:,}" in shown and sp.hash in shown and "complete" in shown


# ----------------------------------------------------------------------------- the pareto module

def brute_mask(v: np.ndarray) -> np.ndarray:
    n = len(v)
    keep = np.ones(n, bool)
    for i in range(n):
        if np.isnan(v[i]).any():
            keep[i] = False
            continue
        for j in range(n):
            if i != j and not np.isnan(v[j]).any() and np.all(v[j] <= v[i]) and np.any(v[j] < v[i]):
                keep[i] = False
                break
    return keep


@settings(max_examples=60, deadline=None)
@given(k=st.integers(2, 4), data=st.data())
def test_pareto_mask_matches_brute_force(k, data):
    v = data.draw(arrays(np.float64, st.tuples(st.integers(0, 60), st.just(k)),
                         elements=st.sampled_from([0.0, 1.0, 2.0, 3.0, 2.5, np.nan])))
    assert (pareto_mask(v) == brute_mask(v)).all()
    senses = ["max"] + ["min"] * (k - 1)
    flipped = v.copy()
    flipped[:, 0] *= -1
    assert (pareto_mask(v, senses) == brute_mask(flipped)).all()


@pytest.mark.parametrize("k", [2, 3])
def test_merging_chunk_fronts_equals_the_global_front(k):
    rng = np.random.default_rng(k)
    v = rng.random((5000, k))
    ids = np.arange(len(v))
    acc = ParetoFront(["min"] * k)
    fronts = []
    for s in range(0, len(v), 700):
        acc.add(v[s:s + 700], ids[s:s + 700])
        m = pareto_mask(v[s:s + 700])
        fronts.append((v[s:s + 700][m], ids[s:s + 700][m]))
    expect = np.nonzero(pareto_mask(v))[0]
    assert sorted(acc.ids.tolist()) == expect.tolist()
    assert sorted(merge_fronts(fronts)[1].tolist()) == expect.tolist()


def test_hypervolume_known_values():
    assert hypervolume([[1, 1]], [2, 2]) == pytest.approx(1.0)
    assert hypervolume([[0, 1], [1, 0]], [2, 2]) == pytest.approx(3.0)
    assert hypervolume([[0, 1], [1, 0], [1, 1]], [2, 2]) == pytest.approx(3.0)  # dominated point adds nothing
    assert hypervolume([[3, 3]], [2, 2]) == 0.0
    assert hypervolume([[1, 1, 1]], [2, 2, 2]) == pytest.approx(1.0)
    assert hypervolume([[0, 0, 1], [1, 1, 0]], [2, 2, 2]) == pytest.approx(4 + 2 - 1)  # union of two boxes
    # maximisation: throughput up, memory down; ref is worse than every point in each sense
    assert hypervolume([[10, 1]], [0, 2], ["max", "min"]) == pytest.approx(10.0)
    rng = np.random.default_rng(0)
    pts = rng.random((200, 3))
    mc = rng.random((50_000, 3))
    dominated = (pts[None, :, :] <= mc[:, None, :]).all(axis=2).any(axis=1).mean()
    assert hypervolume(pts, [1, 1, 1]) == pytest.approx(dominated, abs=0.01)
    with pytest.raises(ConfigError):
        hypervolume(rng.random((5, 4)), [1, 1, 1, 1])


def test_parse_objectives():
    assert parse_objectives(["step_time_s:min", "tokens_per_s:max"]) == (["step_time_s", "tokens_per_s"], ["min", "max"])
    with pytest.raises(ConfigError):
        parse_objectives(["a:up"])
    with pytest.raises(ConfigError):
        parse_objectives([])


def test_analysis_commands_on_a_missing_results_path_exit_2(tmp_path, capsys):
    from dse.cli import main
    missing = str(tmp_path / "nothing-here")
    assert main(["top", missing, "--by", "mfu"]) == 2
    assert main(["pareto", missing, "--objective", "mfu:max"]) == 2
    assert main(["show", missing]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("no such results directory" in line for line in err)
