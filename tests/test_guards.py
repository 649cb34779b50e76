"""Files cannot make dse hang, grow without bound or run code: expressions, YAML, storage paths."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from dse.errors import ConfigError
from dse.space import Space, load_space

BASE = {"name": "g", "fixed": {"model": "gpt3-175b"}, "axes": {"tp": [1, 2, 4, 8]}}


@pytest.mark.parametrize("constraint", ["tp < 9**9**9", "tp ** 10**10 > 0", "(2**64)**(2**64) > tp"])
def test_huge_powers_finish_at_once(constraint):
    t0 = time.perf_counter()
    sp = Space.from_dict({**BASE, "constraints": [constraint]})
    assert sp.size in (0, 4) and time.perf_counter() - t0 < 2.0


def test_strings_do_not_multiply():
    with pytest.raises(ConfigError, match="unsupported string operation"):
        Space.from_dict({**BASE, "constraints": ["'a' * 10**10 == 'b'"]})


def test_yaml_aliases_are_refused_before_expansion(tmp_path):
    p = tmp_path / "lol.yaml"
    p.write_text("name: lol\ndescription: &a [lol, lol, lol]\nfixed: {model: gpt3-175b}\naxes: {tp: [1, 2]}\n"
                 "x: &b [*a, *a, *a]\n")
    with pytest.raises(ConfigError, match=r"line 5: YAML aliases \(\*a\) are not allowed"):
        load_space(p)


def test_oversized_file_is_refused(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("name: big\ndescription: '" + "x" * (2 << 20) + "'\n")
    with pytest.raises(ConfigError, match="too large for a space file"):
        load_space(p)


def test_journal_storage_refuses_a_foreign_file(tmp_path):
    from dse.study.storage import check_journal
    own = tmp_path / "notes.txt"
    own.write_text("my notes\n")
    with pytest.raises(ConfigError, match="is not an Optuna journal"):
        check_journal(own, "s")
    journal = tmp_path / "j.log"
    journal.write_text('{"op_code": 0, "worker_id": "w", "study_name": "other", "directions": [1]}\n')
    with pytest.raises(ConfigError, match="is the journal of other, not of 's'"):
        check_journal(journal, "s")
    check_journal(journal, "other")
    check_journal(tmp_path / "absent.log", "s")
    assert own.read_text() == "my notes\n"


def test_a_space_too_large_is_refused_unless_raised(tmp_path):
    from dse.sweep import sweep
    big = {"name": "huge", "fixed": {"model": "gpt3-175b"},
           "axes": {"tp": {"range": [1, 100000]}, "pp": {"range": [1, 100000]}, "micro_batch": {"range": [1, 10000]}}}
    with pytest.raises(ConfigError, match="more than max_points"):
        sweep(Space.from_dict(big), out=tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()


def test_a_second_sweep_into_the_same_dataset_is_refused_in_one_line(tmp_path):
    import subprocess
    import sys
    import textwrap
    (tmp_path / "slow_eval.py").write_text(textwrap.dedent("""
        import time
        from dse.sweep import evaluate_toy
        def slow(cols):
            time.sleep(1.5)
            return evaluate_toy(cols)
        """))
    space = {"name": "locked", "chunk_size": 10, "fixed": {"gpus": 64, "model": "gpt3-175b"},
             "axes": {"tp": {"divisors_of": ["gpus", "heads"]}, "pp": {"pow2": [1, 16]},
                      "dp": {"derive": "gpus / (tp * pp)"}}}
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from dse.sweep import sweep; from slow_eval import slow;"
            "sweep(%r, out=sys.argv[1], jobs=1, progress=False, evaluator=slow)" % space)
    first = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "r"), str(tmp_path)], stderr=subprocess.PIPE)
    lock = tmp_path / "r.dse" / ".lock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (lock.exists() and lock.read_text().startswith("pid")):
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r"), str(tmp_path)], capture_output=True,
                            text=True, timeout=60)
    assert second.returncode != 0 and "another dse sweep" in second.stderr
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    from dse import store
    assert len(store.read_results(tmp_path / "r")) == Space.from_dict(space).size


def test_a_study_resumes_at_once_after_sigkill(tmp_path):
    """Locks are fcntl locks (the journal's and the ask lock): a killed worker leaves none that
    the next run must wait out; its asked trials are taken over (same host, dead pid)."""
    import os
    import signal
    import subprocess
    import sys

    import yaml
    sys.path.insert(0, str(Path(__file__).parent))
    from test_study import tiny
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(tiny(name="killed"), sort_keys=False))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dse.cli", "study", "run", str(study), "--out", str(out), "--quiet"]
    first = subprocess.Popen(cmd, env=dict(os.environ, DSE_STUDY_PAUSE_S="60", CI="1"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = out / "journal.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (journal.exists() and b"dse_batch:" in journal.read_bytes()):
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)   # mid-batch: trials asked, nothing told
    first.wait(timeout=30)
    t0 = time.perf_counter()
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, CI="1"))
    assert resumed.returncode == 0, resumed.stderr
    assert time.perf_counter() - t0 < 15.0  # a whole tiny study; no stale-lock wait (Optuna's own: 30-40 s)
    assert "8 designs in results" in resumed.stdout


def _children(pid: int) -> set:
    """Direct and indirect child pids of a process, from /proc (Linux)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_workers_stop_when_the_sweep_process_is_killed(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import textwrap

    import yaml
    (tmp_path / "slow_eval.py").write_text(textwrap.dedent("""
        import time
        from dse.sweep import evaluate_toy
        def slow(cols):
            time.sleep(1.0)
            return evaluate_toy(cols)
        """))
    space = {"name": "orphans", "evaluator": "slow_eval:slow", "chunk_size": 2,
             "fixed": {"gpus": 64, "model": "gpt3-175b"},
             "axes": {"tp": {"divisors_of": ["gpus", "heads"]}, "pp": {"pow2": [1, 16]},
                      "dp": {"derive": "gpus / (tp * pp)"}}}
    spath = tmp_path / "space.yaml"
    spath.write_text(yaml.safe_dump(space, sort_keys=False))
    env = dict(os.environ, CI="1", PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "dse.cli", "sweep", str(spath), "--out", str(tmp_path / "r"),
                             "--jobs", "2", "--allow-code-evaluator"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((tmp_path / "r").glob("part-*.parquet"))) < 2:
        time.sleep(0.1)
    workers = _children(proc.pid)
    assert workers, "the sweep started no worker processes"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20   # a worker finishes its current chunk (1 s), then stops
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() and
                                              "Z" not in Path(f"/proc/{w}/stat").read_text().split()[2]
                                              for w in workers if Path(f"/proc/{w}/stat").exists()):
        time.sleep(0.2)
    alive = [w for w in workers if Path(f"/proc/{w}/stat").exists()
             and Path(f"/proc/{w}/stat").read_text().split()[2] not in "ZX"]
    for w in alive:  # leave nothing running whatever the outcome
        os.kill(w, signal.SIGKILL)
    assert not alive, f"workers {alive} kept running after their sweep was killed"
