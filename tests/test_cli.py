"""The `dse` command line: --json outputs, help texts, `dse infer`, `dse list assumptions`, the
refusal of code named by a space file, and one-line errors (exit 2 expected, exit 1 unexpected)."""
from __future__ import annotations

import argparse
import copy
import json
import sys
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from dse import store
from dse.cli import build_parser, main
from dse.space import Space
from dse.sweep import evaluate_toy, sweep

SPACE = {
    "name": "cli-toy",
    "evaluator": "dse.sweep:evaluate_toy",
    "chunk_size": 100,
    "fixed": {"gpus": 16, "model": "gpt3-175b"},
    "axes": {"tp": {"pow2": [1, 8]}, "pp": {"pow2": [1, 4]}, "dp": {"derive": "gpus / (tp * pp)"},
             "x": {"range": [0, 9]}},
}

sys.path.insert(0, str(Path(__file__).parent))
from test_study import tiny  # noqa: E402  (the tiny study every study test uses)

STUDY = tiny(name="clijson")

INFER = ["infer", "--model", "llama3.1-70b", "--system", "h100-sxm", "--gpus", "8", "--tp", "8",
         "--batch", "16", "--isl", "2048", "--osl", "256"]


def _nan_evaluator(cols):
    out = evaluate_toy(cols)
    out["never_measured_s"] = np.full(len(out["tp"]), np.nan)
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "r"
    sweep(Space.from_dict(SPACE), out=out, jobs=1, progress=False, evaluator=_nan_evaluator)
    return out


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_line_error(err: str, code: int, expected: int = 2) -> str:
    assert code == expected, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------- --json

def test_top_json(results, capsys):
    code, out, _ = run(capsys, "top", results, "--by", "toy_score_s", "-k", "3", "--json")
    assert code == 0
    d = json.loads(out)
    assert {"results", "by", "ascending", "feasible_only", "k", "rows"} <= set(d)
    assert len(d["rows"]) == 3 and {"tp", "pp", "toy_score_s", "fits"} <= set(d["rows"][0])
    assert d["rows"][0]["never_measured_s"] is None  # NaN -> null
    scores = [r["toy_score_s"] for r in d["rows"]]
    assert scores == sorted(scores, reverse=True)


def test_pareto_json(results, tmp_path, capsys):
    code, out, _ = run(capsys, "pareto", results, "--objective", "toy_score_s:min", "--objective", "x:max",
                       "--out", tmp_path / "front.parquet", "--json")
    assert code == 0
    d = json.loads(out)
    assert {"results", "objectives", "senses", "feasible_only", "out", "rows", "front"} <= set(d)
    assert d["objectives"] == ["toy_score_s", "x"] and d["senses"] == ["min", "max"]
    assert d["rows"] == len(d["front"]) > 0 and (tmp_path / "front.parquet").is_file()


def test_show_json_and_all_nan_column(results, capsys):
    code, out, _ = run(capsys, "show", results, "--json")
    assert code == 0
    d = json.loads(out)
    assert {"results", "kind", "space", "chunks", "created", "dse_version", "packages", "rows", "part_files",
            "feasible", "columns", "summary"} <= set(d)
    sp = Space.from_dict(SPACE)
    assert d["kind"] == "sweep" and d["rows"] == sp.size and d["chunks"]["complete"]
    summary = {s["column"]: s for s in d["summary"]}
    assert summary["never_measured_s"] == {"column": "never_measured_s", "min": None, "max": None}
    assert summary["toy_score_s"]["min"] <= summary["toy_score_s"]["max"]
    code, out, _ = run(capsys, "show", results)
    assert code == 0 and "never_measured_s" in out
    assert "inf" not in out  # an all-NaN column is '-', never inf / -inf


