"""Space files: validation, mixed-radix enumeration, constraints, hashing, bounded memory."""
from __future__ import annotations

import itertools
import math
import pickle
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse import space as S
from dse.errors import ConfigError
from dse.space import Space, load_space

ROOT = Path(__file__).resolve().parent.parent

TOY = {
    "name": "toy",
    "evaluator": "dse.sweep:evaluate_toy",
    "fixed": {"gpus": 64, "model": "gpt3-175b"},
    "axes": {
        "tp": {"divisors_of": ["gpus", "heads"]},
        "pp": {"pow2": [1, 64]},
        "dp": {"derive": "gpus / (tp * pp)"},
        "micro_batch": {"divisors_of": "64 // dp"},
        "recompute": ["none", "selective", "full"],
        "sp": [False, True],
        "x": {"range": [0, 9], "step": 3},
    },
    "constraints": ["tp > 1 or not sp", "micro_batch <= 4"],
}


def brute_force(d=TOY) -> set:
    """Nested loops in plain Python: the reference enumeration of TOY."""
    gpus, heads = 64, 96
    rows = set()
    for tp in [t for t in range(1, 65) if gpus % t == 0 and heads % t == 0]:
        for pp in [1, 2, 4, 8, 16, 32, 64]:
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            for mb in [m for m in range(1, 65) if (64 // dp) % m == 0]:
                for rc, sp, x in itertools.product(["none", "selective", "full"], [False, True], [0, 3, 6, 9]):
                    if (tp > 1 or not sp) and mb <= 4:
                        rows.add((gpus, "gpt3-175b", tp, pp, dp, mb, rc, sp, x))
    return rows


def as_rows(cols: dict) -> list[tuple]:
    keys = list(cols)
    arrays = [np.asarray(cols[k]).tolist() for k in keys]
    return list(zip(*arrays))


def write(tmp_path, text: str, name="space.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ----------------------------------------------------------------------------- enumeration

def test_toy_matches_brute_force_exactly():
    sp = Space.from_dict(TOY)
    full = sp.chunk(0, sp.size)
    rows = as_rows(full)
    assert sp.exact and len(rows) == sp.size
    assert len(set(rows)) == len(rows)  # each point once
    assert set(rows) == brute_force()
    assert list(full) == ["gpus", "model", "tp", "pp", "dp", "micro_batch", "recompute", "sp", "x"]
    assert isinstance(full["model"], pd.Categorical) and isinstance(full["recompute"], pd.Categorical)
    assert full["tp"].dtype == np.int64 and full["sp"].dtype == bool


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_chunks_concatenate_to_full_enumeration(cuts):
    sp = Space.from_dict(TOY)
    full = as_rows(sp.chunk(0, sp.size))
    bounds = sorted({0, sp.size, *[c % (sp.size + 1) for c in cuts]})
    pieces = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        part = as_rows(sp.chunk(a, b))
        assert part == full[a:b]  # a chunk depends only on its start and stop
        pieces.extend(part)
    assert pieces == full


def test_chunk_is_independent_of_history_and_pickles_small():
    sp = Space.from_dict(TOY)
    a = as_rows(sp.chunk(100, 300))
    sp.chunk(0, sp.size)
    clone = pickle.loads(pickle.dumps(sp))
    assert len(pickle.dumps(sp)) < 5000
    assert as_rows(clone.chunk(100, 300)) == a and clone.hash == sp.hash
    assert sp.chunk(sp.size, sp.size + 10)["tp"].size == 0
    assert list(sp.chunks(1000))[-1][2] == sp.size and sp.n_chunks(1000) == math.ceil(sp.size / 1000)


def test_axis_kinds_and_expressions():
    sp = Space.from_dict({
        "name": "kinds",
        "fixed": {"n": 12, "label": "a"},
        "axes": {
            "a": [1, 2, 3],
            "b": {"values": [0.5, 1.5]},
            "r": {"range": [2, 10], "step": 4},
            "p": {"pow2": [3, 40]},
            "d": {"divisors_of": "n"},
            "g": {"divisors_of": [12, 18]},
            "q": {"derive": "n / a"},
            "f": {"derive": "a / 4", "real": True},
            "big": {"derive": "a > 1"},
        },
        "constraints": ["1 <= a < 3", "not (b > 1 and a == 2)", "where(a == 1, r > 2, true)",
                        "max(a, d) >= 2 and label == 'a'"],
    })
    full = sp.chunk(0, sp.size)
    assert set(np.unique(full["r"])) <= {2, 6, 10} and set(np.unique(full["p"])) == {4, 8, 16, 32}
    assert set(np.unique(full["g"])) == {1, 2, 3, 6}
    assert np.all(full["q"] == 12 // full["a"]) and full["q"].dtype == np.int64
    assert np.allclose(full["f"], full["a"] / 4) and full["f"].dtype == float
    assert full["big"].dtype == bool
    assert set(np.unique(full["a"])) == {1, 2}
    assert not np.any((full["b"] > 1) & (full["a"] == 2))
    assert np.all(np.maximum(full["a"], full["d"]) >= 2)
    assert np.all(full["r"][full["a"] == 1] > 2)
    assert len(full["a"]) == sp.size


def test_derived_split_drops_non_integral_rows():
    sp = Space.from_dict({"name": "s", "fixed": {"gpus": 12},
                          "axes": {"tp": [1, 2, 3, 4, 5], "dp": {"derive": "gpus / tp"}}})
    full = sp.chunk(0, sp.size)
    assert full["tp"].tolist() == [1, 2, 3, 4] and full["dp"].tolist() == [12, 6, 4, 3]


def test_catalog_constants_are_usable_not_emitted():
    sp = Space.from_dict({"name": "c", "fixed": {"model": "gpt3-175b", "system": "a100-80gb"},
                          "axes": {"tp": {"divisors_of": "heads"}, "pp": {"divisors_of": "layers"}},
                          "constraints": ["tp <= scaleup_domain"]})
    full = sp.chunk(0, sp.size)
    assert "heads" not in full and "scaleup_domain" not in full
    assert sorted(set(full["tp"].tolist())) == [1, 2, 3, 4, 6, 8]
    assert len(set(full["pp"].tolist())) == 12  # divisors of 96


def test_lazy_constraint_fallback_gives_the_same_rows(monkeypatch):
    d = {**TOY, "constraints": TOY["constraints"] + ["x != 3 or micro_batch != 1"]}
    exact = Space.from_dict(d)
    # too small to link the parallel-degree group with sp and x: those constraints run per chunk
    monkeypatch.setattr(sys.modules["dse.space.groups"], "MAX_GROUP_ROWS", max(g.n for g in exact._groups if "tp" in g.cols))
    lazy = Space.from_dict(d)
    assert exact.exact and not lazy.exact and lazy.size > exact.size
    rows = []
    for _, a, b in lazy.chunks(97):
        rows.extend(as_rows(lazy.chunk(a, b)))
    ref = as_rows(exact.chunk(0, exact.size))
    assert len(rows) == len(ref) and sorted(rows) == sorted(ref)


def test_gpt3_space_is_valid_by_construction():
    sp = load_space(ROOT / "spaces" / "gpt3-175b-a100-4096.yaml")
    assert sp.name == "gpt3-175b-a100-4096" and sp.exact
    assert sp.size == 4_536_384
    c = sp.chunk(sp.size // 2, sp.size // 2 + 50_000)
    assert np.all(c["tp"] * c["pp"] * c["cp"] * c["dp"] == 4096)
    assert np.all(96 % (c["pp"] * c["vp"]) == 0)
    assert np.all((c["global_batch"] // c["dp"]) % c["micro_batch"] == 0)
    assert np.all(c["global_batch"] <= 2048) and np.all(c["global_batch"] % c["dp"] == 0)
    assert not np.any(c["sp"] & (c["tp"] == 1)) and not np.any((c["zero"] > 0) & (c["dp"] == 1))


def test_example_space_is_small():
    sp = load_space(ROOT / "spaces" / "example.yaml")
    assert 1000 <= sp.size <= 10_000


def test_large_space_is_streamed_not_materialised():
    """A 100-million-point space loads in kilobytes; a chunk costs only its own rows."""
    d = {"name": "big", "fixed": {"gpus": 1024},
         "axes": {"a": {"range": [1, 1000]}, "b": {"range": [1, 1000]}, "c": {"range": [1, 100]},
                  "tp": {"pow2": [1, 8]}, "dp": {"derive": "gpus / tp"}}}
    tracemalloc.start()
    sp = Space.from_dict(d)
    _, peak_load = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    c = sp.chunk(sp.size - 100_000, sp.size)
    _, peak_chunk = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sp.size == 400_000_000
    assert peak_load < 2_000_000  # bytes: no cartesian product was built
    assert peak_chunk < 100_000 * 8 * 16  # a few arrays of the chunk's length
    assert c["a"][-1] == 1000 and c["b"][-1] == 1000 and c["c"][-1] == 100 and c["tp"][-1] == 8
    assert c["dp"][-1] == 128


def test_module_docstring_example_loads():
    import yaml
    doc = S.__doc__
    block = doc[doc.index("    name: "):doc.index("Expressions (derive")]
    sp = Space.from_dict(yaml.safe_load("\n".join(line[4:] for line in block.splitlines())))
    assert sp.size > 0 and "layers_per_stage" in sp.columns


def test_hash_is_canonical(tmp_path):
    a = write(tmp_path, "name: h\naxes:\n  tp: [1, 2]\n  pp: [1, 2]\n", "a.yaml")
    b = write(tmp_path, "# comment\naxes: {tp: [1,2], pp: [1,2]}\nname: h   # same content\n", "b.yaml")
    c = write(tmp_path, "name: h\naxes:\n  pp: [1, 2]\n  tp: [1, 2]\n", "c.yaml")
    ha, hb, hc = (load_space(p).hash for p in (a, b, c))
    assert ha == hb != hc  # axis order defines row order, so it is part of the hash
    assert Space.from_dict({"axes": {"tp": [1, 2], "pp": [1, 2]}}, name="h").hash == ha
    assert len(ha) == 64


# ----------------------------------------------------------------------------- bad input

def one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_unknown_top_level_key(tmp_path):
    p = write(tmp_path, "name: t\naxis:\n  tp: [1]\n")
    with pytest.raises(ConfigError) as e:
        load_space(p)
    msg = one_line(e)
    assert str(p) in msg and "axis" in msg and "allowed keys: name, description, evaluator" in msg
    assert "did you mean 'axes'" in msg


def test_unknown_axis_key_names_path_and_allowed_keys(tmp_path):
    p = write(tmp_path, "name: t\naxes:\n  tp: {range: [1, 4], stpe: 2}\n")
    with pytest.raises(ConfigError) as e:
        load_space(p)
    msg = one_line(e)
    assert str(p) in msg and "axes.tp.stpe" in msg and "allowed keys: range, step" in msg


def test_axis_without_kind(tmp_path):
    p = write(tmp_path, "name: t\naxes:\n  tp: {rnage: [1, 4]}\n")
    with pytest.raises(ConfigError) as e:
        load_space(p)
    msg = one_line(e)
    assert "axes.tp.rnage" in msg and "values, range, pow2, divisors_of, derive" in msg


@pytest.mark.parametrize("text, fragment", [
    ("name: t\naxes: {tp: [1, 2\n", "malformed YAML at line"),
    ("name: t\naxes:\n\ttp: [1]\n", "malformed YAML"),
    ("", "file is empty"),
    ("- 1\n- 2\n", "must be a mapping"),
    ("name: t\naxes:\n  tp: []\n", "space is empty"),
    ("name: t\naxes:\n  tp: {range: [4, 1]}\n", "space is empty"),
    ("name: t\naxes:\n  tp: [1, 2]\nconstraints: ['tp > 5']\n", "space is empty"),
    ("name: t\nfixed: {g: 6}\naxes:\n  tp: [4, 5]\n  dp: {derive: 'g / tp'}\n", "space is empty"),
    ("name: t\n", "space is empty"),
    ("name: t\naxes:\n  dp: {derive: 'gpus / tp'}\n  tp: [1]\nfixed: {gpus: 8}\n", "defined later"),
    ("name: t\naxes:\n  tp: [1]\nconstraints: ['tpp > 1']\n", "unknown name 'tpp'"),
    ("name: t\naxes:\n  tp: [1]\nconstraints: ['__import__(\"os\")']\n", "not allowed"),
    ("name: t\naxes:\n  tp: [1]\nconstraints: ['tp.real > 0']\n", "not allowed"),
    ("name: t\naxes:\n  tp: [1, a]\n", "mixes"),
    ("name: t\nfixed: {gpus: [1, 2]}\naxes:\n  tp: [1]\n", "put lists under axes"),
    ("name: t\nfixed: {tp: 1}\naxes:\n  tp: [1]\n", "also under fixed"),
    ("name: t\nevaluator: trainign\naxes:\n  tp: [1]\n", "unknown evaluator"),
    ("name: t\nchunk_size: 0\naxes:\n  tp: [1]\n", "positive"),
    ("name: t\nfixed: {model: nosuchmodel}\naxes:\n  tp: {divisors_of: heads}\n", "unknown model"),
])
def test_bad_space_files_raise_one_line(tmp_path, text, fragment):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_space(p)
    msg = one_line(e)
    assert fragment in msg and str(p) in msg


def test_missing_file():
    with pytest.raises(ConfigError, match="no such space file"):
        load_space("/nonexistent/space.yaml")
