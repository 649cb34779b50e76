"""Bad command lines, as a hostile user types them: each ends in one line on stderr naming the field,
exit 2, no traceback, and no invalid value accepted."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["train", "--model", "gpt3-175b", "--system", "a100-80gb", "--gpus", "64", "--tp", "8", "--pp", "8"]
INFER = ["infer", "--model", "llama2-7b", "--system", "h100-sxm", "--gpus", "1"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("r") / "example"
    r = subprocess.run([sys.executable, "-m", "dse.cli", "sweep", str(ROOT / "spaces" / "example.yaml"), "--out",
                        str(out)], capture_output=True, text=True, env={"CI": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return out


CASES = [
    (TRAIN + ["--seq-len", "-4096"], "seq_len"), (TRAIN[:6] + ["--gpus", "0"], "gpus"),
    (TRAIN + ["--zero", "7"], "zero"), (TRAIN + ["--tp", "0"], "tp"), (TRAIN + ["--micro-batch", "0"], "micro_batch"),
    (TRAIN + ["--global-batch", "-1"], "global_batch"), (TRAIN + ["--model", "gpt9"], "model"),
    (TRAIN + ["--system", "h1000"], "system"), (TRAIN + ["--framework", "megatron-xl"], "framework"),
    (TRAIN + ["--precision", "fp7"], "precision"), (TRAIN + ["--recompute", "some"], "recompute"),
    (TRAIN + ["--tp", "abc"], "--tp"), (TRAIN + ["--cp", "3"], "cp"), (TRAIN + ["--train-tokens", "-5"], "train_tokens"),
    (INFER + ["--batch", "0"], "batch"), (INFER + ["--isl", "-1"], "isl"), (INFER + ["--tp", "3"], "tp"),
    (INFER + ["--kv-precision", "int3"], "kv_precision"),
    (["sweep", "no/such/space.yaml"], "space.yaml"), (["sweep", str(ROOT / "spaces" / "example.yaml"), "--jobs", "0"], "jobs"),
    (["study", "run", "no-such-study"], "no-such-study"), (["study", "run", "quickstart", "--budget", "0"], "budget"),
    (["list", "gpus"], "list"), (["report", "nonsense"], "report"),
    (["roofline", "llama2-7b", "--systems", "h100-sxm", "--batch", "0"], "batch"),
    (["roofline", "llama2-7b", "--systems", "h100-sxm", "--phases", "warmup"], "phases"),
    (["validate", "--suite", "inference", "--where", "no-such-run"], "--where"),
]


@pytest.mark.parametrize("args, field", CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES])
def test_bad_command_line_is_one_line_exit_2(tmp_path, args, field):
    r = subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert field in err, err


@pytest.mark.parametrize("args, field", [
    (["top", "{d}", "--by", "mfu", "-k", "-1"], "-k"), (["top", "{d}", "--by", "no_such_column"], "no_such_column"),
    (["pareto", "{d}", "--objective", "recompute:min"], "recompute"), (["pareto", "{d}", "--objective", "mfu:up"], "mfu:up"),
    (["pareto", "{d}", "--objective", "mfu:max", "--out", "{d}"], "--out"), (["show", "{d}/nothing-here"], "nothing-here"),
])
def test_bad_queries_on_a_dataset_are_one_line_exit_2(dataset, args, field):
    before = sorted((p.name, p.stat().st_size) for p in dataset.iterdir())
    args = [a.replace("{d}", str(dataset)) for a in args]
    r = subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr and field in r.stderr
    assert sorted((p.name, p.stat().st_size) for p in dataset.iterdir()) == before
