"""Results directories as plain Parquet datasets (issue 16 items 1-2): pandas, pyarrow.dataset,
polars and DuckDB read a sweep's and a study's dataset exactly; every writing command refuses a
directory it does not own in one line (exit 2) and leaves it unchanged."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as pads
import pytest

from dse import store
from dse.errors import ConfigError
from dse.space import Space
from dse.sweep import sweep

ROOT = Path(__file__).resolve().parent.parent

# degrees whose products reach 2^30 (int8/int16 files made `gpus * tp` wrap; int32 holds < 2^31)
BIG = {
    "name": "readers-toy",
    "evaluator": "dse.sweep:evaluate_toy",
    "chunk_size": 7,
    "fixed": {"model": "gpt3-175b", "gpus": 65536},
    "axes": {"tp": [1, 8, 16384], "pp": [1, 2], "recompute": ["none", "full"], "x": {"range": [0, 4]}},
}
STUDY = {
    "name": "readers-study",
    "workload": {"kind": "training", "model": "llama3.1-8b", "train_tokens": 1.0e11,
                 "fixed": {"global_batch": 256, "precision": "bf16"}},
    "outer": {"fixed": {"package": "cowos-l"},
              "axes": {"node": ["n5", "n3"], "compute_dies": [1, 2], "die_area_mm2": [500, 800],
                       "memory": ["hbm3e"], "scaleup_domain": [8], "gpus": {"pow2": [64, 256]}}},
    "inner": {"axes": {"tp": {"pow2": [1, 8]}, "pp": [1, 2], "dp": {"derive": "gpus / (tp * pp)"}},
              "constraints": ["tp <= scaleup_domain", "global_batch % dp == 0"]},
    "objectives": [{"time_to_train_days": "min"}, {"cost_per_run_usd": "min"}],
    "sampler": "random", "budget": 8, "batch_size": 4, "seed": 0,
}


def listing(*dirs: Path) -> dict:
    """Every file under the given paths (and their sidecars): path -> (size, mtime_ns)."""
    out = {}
    for d in dirs:
        for base in (d, store.sidecar(d)):
            if base.is_file():
                out[str(base)] = (base.stat().st_size, base.stat().st_mtime_ns)
            elif base.is_dir():
                for f in sorted(base.rglob("*")):
                    st = f.stat()
                    out[str(f)] = (st.st_size if f.is_file() else -1, st.st_mtime_ns)
    return out


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dse.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def assert_refused(r, *fragments):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def read_everywhere(d: Path, n: int, categorical: list[str], products: list[tuple[str, str]]) -> None:
    import duckdb
    import polars as pl
    pdf = pd.read_parquet(d)
    assert len(pdf) == n
    assert pads.dataset(d).count_rows() == n
    ldf = pl.read_parquet(d)
    assert ldf.height == n and pl.scan_parquet(d).select(pl.len()).collect().item() == n
    glob = f"{d.as_posix()}/**/*.parquet"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}')").fetchall()[0][0] == n
    for c in categorical:
        assert isinstance(pdf[c].dtype, pd.CategoricalDtype), c
        assert ldf.schema[c] == pl.Categorical, c
        enc = duckdb.sql(f"SELECT DISTINCT encodings FROM parquet_metadata('{glob}') "
                         f"WHERE path_in_schema = '{c}'").fetchall()
        assert enc and all("DICTIONARY" in e[0] for e in enc), (c, enc)   # dictionary-encoded strings
    for a, b in products:
        truth = pdf[a].astype(np.int64).to_numpy() * pdf[b].astype(np.int64).to_numpy()
        assert (pdf[a] * pdf[b]).to_numpy().tolist() == truth.tolist()
        assert ldf.select(pl.col(a) * pl.col(b)).to_series().to_list() == truth.tolist()
        duck = duckdb.sql(f"SELECT {a} * {b} AS p FROM read_parquet('{glob}')").fetchall()
        assert sorted(r[0] for r in duck) == sorted(truth.tolist())


def test_sweep_directory_is_a_plain_parquet_dataset(tmp_path):
    sp = Space.from_dict(BIG)
    out = tmp_path / "results" / "big"
    sweep(sp, out=out, jobs=1, progress=False)
    assert all(f.name.startswith("part-") and f.suffix == ".parquet" for f in out.iterdir())
    read_everywhere(out, sp.size, ["model", "recompute"], [("gpus", "tp"), ("gpus", "pp")])
    assert (pd.read_parquet(out).eval("gpus * tp").max()) == 65536 * 16384   # 2^30, no wrap
    assert store.read_manifest(out)["space"]["hash"] == sp.hash            # sidecar manifest
    # derived outputs go to the sidecar; the dataset still reads exactly
    r = cli("pareto", out, "--objective", "toy_score_s:min", "--objective", "x:max")
    assert r.returncode == 0, r.stderr
    assert (store.sidecar(out) / "pareto.parquet").is_file()
    read_everywhere(out, sp.size, ["recompute"], [])


@pytest.fixture(scope="module")
def study_out(tmp_path_factory):
    from dse import study as S
    out = tmp_path_factory.mktemp("st") / "results" / "readers-study"
    res = S.run_study(STUDY, out=out, progress=False)
    return out, res


def test_study_dataset_reads_like_a_sweep(study_out):
    out, res = study_out
    d = out / "trials"
    assert store.dataset_dir(out) == d
    assert all(f.suffix == ".parquet" for f in d.iterdir())    # parts only: no manifest inside
    n = len(res.trials)
    read_everywhere(d, n, ["node", "memory", "worker"], [("gpus", "tp"), ("dp", "pp")])
    df = store.read_results(out)
    assert len(df) == n and isinstance(df["node"].dtype, pd.CategoricalDtype)
    for cmd in (["show", out], ["top", out, "--by", "cost_per_run_usd", "-k", "3", "--asc"],
                ["pareto", out, "--objective", "time_to_train_days:min", "--objective", "cost_per_run_usd:min"]):
        r = cli(*cmd)
        assert r.returncode == 0, r.stderr
    assert "study     readers-study" in cli("show", out).stdout
    assert (out / "trials.dse" / "pareto.parquet").is_file()
    assert pd.read_parquet(d).shape[0] == n                       # still exact after `dse pareto`


# ----------------------------------------------------------------------------- refusals

def _sweep_dir(tmp_path) -> Path:
    out = tmp_path / "results" / "big"
    sweep(Space.from_dict(BIG), out=out, jobs=1, progress=False)
    return out


def test_sweep_into_a_study_directory_is_refused(tmp_path, study_out):
    import yaml
    out, _ = study_out
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(BIG, sort_keys=False))
    before = listing(out)
    for extra in ([], ["--overwrite"]):
        assert_refused(cli("sweep", space, "--out", out, "--jobs", "1", *extra), str(out), "study")
        assert_refused(cli("sweep", space, "--out", out / "trials", "--jobs", "1", *extra), "study")
    assert listing(out) == before



def test_study_into_a_sweep_directory_is_refused(tmp_path):
    from dse.study import load_study
    from dse.study.results import check_out
    import yaml
    out = _sweep_dir(tmp_path)
    before = listing(out)
    with pytest.raises(ConfigError, match="sweep"):
        check_out(load_study(STUDY), out)
    p = tmp_path / "st.yaml"
    p.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    r = cli("study", "run", p, "--out", out, "--quiet")
    assert_refused(r, str(out), "sweep")
    assert listing(out) == before and not (out / "trials").exists()


def test_study_into_another_studys_directory_is_refused(tmp_path, study_out):
    import shutil

    import yaml
    out = tmp_path / "copy"
    shutil.copytree(study_out[0], out)
    before = listing(out)
    p = tmp_path / "other.yaml"
    p.write_text(yaml.safe_dump({**STUDY, "name": "another-study"}, sort_keys=False))
    assert_refused(cli("study", "run", p, "--out", out, "--quiet"), "readers-study")
    assert listing(out) == before


def test_failed_study_worker_leaves_nothing(tmp_path):
    import yaml
    p = tmp_path / "st.yaml"
    p.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    out = tmp_path / "results" / "w"
    r = cli("study", "worker", p, "--out", out, "--storage", "postgresql://nobody@127.0.0.1:1/none")
    assert_refused(r, "storage: cannot reach")
    assert not out.exists()


def test_pareto_out_never_overwrites_parts_or_foreign_files(tmp_path):
    out = _sweep_dir(tmp_path)
    part = sorted(out.iterdir())[0]
    foreign = tmp_path / "notes.parquet"
    foreign.write_bytes(b"not ours")
    before = listing(out, foreign)
    obj = ["--objective", "toy_score_s:min", "--objective", "x:max"]
    assert_refused(cli("pareto", out, *obj, "--out", part), "inside the dataset")
    assert_refused(cli("pareto", out, *obj, "--out", out / "front.parquet"), "inside the dataset")
    assert_refused(cli("pareto", out, *obj, "--out", foreign), "not written by this command")
    assert_refused(cli("pareto", out, *obj, "--out", tmp_path), "is a directory")
    assert listing(out, foreign) == before
    mine = tmp_path / "front.parquet"
    assert cli("pareto", out, *obj, "--out", mine).returncode == 0
    assert cli("pareto", out, *obj, "--out", mine).returncode == 0   # its own file: replaced


def test_overwrite_removes_only_the_datasets_own_files(tmp_path):
    out = _sweep_dir(tmp_path)
    (out.parent / "keep.txt").write_text("mine")
    (store.sidecar(out) / "notes.md").write_text("mine too")
    other = Space.from_dict({**BIG, "name": "other", "axes": {**BIG["axes"], "x": {"range": [0, 2]}}})
    res = sweep(other, out=out, jobs=1, progress=False, overwrite=True)
    assert res.rows == other.size == len(pd.read_parquet(out))
    assert (out.parent / "keep.txt").read_text() == "mine"
    assert (store.sidecar(out) / "notes.md").read_text() == "mine too"


def test_legacy_directory_with_manifest_inside_still_reads(tmp_path):
    out = _sweep_dir(tmp_path)
    side = store.sidecar(out)
    os.replace(side / "manifest.json", out / "manifest.json")     # an earlier version's layout
    for receipt in [*side.glob("part-*.ok"), side / ".lock"]:        # (no receipts, no lock then)
        receipt.unlink(missing_ok=True)
    side.rmdir()
    assert store.read_manifest(out)["space"]["name"] == "readers-toy"
    assert len(store.read_results(out)) == Space.from_dict(BIG).size
    res = sweep(Space.from_dict(BIG), out=out, jobs=1, progress=False)   # resume migrates it
    assert res.rows_written == 0 and not (out / "manifest.json").exists()
    assert (side / "manifest.json").is_file()
