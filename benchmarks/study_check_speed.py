"""Wall time of the flagship exhaustive check, this tree against another git revision, side by side.

    python benchmarks/study_check_speed.py [--ref 35cf450] [--repeat 3]

Each run is `dse study run studies/train-cost-frontier-enumerable.yaml --exhaustive-check` into a
fresh directory (so the exhaustive sweep is recomputed), alternating the two trees; the medians
and their ratio are printed with both hypervolume ratios (timing recipe of shared/RECIPES.md).
The reference revision is checked out with `git worktree` into a temporary directory.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = "studies/train-cost-frontier-enumerable.yaml"


def run_once(tree: Path, out: Path) -> tuple[float, str]:
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree), CI="1")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dse.cli", "study", "run", STUDY, "--exhaustive-check", "--out", str(out),
                        "--quiet"], cwd=tree, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    hv = re.search(r"hypervolume ratio ([0-9.]+)", r.stdout)
    return wall, hv.group(1) if hv else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="35cf450", help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dse-study-speed-"))
    ref = tmp / "ref"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(ref), args.ref], check=True,
                   capture_output=True)
    try:
        times = {"this tree": [], f"ref {args.ref}": []}
        hv = {}
        for _ in range(args.repeat):
            for label, tree in (("this tree", ROOT), (f"ref {args.ref}", ref)):
                wall, ratio = run_once(tree, tmp / "out")
                times[label].append(wall)
                hv[label] = ratio
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in times.items():
            print(f"{k:>14}: median {med[k]:.2f} s of {', '.join(f'{t:.2f}' for t in v)}; hypervolume ratio {hv[k]}")
        print(f"speed-up: {med[f'ref {args.ref}'] / med['this tree']:.2f}x")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
