"""`dse validate`: per row the measured and predicted value and the error, per source the mean (dse.validate)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd

from dse.validate import SUITES, collect, summary


def run(args) -> int:
    results = collect(args.suite or None)
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
        print(table.round(2).to_string())
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare predictions with published measurements")
    p.add_argument("--json", action="store_true", help="print rows and summary as one JSON object instead of text")
    p.add_argument("--suite", action="append", choices=sorted(SUITES), help=f"only this suite; repeat for several; one of {', '.join(sorted(SUITES))} "
                        "(default: every suite)")
    p.set_defaults(func=run)
