"""A part that is truncated, emptied or overwritten after it was committed is detected: readers name
the file in one line, resume redoes its chunk and ends with the dataset of an uninterrupted run."""
from __future__ import annotations

import pandas as pd
import pytest

from dse import store
from dse.errors import ConfigError
from dse.space import Space
from dse.sweep import evaluate_toy, sweep

SPACE = {"name": "torn-toy", "chunk_size": 40, "fixed": {"gpus": 64, "model": "gpt3-175b"},
         "axes": {"tp": {"divisors_of": ["gpus", "heads"]}, "pp": {"pow2": [1, 16]},
                  "dp": {"derive": "gpus / (tp * pp)"}, "micro_batch": [1, 2, 4, 8]}}


def _sweep(out):
    return sweep(Space.from_dict(SPACE), out=out, jobs=1, progress=False, evaluator=evaluate_toy)


@pytest.mark.parametrize("damage", ["truncate", "empty", "overwrite"])
def test_torn_part_is_named_by_readers_and_redone_on_resume(tmp_path, damage):
    out = tmp_path / "r"
    _sweep(out)
    whole = store.read_results(out)
    parts = store.part_files(out)
    assert len(parts) >= 3
    victim = parts[1]
    data = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        victim.write_bytes(b"")
    else:  # another chunk's (valid Parquet) content under this name
        victim.write_bytes(parts[2].read_bytes())
    with pytest.raises(ConfigError, match=rf"^{victim}: torn or altered part"):
        store.read_results(out)
    res = _sweep(out)  # resume: the torn chunk is redone, nothing else
    assert res.chunks_run == 1
    pd.testing.assert_frame_equal(store.read_results(out), whole)


def test_cli_show_names_a_torn_part_in_one_line(tmp_path, capsys):
    from dse.cli import main
    out = tmp_path / "r"
    _sweep(out)
    part = store.part_files(out)[0]
    part.write_bytes(part.read_bytes()[:100])
    assert main(["show", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(part) in err and "torn" in err


def test_a_copied_dataset_keeps_its_manifest_in_its_parts(tmp_path):
    import shutil
    out = tmp_path / "r"
    _sweep(out)
    shutil.copytree(out, tmp_path / "copy")          # the dataset alone, without its sidecar
    assert store.read_manifest(tmp_path / "copy")["space"]["name"] == "torn-toy"
    assert len(store.read_results(tmp_path / "copy")) == len(store.read_results(out))
