"""The README's shown output comes from a real run: its quickstart lines equal a fresh run's (the
wall time aside), and its `dse train` block equals the command's output."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _dse(*args, cwd=ROOT):
    r = subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _no_time(line: str) -> str:
    return re.sub(r"\d+\.\d+ s ->.*$", "<time> s", line)


def test_quickstart_lines_match_a_fresh_run(tmp_path):
    shown = next(line for line in README.splitlines() if line.startswith("quickstart: "))
    out = _dse("study", "run", str(ROOT / "studies" / "quickstart.yaml"), "--out", str(tmp_path / "q"))
    fresh = next(line for line in out.splitlines() if line.startswith("quickstart: "))
    assert _no_time(fresh) == _no_time(shown)
    first_row = README.split("$ dse study run studies/quickstart.yaml")[1].splitlines()[3].split()[:4]
    assert out.splitlines()[2].split()[:4] == first_row   # the front's first design: trial and objectives


def test_train_block_matches_the_command():
    block = README.split("```console\n$ dse train ")[1].split("```")[0]
    command, shown = block.split("\n", 1)[0], block.split("\n", 2)[2]
    args = (command.rstrip(" \\") + " " + block.split("\n")[1].strip()).split()
    assert _dse("train", *args).strip() == shown.strip()


def test_infer_block_matches_the_command():
    block = README.split("```console\n$ dse infer ")[1].split("```")[0]
    command, shown = block.split("\n", 1)
    assert _dse("infer", *command.split()).strip() == shown.strip()


def test_sweep_section_numbers_match_a_fresh_sweep(tmp_path):
    # the Sweeps section's Pareto row count and its DuckDB table (recomputed here with pandas)
    import pandas as pd
    out = tmp_path / "example"
    _dse("sweep", str(ROOT / "spaces" / "example.yaml"), "--out", str(out))
    front = _dse("pareto", str(out), "--objective", "step_time_s:min", "--objective", "mem_per_gpu_bytes:min")
    rows = int(re.search(r": (\d+) rows", front).group(1))
    assert f"# {rows} rows -> results/example.dse/pareto.parquet" in README
    df = pd.read_parquet(out)
    fits = df[df["fits"]]
    table = fits.groupby("recompute", observed=True)["mfu"].agg(["size", "max"]).sort_values("max", ascending=False)
    shown = README.split("#    recompute  rows  best_mfu\n")[1].split("\npl.scan_parquet")[0].splitlines()
    for line, (recompute, r) in zip(shown, table.iterrows()):
        _, _, name, count, best = line.split()
        assert (name, int(count)) == (recompute, int(r["size"])) and float(best) == round(float(r["max"]), 6)
    assert len(shown) == len(table)


def test_validate_summary_matches_a_fresh_run():
    # the README's per-source table is `dse validate`'s, as it prints it now
    shown = README.split("```text\n                                                                           rows  mape_pct")[1]
    shown = shown.split("```")[0].strip().splitlines()[1:]
    fresh = [line.rstrip() for line in _dse("validate").split("Mean absolute percentage error per source")[1]
             .splitlines()[3:] if line.strip()]
    assert [line.rstrip() for line in shown[1:]] == fresh


def test_calibrate_block_matches_a_fresh_run(kernels_dir):
    block = README.split("$ dse calibrate ../shared/data/kernels --gpu h100_sxm\n")[1].split("```")[0]
    fresh = _dse("calibrate", str(kernels_dir), "--gpu", "h100_sxm")
    assert fresh.strip() == block.strip()
