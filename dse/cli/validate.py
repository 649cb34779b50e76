"""`dse validate`: per row the measured and predicted value and the error, per source the mean (dse.validate)."""
from __future__ import annotations

import json
import re
import sys

import numpy as np
import pandas as pd

from dse.cli.output import lead
from dse.errors import ConfigError
from dse.validate import SUITES, collect, summary

MATCHED = ("id", "source", "model", "system")


def _phrase_pattern(phrase: str) -> str:
    """A regex matching `phrase`'s words as consecutive whole words ('b200' is not in 'GB200');
    never matches where the phrase has no word."""
    words = re.findall(r"[0-9a-z]+", str(phrase).lower())
    if not words:
        return r"(?!)"
    return r"(?<![0-9a-z])" + r"[^0-9a-z]+".join(map(re.escape, words)) + r"(?![0-9a-z])"


def matching(results: pd.DataFrame, phrases) -> pd.DataFrame:
    """The rows whose id, source, model or system holds every phrase as whole words (case-insensitive):
    the runs closest to a user's own question (`--where qwen3 --where b200`)."""
    keep = np.ones(len(results), dtype=bool)
    for phrase in phrases or ():
        pattern = _phrase_pattern(phrase)
        keep &= np.logical_or.reduce([results[c].astype(str).str.contains(pattern, case=False, regex=True).to_numpy()
                                      for c in MATCHED])
    if not keep.any():
        raise ConfigError(f"--where: no validation row has {' and '.join(map(repr, phrases))} in its id, source, model "
                          "or system; try a model family (llama, qwen3, deepseek), a GPU (h100, b200) or a source "
                          "(megatron-bridge, aiconfigurator)")
    return results[keep].reset_index(drop=True)


def run(args) -> int:
    results = matching(collect(args.suite or None), args.where)
    table = summary(results)
    if args.json:
        payload = {"rows": json.loads(results.to_json(orient="records")),
                   "summary": json.loads(table.reset_index(names="source").to_json(orient="records"))}
        json.dump(payload, sys.stdout, indent=1)
        print()
        return 0
    with pd.option_context("display.width", 200, "display.max_rows", 1000, "display.max_colwidth", 28):
        shown = results.copy()
        shown["measured"] = shown["measured"].map(lambda v: f"{v:.4g}")
        shown["predicted"] = shown["predicted"].map(lambda v: "" if np.isnan(v) else f"{v:.4g}")
        shown["error_pct"] = shown["error_pct"].map(lambda v: "" if np.isnan(v) else f"{v:+.1f}")
        # a compared run dse holds infeasible (training: out of memory, mostly) says so
        shown["fits"] = np.where(shown["fits"].astype(bool) | (shown["skipped"] != ""), "", "no")
        print(shown[["id", "source", "model", "system", "metric", "unit", "measured", "predicted",
                     "error_pct", "fits", "skipped"]].to_string(index=False))
        print()
        print("Mean absolute percentage error per source (not_fit: measured runs dse holds infeasible):")
        print(table.round(2).to_string() if len(table) else "(none: every row shown is skipped, see its reason)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare predictions with published measurements", description=lead(__doc__))
    p.add_argument("--json", action="store_true", help="print rows and summary as one JSON object instead of text")
    p.add_argument("--suite", action="append", choices=sorted(SUITES), help=f"only this suite; repeat for several; one of {', '.join(sorted(SUITES))} "
                        "(default: every suite)")
    p.add_argument("--where", action="append", metavar="TEXT",
                   help="only rows whose id, source, model or system holds TEXT as whole words (case-insensitive: "
                        "'b200' is not 'GB200'); repeat to require several; the per-source means then cover those "
                        "rows (default: every row)")
    p.set_defaults(func=run)