@pytest.mark.parametrize("what", ["systems", "models", "columns", "reasons", "assumptions"])
def test_list_json(what, capsys):
    code, out, _ = run(capsys, "list", what, "--json")
    assert code == 0
    d = json.loads(out)
    assert d["what"] == what and len(d["rows"]) > 0 and isinstance(d["rows"][0], dict)
    if what == "systems":
        assert "h100-sxm" in {r["name"] for r in d["rows"]}


def test_study_show_json(tmp_path, capsys):
    from dse import study as S
    p = tmp_path / "clijson.yaml"
    p.write_text(yaml.safe_dump(copy.deepcopy(STUDY), sort_keys=False))
    S.run_study(p, out=tmp_path / "res", progress=False)
    code, out, _ = run(capsys, "study", "show", p, "--out", tmp_path / "res", "--json")
    assert code == 0
    d = json.loads(out)
    assert {"study", "out", "objectives", "senses", "designs", "feasible", "front_designs", "front"} <= set(d)
    assert d["study"] == "clijson" and d["designs"] == 8 and d["front_designs"] == len(d["front"]) > 0
    assert {"time_to_train_days", "cost_per_run_usd", "node", "gpus"} <= set(d["front"][0])


# ----------------------------------------------------------------------------- dse infer

def test_infer_prints_the_point(capsys):
    code, out, _ = run(capsys, *INFER)
    assert code == 0
    for text in ("ttft_s", "tpot_s", "e2e_latency_s", "output tokens/s", "per GPU", "kv_cache per GPU",
                 "mem_per_gpu ", "fits True", "prefill (s)", "decode step (s)", "cost per Mtoken"):
        assert text in out, text


def test_infer_json(capsys):
    from dse.cli.infer import JSON_KEYS
    code, out, _ = run(capsys, *INFER, "--json")
    assert code == 0
    d = json.loads(out)
    assert set(d) == set(JSON_KEYS)
    assert d["fits"] is True and d["infeasible_reason"] is None and d["ttft_s"] > 0 and d["tpot_s"] > 0
    assert d["output_tokens_per_s_per_gpu"] == pytest.approx(d["output_tokens_per_s"] / 8)
    assert d["cost_per_million_tokens_usd"] > 0


@pytest.mark.parametrize("change, field", [
    (["--tp", "3"], "gpus"),                  # tp does not divide the GPU count (the line names tp)
    (["--tp", "4", "--batch", "3"], "batch"),  # two replicas cannot share 3 sequences
    (["--isl", "0"], "isl"),                   # outside the column's domain
])
def test_infer_refuses_an_impossible_request(change, field, capsys):
    base = ["infer", "--model", "llama3.1-70b", "--system", "h100-sxm", "--gpus", "8", "--batch", "16"]
    code, out, err = run(capsys, *base, *change)
    line = one_line_error(err, code)
    assert line.startswith(f"dse: error: {field}:")
    if field == "gpus":
        assert "change tp or gpus" in line
    assert out == ""


def test_train_split_names_the_degree_at_fault(capsys):
    code, _, err = run(capsys, "train", "--model", "gpt3-175b", "--system", "h100-sxm", "--gpus", "8", "--pp", "3")
    line = one_line_error(err, code)
    assert line.startswith("dse: error: gpus: 8 is not a multiple of pp = 3 (") and "change pp or gpus" in line


