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
