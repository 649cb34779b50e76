"""Mutated space and study files (lines dropped, doubled or cut, values of the wrong type, typos in
keys, bytes of garbage): loading them, and evaluating the first rows, either works or ends in one
ConfigError line naming the file, never another exception and never a hang."""
from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest

import dse
from dse.errors import ConfigError
from dse.space import load_space
from dse.study import load_study

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "spaces").glob("*.yaml")) + sorted((ROOT / "studies").glob("*.yaml"))
GARBAGE = ["-1", "0", "1e400", "nan", "[]", "{}", "null", "true", "'x'", "[1, [2]]", "{a: 1}", "9**9**9",
           "&a [1]", "*a", "!!python/object:os.system", "\"\\x00\"", "99999999999999999999999"]


def _mutate(text: str, rng) -> str:
    lines = text.splitlines()
    i = int(rng.integers(len(lines)))
    kind = int(rng.integers(7))
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[i])
    elif kind == 2 and ":" in lines[i]:
        key, _, _ = lines[i].partition(":")
        lines[i] = f"{key}: {GARBAGE[int(rng.integers(len(GARBAGE)))]}"
    elif kind == 3 and ":" in lines[i]:
        key, sep, rest = lines[i].partition(":")
        lines[i] = key[:-1] + key[-1:] * 2 + sep + rest  # a typo in the key
    elif kind == 4:
        return text[: int(rng.integers(len(text)))]       # a cut file
    elif kind == 5:
        lines[i] = lines[i][: int(rng.integers(len(lines[i]) + 1))] + "\t\x07:{["
    else:
        lines[i] = lines[i].replace("[", "", 1)
    return "\n".join(lines) + "\n"


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout


@pytest.mark.parametrize("seed", range(105))
def test_mutated_file_gives_a_result_or_one_config_error_line(tmp_path, seed):
    rng = np.random.default_rng(seed)
    source = FILES[seed % len(FILES)]
    path = tmp_path / source.name
    path.write_text(_mutate(source.read_text(), rng))
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        if source.parent.name == "spaces":
            space = load_space(path)
            rows = space.chunk(0, min(space.size, 16))
            if space.evaluator in ("training", "inference") and rows and len(next(iter(rows.values()))):
                getattr(dse, f"evaluate_{space.evaluator}")(rows)
        else:
            load_study(path)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and message, message
    except _Timeout:
        pytest.fail(f"{source.name} mutated (seed {seed}) did not finish in 20 s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