def test_infer_out_of_memory_is_a_row_not_an_error(capsys):
    code, out, _ = run(capsys, "infer", "--model", "llama3.1-70b", "--system", "h100-sxm", "--gpus", "1",
                       "--batch", "64", "--isl", "8192", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["fits"] is False and "memory" in d["infeasible_reason"]


# ----------------------------------------------------------------------------- dse list assumptions

def test_list_assumptions(capsys):
    code, out, _ = run(capsys, "list", "assumptions")
    assert code == 0
    for name in ("electricity_usd_per_kwh", "pue", "lifetime_years", "gross_margin", "host_cost_per_gpu_usd",
                 "power_utilization", "network_cost_usd_per_gbit_s"):
        assert name in out, name
    code, out, _ = run(capsys, "list", "assumptions", "--json")
    rows = {r["name"]: r for r in json.loads(out)["rows"]}
    assert rows["pue"]["value"] == pytest.approx(1.2) and rows["pue"]["basis"]
    assert all(r["basis"] and r["used_for"] for r in rows.values())
    assert rows["electricity_usd_per_kwh"]["used_for"].startswith("cost per run")


# ----------------------------------------------------------------------------- help texts

def _actions(parser, path=("dse",)):
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield path + (choice.dest,), choice
            for name, sub in action.choices.items():
                yield from _actions(sub, path + (name,))


def test_every_option_of_every_command_has_help_default_and_choices():
    seen = 0
    for path, action in _actions(build_parser()):
        where = f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
        assert action.help and action.help.strip(), f"{where}: no help text"
        seen += 1
        if isinstance(action, (argparse._SubParsersAction, argparse._VersionAction)):
            continue
        if action.option_strings and action.default not in (None, False):
            assert "default" in action.help, f"{where}: the help does not state the default {action.default!r}"
        if action.choices:
            missing = [c for c in action.choices if str(c) not in action.help]
            assert not missing, f"{where}: the help does not list {missing}"
    assert seen > 80
    commands = build_parser()._subparsers._group_actions[0].choices
    assert {"infer", "train", "sweep", "top", "pareto", "show", "list", "study"} <= set(commands)


# ----------------------------------------------------------------------------- no code from data files

EVIL = """
from pathlib import Path
Path(__file__).with_name("imported.marker").write_text("the space file ran code")
from dse.sweep import evaluate_toy as run
"""


def test_a_space_file_naming_code_is_refused_before_anything_is_imported(tmp_path, capsys, monkeypatch):
    (tmp_path / "evil_mod.py").write_text(EVIL)
    monkeypatch.syspath_prepend(str(tmp_path))
    for evaluator in ("subprocess:run", "evil_mod:run"):
        spath = tmp_path / "space.yaml"
        spath.write_text(yaml.safe_dump({**SPACE, "evaluator": evaluator}, sort_keys=False))
        code, _, err = run(capsys, "sweep", spath, "--out", tmp_path / "out", "--jobs", "1")
        line = one_line_error(err, code)
        assert "evaluator" in line and evaluator in line and "--allow-code-evaluator" in line
        assert not (tmp_path / "out").exists()
    assert "evil_mod" not in sys.modules and not (tmp_path / "imported.marker").exists()
    # the explicit flag says the file may run code
    code, _, err = run(capsys, "sweep", spath, "--out", tmp_path / "out", "--jobs", "1", "--allow-code-evaluator")
    assert code == 0, err
    assert (tmp_path / "imported.marker").exists()
    sys.modules.pop("evil_mod", None)


def test_registered_evaluators_pass_and_unknown_names_are_refused_when_loading():
    from dse.errors import ConfigError
    for name in ("training", "inference", "dse.sweep:evaluate_toy"):
        assert Space.from_dict({**SPACE, "evaluator": name}).evaluator == name
    with pytest.raises(ConfigError, match="unknown evaluator"):
        Space.from_dict({**SPACE, "evaluator": "os.system('x'):y"})


# ----------------------------------------------------------------------------- one-line errors

def test_output_under_a_regular_file_is_one_line_exit_2(results, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, _, err = run(capsys, "pareto", results, "--objective", "toy_score_s:min", "--out", blocker / "f.parquet")
    assert str(blocker) in one_line_error(err, code)
    spath = tmp_path / "space.yaml"
    spath.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    code, _, err = run(capsys, "sweep", spath, "--out", blocker / "out", "--jobs", "1")
    assert str(blocker) in one_line_error(err, code)


def test_garbage_parquet_is_one_line_exit_2(results, tmp_path, capsys):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(results, bad)
    shutil.copytree(results.with_name(results.name + ".dse"), tmp_path / "bad.dse", dirs_exist_ok=True) \
        if results.with_name(results.name + ".dse").is_dir() else None
    part = store.part_files(bad)[0]
    part.write_bytes(b"PAR1 this is not parquet at all" * 10)
    for argv in (["top", bad, "--by", "toy_score_s"], ["pareto", bad, "--objective", "toy_score_s:min",
                                                        "--out", tmp_path / "p.parquet"], ["show", bad]):
        code, _, err = run(capsys, *argv)
        one_line_error(err, code)
    lone = tmp_path / "lone.parquet"
    lone.write_bytes(b"garbage")
    code, _, err = run(capsys, "top", lone, "--by", "x")
    one_line_error(err, code)


def test_unexpected_errors_are_one_line_exit_1_and_traceback_with_debug(monkeypatch, capsys):
    import dse.cli.listing as L

    def boom(what):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(L, "table", boom)
    code, _, err = run(capsys, "list", "models")
    line = one_line_error(err, code, expected=1)
    assert "RuntimeError: boom second line" in line and "--debug" in line
    code, _, err = run(capsys, "--debug", "list", "models")
    assert code == 1 and "Traceback" in err and "boom" in err


def test_bad_option_values_are_one_line_exit_2(capsys):
    for argv in (["top", "x", "--by", "mfu", "-k", "-1"], ["study", "show", "quickstart", "--rows", "-5"],
                 ["bench", "--rows", "-5"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        one_line_error(capsys.readouterr().err, 2)


# ----------------------------------------------------------------------------- progress

def test_sweep_progress_counts_rows(tmp_path, capsys):
    sp = Space.from_dict(SPACE)
    sweep(sp, out=tmp_path / "r", jobs=1, progress=True)
    err = capsys.readouterr().err
    assert f"{sp.size}/{sp.size}" in err and "row/s" in err


def test_serve_says_how_near_unmet_targets_come(capsys):
    # targets no configuration meets: the lowest TTFT and TPOT reached, each above its target
    code, out, _ = run(capsys, "serve", "llama3-70b", "--system", "h100-sxm", "--gpus", "1,8",
                       "--ttft-ms", "1", "--tpot-ms", "0.1", "--aggregated-only")
    assert code == 0
    near = re.search(r"h100-sxm\s+8  no configuration meets the targets \(lowest reached: TTFT ([\d.]+) ms, TPOT ([\d.]+) ms\)", out)
    assert near and float(near.group(1)) > 1.0 and float(near.group(2)) > 0.1, out
    assert re.search(r"h100-sxm\s+1  no configuration meets the targets \(none fits in memory\)", out), out


def test_list_precisions_names_every_format_and_its_vendor_spellings(capsys):
    from dse.catalog.precision import NAMES
    code, out, _ = run(capsys, "list", "precisions")
    assert code == 0 and all(n in out for n in NAMES) and "fp8-cs" in out and "mxfp8" in out


def test_every_dse_list_the_help_texts_point_to_exists():
    # a help text or column doc that says `dse list X` names a listing that exists
    from dse import schema
    from dse.listing import WHAT
    texts = [c.doc for c in schema.columns().values()]
    parser = build_parser()
    for action in parser._subparsers._group_actions[0].choices.values():
        texts += [a.help or "" for a in action._actions] + [action.description or ""]
    named = set(re.findall(r"dse list ([a-z]+)", " ".join(texts)))   # WHAT in capitals is the placeholder
    assert named and named <= set(WHAT), named - set(WHAT)


def test_command_descriptions_are_whole_sentences():
    # each --help description ends a sentence, never mid-way at ';' or ':' (a docstring's first line alone)
    parser = build_parser()
    for name, action in parser._subparsers._group_actions[0].choices.items():
        text = (action.description or "").strip()
        assert text and text[-1] in ".)`", f"dse {name}: {text[-40:]!r}"
