"""Parquet result store: encodings, manifest, atomic parts, refusal of foreign directories, CLI errors."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dse import store
from dse.errors import ConfigError
from dse.space import Space
from dse.sweep import evaluate_toy, sweep

ROOT = Path(__file__).resolve().parent.parent

SPACE = {
    "name": "store-toy",
    "evaluator": "dse.sweep:evaluate_toy",
    "chunk_size": 50,
    "fixed": {"gpus": 16, "model": "gpt3-175b"},
    "axes": {"tp": [1, 2, 4], "pp": [1, 2, 4], "dp": {"derive": "gpus / (tp * pp)"},
             "recompute": ["none", "full"], "x": {"range": [0, 19]}},
}
OTHER = {**SPACE, "name": "other-toy", "axes": {**SPACE["axes"], "x": {"range": [0, 9]}}}


def space_file(tmp_path, d=SPACE, name="space.yaml") -> Path:
    import yaml
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def snapshot(d: Path) -> dict:
    """Every file of a dataset and of its sidecar: name -> bytes (the writer lock's holder pid aside)."""
    out = {f.name: f.read_bytes() for f in sorted(d.iterdir())}
    side = store.sidecar(d)
    if side.is_dir():
        out.update({f"sidecar/{f.name}": f.read_bytes() for f in sorted(side.iterdir()) if f.name != ".lock"})
    return out


def cli(*args, cwd=None):
    """Run the real `dse` command in a subprocess (falls back to our module if a sibling is broken)."""
    from dse import cli as C
    if all(importlib.util.find_spec(m) is not None for m in C.COMMAND_MODULES):
        cmd = [sys.executable, "-m", "dse.cli", *map(str, args)]
    else:  # pragma: no cover - another engineer's command module is missing
        cmd = [sys.executable, "-c", "import sys, dse.cli as c; c.COMMAND_MODULES = ('dse.cli.sweep',); "
               "sys.exit(c.main(sys.argv[1:]))", *map(str, args)]
    env = dict(os.environ, CI="1")
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


# ----------------------------------------------------------------------------- encodings

def test_to_arrow_encodings_and_catalog_columns_dropped():
    sp = Space.from_dict(SPACE)
    cols = evaluate_toy(sp.chunk(0, sp.size))
    cols["layers"] = np.full(sp.size, 96.0)  # a resolved catalog column: not stored
    cols["infeasible_reason"] = np.where(cols["tp"] > 2, "oom", "").astype(object)
    t = store.to_arrow(cols, sp)
    types = {f.name: f.type for f in t.schema}
    assert "layers" not in types
    assert pa.types.is_dictionary(types["model"]) and pa.types.is_dictionary(types["recompute"])
    assert pa.types.is_dictionary(types["infeasible_reason"])
    assert types["tp"] == pa.int32() and types["gpus"] == pa.int32() and types["x"] == pa.int32()  # never int8 in files
    assert types["toy_score_s"] == pa.float64() and types["fits"] == pa.bool_()
    back = t.to_pandas()
    assert back["recompute"].tolist() == np.asarray(cols["recompute"]).tolist()
    assert (back["tp"].to_numpy() == cols["tp"]).all()


def test_part_files_are_atomic_and_carry_the_manifest(tmp_path):
    sp = Space.from_dict(SPACE)
    manifest, done = store.prepare_output(tmp_path / "r", sp)
    assert done == set()
    m = json.loads((tmp_path / "r.dse" / "manifest.json").read_text())  # the sidecar, not the dataset
    for key in ("dse_version", "space", "seed", "packages", "created", "git_revision", "chunk_size"):
        assert key in m
    assert m["space"]["hash"] == sp.hash and m["packages"]["pyarrow"] == pa.__version__
    meta = json.dumps(manifest).encode()
    t = store.to_arrow(evaluate_toy(sp.chunk(0, 50)), sp, metadata={store.META_KEY: meta})
    assert store.write_part(tmp_path / "r", 0, t) == 50
    assert store.write_part(tmp_path / "r", 3, None) == 0
    assert sorted(f.name for f in (tmp_path / "r").iterdir()) == ["part-000000.parquet"]  # Parquet only
    assert sorted(f.name for f in (tmp_path / "r.dse").iterdir()) == ["manifest.json", "part-000000.ok", "part-000003.empty"]  # the receipt of part 0
    assert sorted(f.name for f in tmp_path.iterdir()) == ["r", "r.dse"]  # no temp files left
    assert store.read_manifest(tmp_path / "r" / "part-000000.parquet")["space"]["hash"] == sp.hash
    assert store.done_chunks(tmp_path / "r") == {0, 3}
    assert len(store.read_results(tmp_path / "r")) == 50


def test_resume_same_space_and_stale_temp_files(tmp_path):
    sp = Space.from_dict(SPACE)
    out = tmp_path / "r"
    store.prepare_output(out, sp)
    store.write_part(out, 1, store.to_arrow(evaluate_toy(sp.chunk(50, 100)), sp))
    (tmp_path / ".r.part-000002.parquet.123-abc.tmp").write_bytes(b"half a file")
    manifest, done = store.prepare_output(out, sp)  # same hash: resume
    assert done == {1}
    assert not any(f.name.endswith(".tmp") for f in tmp_path.iterdir())


def test_refuses_another_space_and_keeps_its_files(tmp_path):
    out = tmp_path / "r"
    sweep(Space.from_dict(SPACE), out=out, jobs=1, progress=False)
    before = snapshot(out)
    with pytest.raises(ConfigError) as e:
        store.prepare_output(out, Space.from_dict(OTHER))
    msg = str(e.value)
    assert "\n" not in msg and "store-toy" in msg and "--overwrite" in msg
    assert snapshot(out) == before
    (out / "notes.txt").write_text("mine")
    res = sweep(Space.from_dict(OTHER), out=out, jobs=1, progress=False, overwrite=True)
    assert res.rows == Space.from_dict(OTHER).size
    assert (out / "notes.txt").read_text() == "mine"  # overwrite deletes only dse's own files
    assert store.read_manifest(out)["space"]["name"] == "other-toy"


def test_refuses_foreign_directory(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "data.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match="holds no dse run"):
        store.prepare_output(out, Space.from_dict(SPACE))
    assert (out / "data.csv").read_text() == "a,b\n"
    with pytest.raises(ConfigError, match="not a directory"):
        store.prepare_output(out / "data.csv", Space.from_dict(SPACE))


def test_read_results_order_columns_and_errors(tmp_path):
    sp = Space.from_dict(SPACE)
    out = tmp_path / "r"
    sweep(sp, out=out, jobs=1, progress=False)
    df = store.read_results(out)
    ref = pd.DataFrame({k: np.asarray(v) for k, v in evaluate_toy(sp.chunk(0, sp.size)).items()})
    assert len(df) == sp.size == store.count_rows(out)
    assert df["x"].tolist() == ref["x"].tolist() and df["toy_score_s"].tolist() == ref["toy_score_s"].tolist()
    assert isinstance(df["recompute"].dtype, pd.CategoricalDtype)
    assert list(store.read_results(out, columns=["tp", "x"]).columns) == ["tp", "x"]
    with pytest.raises(ConfigError, match="no column 'nope'"):
        store.read_results(out, columns=["nope"])
    with pytest.raises(ConfigError, match="no such results"):
        store.read_results(tmp_path / "missing")
    picks = store.take_rows(out, [(3, 5), (0, 1), (0, 0)])
    assert picks["x"].tolist() == [df["x"][3 * 50 + 5], df["x"][1], df["x"][0]]


# ----------------------------------------------------------------------------- CLI errors: exit 2, one line

def assert_one_line_exit_2(r, *fragments):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("dse: error:")
    for f in fragments:
        assert f in lines[0], lines[0]


def test_cli_refuses_other_space_directory_and_keeps_results(tmp_path):
    a, b = space_file(tmp_path, SPACE, "a.yaml"), space_file(tmp_path, OTHER, "b.yaml")
    out = tmp_path / "out"
    r = cli("sweep", a, "--out", out, "--jobs", "1")
    assert r.returncode == 0, r.stderr
    before = snapshot(out)
    r = cli("sweep", b, "--out", out, "--jobs", "1")
    assert_one_line_exit_2(r, str(out), "another space", "--overwrite")
    assert snapshot(out) == before
    r = cli("sweep", a, "--out", out, "--jobs", "1")  # same space: resumes, nothing to do
    assert r.returncode == 0 and "already done" in r.stdout
    assert {k: v for k, v in snapshot(out).items() if k != "sidecar/manifest.json"} == \
        {k: v for k, v in before.items() if k != "sidecar/manifest.json"}


@pytest.mark.parametrize("text, fragment", [
    ("name: t\naxes: {tp: [1, 2\n", "malformed YAML"),
    ("name: t\naxes:\n  tp: {values: [1], stpe: 2}\n", "axes.tp.stpe"),
    ("name: t\naxes:\n  tp: []\n", "space is empty"),
    ("name: t\nfixed: {model: gpt-nope}\naxes:\n  tp: {divisors_of: heads}\n", "unknown model"),
])
def test_cli_bad_space_files_exit_2(tmp_path, text, fragment):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    out = tmp_path / "out"
    r = cli("sweep", p, "--out", out)
    assert_one_line_exit_2(r, fragment, str(p))
    assert not out.exists()


def test_cli_bad_arguments_exit_2(tmp_path):
    a = space_file(tmp_path)
    assert_one_line_exit_2(cli("sweep", a, "--jobs", "0", "--out", tmp_path / "o"), "--jobs")
    assert_one_line_exit_2(cli("sweep", a, "--scheduler", "tcp://x:1", "--out", tmp_path / "o"), "--scheduler")
    assert_one_line_exit_2(cli("show", tmp_path / "nothing"), "no such results")
    out = tmp_path / "r"
    sweep(Space.from_dict(SPACE), out=out, jobs=1, progress=False)
    assert_one_line_exit_2(cli("pareto", out, "--objective", "nope:min"), "no such column")
    assert_one_line_exit_2(cli("pareto", out, "--objective", "toy_score_s:best"), "column:min or column:max")
    assert_one_line_exit_2(cli("top", out, "--by", "nope"), "no such column")


def test_write_table_atomic_single_file_with_manifest(tmp_path):
    """The one writer for single Parquet files (study trials/pareto/exhaustive): atomic, manifest
    in the metadata, extra key-value metadata beside it, no temp file left behind."""
    import json

    import pandas as pd
    import pyarrow.parquet as pq
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    p = store.write_table_atomic(tmp_path / "t.parquet", df, {"seed": 3}, metadata={b"dse.study_hash": "abc"})
    assert pd.read_parquet(p).equals(df)
    meta = pq.read_schema(p).metadata
    assert json.loads(meta[store.META_KEY])["seed"] == 3 and meta[b"dse.study_hash"] == b"abc"
    assert store.read_manifest(p)["seed"] == 3
    assert [f.name for f in tmp_path.iterdir()] == ["t.parquet"]
